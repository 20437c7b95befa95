package keyed

import (
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
)

// TestLayout holds the shard layout the false-sharing budget relies on.
func TestLayout(t *testing.T) {
	assert.Equal(t, 2*cacheLine, int(unsafe.Sizeof(shard[int]{})), "shard's size in bytes")
	assert.Equal(t, cacheLine, int(unsafe.Offsetof(shard[int]{}.mu)), "shard.mu's offset: on another line, lookups and inserts would share one")
}
