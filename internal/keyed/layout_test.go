package keyed

import (
	"testing"
	"unsafe"
)

// TestLayout holds the shard layout the false-sharing budget relies on.
func TestLayout(t *testing.T) {
	if s := unsafe.Sizeof(shard[int]{}); s != 2*cacheLine {
		t.Errorf("shard is %d bytes, want %d", s, 2*cacheLine)
	}
	if o := unsafe.Offsetof(shard[int]{}.mu); o != cacheLine {
		t.Errorf("shard.mu at offset %d, want %d: lookups and inserts would share a line", o, cacheLine)
	}
}
