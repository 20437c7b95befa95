package local

import (
	"testing"
	"unsafe"

	"github.com/hybridlimit/hybridlimit/internal/keyed"
)

// TestLayout holds the sizes the memory budget relies on.
func TestLayout(t *testing.T) {
	if s := unsafe.Sizeof(keyed.Entry[keyState]{}); s > 64 {
		t.Errorf("a Limiter's entry is %d bytes, want at most 64 (one size class, one line)", s)
	}
	if s := unsafe.Sizeof(logBlock{}); s > 208 {
		t.Errorf("a sliding window log's entry is %d bytes, want at most 208 (the memory budget's rows)", s)
	}
}
