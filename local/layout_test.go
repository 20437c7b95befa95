package local

import (
	"testing"
	"unsafe"
)

// TestLayout holds the sizes the memory and false-sharing budgets rely on.
func TestLayout(t *testing.T) {
	if s := unsafe.Sizeof(Entry[keyState]{}); s > 64 {
		t.Errorf("a Limiter's entry is %d bytes, want at most 64 (one size class, one line)", s)
	}
	if s := unsafe.Sizeof(logBlock{}); s > 208 {
		t.Errorf("a sliding window log's entry is %d bytes, want at most 208 (the memory budget's rows)", s)
	}
	if s := unsafe.Sizeof(shard[keyState]{}); s != 2*cacheLine {
		t.Errorf("shard is %d bytes, want %d", s, 2*cacheLine)
	}
	if o := unsafe.Offsetof(shard[keyState]{}.mu); o != cacheLine {
		t.Errorf("shard.mu at offset %d, want %d: lookups and inserts would share a line", o, cacheLine)
	}
}
