package keyed

import (
	"encoding/binary"
	"hash/maphash"
	"math/bits"
	"math/rand/v2"
	"unsafe"
)

// How a Store identifies a key (its 128-bit identity, which an entry holds
// instead of the key's bytes) and places it (its 64-bit hash): see Store.

// keyer identifies and places keys (see Store); its seeds and keys are
// secret and random.
type keyer struct {
	seed1, seed2 maphash.Seed // of a long key's hash (seed1) and identity (seed2)
	mix          [3]uint64    // the keys of a short key's hash
}

func newKeyer() keyer {
	return keyer{
		seed1: maphash.MakeSeed(),
		seed2: maphash.MakeSeed(),
		mix:   [3]uint64{rand.Uint64() | 1, rand.Uint64() | 1, rand.Uint64() | 1},
	}
}

// place returns key's identity, which an entry holds, and the hash that
// places it: one call per lookup.
//
// The identity: id1 is at least 1<<56 (a smaller one marks an entry that is
// not a key's; see standaloneID). A key of up to 15 bytes is its bytes and its
// length, packed without loss (the bytes are read as words, overlapping
// where the length is not a multiple of one; with the length, that
// determines them), and its hash is a keyed mix of that identity. A longer
// key is a hash of its bytes and a mark no short key's length byte takes,
// and its hash is another hash of its bytes, under an independent seed.
func (k *keyer) place(key string) (id0, id1, h uint64) {
	n := len(key)
	switch {
	case n > 15:
		return maphash.String(k.seed2, key), 0xff << 56, maphash.String(k.seed1, key)
	case n >= 8:
		id0, id1 = ident8(key)
	case n >= 4: // bytes 0-3 and n-4 to n-1
		id0, id1 = uint64(le32(key))|uint64(le32(key[n-4:]))<<32, uint64(n+1)<<56
	case n > 0: // bytes 0, n/2 and n-1: all of them
		id0, id1 = uint64(key[0])|uint64(key[n/2])<<8|uint64(key[n-1])<<16, uint64(n+1)<<56
	default:
		id0, id1 = 0, 1<<56
	}
	return id0, id1, k.hash(id0, id1)
}

// ident8 is the identity of a key of 8 to 15 bytes: bytes 0-7, then 8 to
// n-1 from the word ending at n-1, and the length. The word is shifted by
// 8·(16−n) bits, 64 for an 8-byte key, which must leave nothing: the shift
// is split in two so that neither part reaches 64.
func ident8(key string) (id0, id1 uint64) {
	n := len(key)
	return le64(key), le64(key[n-8:])>>1>>((8*(16-n)-1)&63) | uint64(n+1)<<56
}

// hash is the hash of a short key's identity.
func (k *keyer) hash(id0, id1 uint64) uint64 {
	return mix(mix(id0^k.mix[0], id1^k.mix[1]), k.mix[2])
}

// mix folds the 128-bit product of a and b into 64 bits.
func mix(a, b uint64) uint64 {
	hi, lo := bits.Mul64(a, b)
	return hi ^ lo
}

// le64 is the little-endian word of s's first 8 bytes, which s must have.
// It reads them in place, in one load where the target allows it, and is
// cheap enough to inline where a short key is placed.
func le64(s string) uint64 {
	return binary.LittleEndian.Uint64(unsafe.Slice(unsafe.StringData(s), 8))
}

// le32 is the little-endian word of s's first 4 bytes (one load).
func le32(s string) uint32 {
	_ = s[3]
	return uint32(s[0]) | uint32(s[1])<<8 | uint32(s[2])<<16 | uint32(s[3])<<24
}
