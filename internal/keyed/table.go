package keyed

import "sync/atomic"

// A shard's table: open addressing with linear probing, read without a
// lock (find) and written under the shard's (put).

// slot is a table cell. A writer stores hash before ent; a reader loads ent
// first, so a non-nil ent always comes with its hash.
type slot[V any] struct {
	hash atomic.Uint64
	ent  atomic.Pointer[Entry[V]]
}

// table is an open-addressing hash table with linear probing. Its length is
// a power of two and at least one slot is always empty, so every probe ends;
// or it has no slot at all (Store.empty), and nothing is put in it.
type table[V any] struct {
	slots []slot[V]
	mask  uint64
}

func newTable[V any](size int) *table[V] {
	return &table[V]{slots: make([]slot[V], size), mask: uint64(size - 1)}
}

// find returns the entry of the key whose hash is h1 and identity id0, id1,
// or nil. It takes no lock.
//
// A tombstone never matches: its identity is zero, and no key's is (a key's
// id1 is at least 1<<56).
func (t *table[V]) find(h1, id0, id1 uint64) *Entry[V] {
	slots := t.slots
	if len(slots) == 0 {
		return nil // the store's empty table: the shard holds no key
	}
	for i := h1; ; i++ {
		s := &slots[i&uint64(len(slots)-1)]
		e := s.ent.Load()
		if e == nil {
			return nil
		}
		if s.hash.Load() == h1 && e.id0 == id0 && e.id1 == id1 {
			return e
		}
	}
}

// put stores e for a key known to be absent, in the first empty or
// tombstone slot of its probe chain. It reports whether it filled an empty
// slot (rather than reusing a tombstone). The caller holds the shard's lock.
func (t *table[V]) put(h1 uint64, e, tomb *Entry[V]) (filledEmpty bool) {
	for i := h1 & t.mask; ; i = (i + 1) & t.mask {
		s := &t.slots[i]
		old := s.ent.Load()
		if old == nil || old == tomb {
			s.hash.Store(h1)
			s.ent.Store(e)
			return old == nil
		}
	}
}
