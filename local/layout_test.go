package local

import (
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"

	"github.com/hybridlimit/hybridlimit/internal/keyed"
)

// TestLayout holds the sizes the memory budget relies on.
func TestLayout(t *testing.T) {
	assert.LessOrEqual(t, unsafe.Sizeof(keyed.Entry[keyState]{}), uintptr(64), "a Limiter's entry in bytes (one size class, one line)")
	assert.LessOrEqual(t, unsafe.Sizeof(logBlock{}), uintptr(208), "a sliding window log's entry in bytes (the memory budget's rows)")
}
