package keyed

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestKeyIDShortKeysExact: keys of up to 15 bytes that differ, if only by
// length or by one byte anywhere, have different identities, which the
// store compares instead of the keys.
func TestKeyIDShortKeysExact(t *testing.T) {
	s := newIdleStore(t, Config{})
	seen := map[[2]uint64]string{}
	add := func(k string) {
		id0, id1, _ := s.keys.place(k)
		mark := uint64(len(k) + 1) // the length, or the long-key mark; never below 1, a standalone entry's
		if len(k) > 15 {
			mark = 0xff
		}
		require.Equal(t, mark, id1>>56, "keys.place(%q): id1 %#x, want the mark %#x in its top byte", k, id1, mark)
		if prev, ok := seen[[2]uint64{id0, id1}]; ok {
			require.Equal(t, prev, k, "keys.place(%q) = keys.place(%q)", k, prev)
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
	assert.Equal(t, 16*3+3*(15*16/2)-2, len(seen), "identities") // the empty key is one key for every c
	_, id1, _ := s.keys.place(strings.Repeat("k", 16))
	assert.Equal(t, uint64(0xff<<56), id1, "a 16-byte key's id1, want the long-key mark")
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
	s := newIdleStore(f, Config{})
	f.Fuzz(func(t *testing.T, a, b string) {
		if len(a) > 15 || len(b) > 15 {
			return
		}
		a0, a1, _ := s.keys.place(a)
		b0, b1, _ := s.keys.place(b)
		require.Equal(t, a == b, a0 == b0 && a1 == b1, "same identity: keys.place(%q) = %#x %#x, keys.place(%q) = %#x %#x", a, a0, a1, b, b0, b1)
		ea, eb := s.Get(a, 0), s.Get(b, 0)
		assert.Equal(t, a == b, ea == eb, "same entry: Get(%q) and Get(%q)", a, b)
	})
}
