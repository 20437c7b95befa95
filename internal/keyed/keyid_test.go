package keyed

import (
	"strings"
	"testing"
)

func newIDStore(t testing.TB) *Store[int] {
	s, err := New[int](Config{}, func(*int, int64) bool { return true }, nil)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestKeyIDShortKeysExact: keys of up to 15 bytes that differ, if only by
// length or by one byte anywhere, have different identities, which the
// store compares instead of the keys.
func TestKeyIDShortKeysExact(t *testing.T) {
	s := newIDStore(t)
	seen := map[[2]uint64]string{}
	add := func(k string) {
		id0, id1, _ := s.keys.place(k)
		mark := uint64(len(k) + 1) // the length, or the long-key mark; never below 1, a standalone entry's
		if len(k) > 15 {
			mark = 0xff
		}
		if id1>>56 != mark {
			t.Fatalf("keys.place(%q): id1 %#x, want the mark %#x in its top byte", k, id1, mark)
		}
		if prev, ok := seen[[2]uint64{id0, id1}]; ok && prev != k {
			t.Fatalf("keys.place(%q) = keys.place(%q)", k, prev)
		}
		seen[[2]uint64{id0, id1}] = k
	}
	for n := 0; n <= 15; n++ {
		for _, c := range []byte{0, 'a', 0xff} {
			base := strings.Repeat(string(c), n)
			add(base)
			for i := range n { // one byte changed, at every position
				b := []byte(base)
				b[i] ^= 0x5a
				add(string(b))
			}
		}
	}
	if len(seen) != 16*3+3*(15*16/2)-2 { // the empty key is one key for every c
		t.Errorf("%d identities", len(seen))
	}
	long := strings.Repeat("k", 16)
	if _, id1, _ := s.keys.place(long); id1 != 0xff<<56 {
		t.Errorf("a 16-byte key's id1 = %#x, want the long-key mark", id1)
	}
}

// FuzzKeyID: two different keys of up to 15 bytes never share an identity;
// the store keeps them apart.
func FuzzKeyID(f *testing.F) {
	f.Add("aaaaaaaaa", "aaaaaaaaaa")
	f.Add("", "\x00")
	f.Add("203.0.113.7", "203.0.113.70")
	f.Add("user:0000042", "user:0000043")
	// An 8-byte key whose last byte, merged with the length mark, reads as
	// a 10-byte key's mark, and that key: their identities must differ.
	f.Add("ab\x00\x00\x00\x00\x00\x02", "ab\x00\x00\x00\x00\x00\x02ab")
	s := newIDStore(f)
	f.Fuzz(func(t *testing.T, a, b string) {
		if len(a) > 15 || len(b) > 15 {
			return
		}
		a0, a1, _ := s.keys.place(a)
		b0, b1, _ := s.keys.place(b)
		if (a == b) != (a0 == b0 && a1 == b1) {
			t.Fatalf("keys.place(%q) = %#x %#x, keys.place(%q) = %#x %#x", a, a0, a1, b, b0, b1)
		}
		ea, eb := s.Get(a, 0), s.Get(b, 0)
		if (a == b) != (ea == eb) {
			t.Fatalf("Get(%q) and Get(%q): same entry %v", a, b, ea == eb)
		}
	})
}
