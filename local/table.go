package local

import (
	"sync"
	"sync/atomic"
)

// entry is one key's state. The shard's table points at it; mu guards the
// state and lim. An entry is evicted by setting lim to nil under mu: a
// goroutine that found it in a table before the eviction sees lim == nil
// once it holds mu and looks the key up again.
//
// A key is identified by two 64-bit hashes of its bytes under two
// independent random seeds (maphash): h1 in the table slot, h2 here. The key
// bytes themselves are not kept. Comparing them would cost a dependent cache
// miss per decision among many keys and a copy of every key; two distinct
// keys are taken for one with probability 2^-128 per pair (about 10^-27 for
// a million keys held), far below hardware error rates, and the seeds are
// secret, so a client cannot craft a collision. See docs/algorithms.md.
//
// The layout is 64 bytes on 64-bit platforms, one allocation size class
// and one cache line (TestLayout holds it there).
type entry struct {
	mu  sync.Mutex
	lim *Limit // the limit state is expressed in; nil once evicted
	state
	h2 uint64
	_  [8]byte
}

// slot is a table cell. A writer stores hash before ent; a reader loads ent
// first, so a non-nil ent always comes with its hash.
type slot struct {
	hash atomic.Uint64
	ent  atomic.Pointer[entry]
}

// tombstone marks a slot whose entry was evicted. It keeps probe chains
// intact until the table is rebuilt or the slot is reused.
var tombstone = new(entry)

// table is an open-addressing hash table with linear probing. Its length is
// a power of two and at least one slot is always empty, so every probe ends.
type table struct {
	slots []slot
	mask  uint64
}

func newTable(size int) *table {
	return &table{slots: make([]slot, size), mask: uint64(size - 1)}
}

// find returns the entry whose hashes are h and h2, or nil. It takes no
// lock.
func (t *table) find(h, h2 uint64) *entry {
	for i := h & t.mask; ; i = (i + 1) & t.mask {
		s := &t.slots[i]
		e := s.ent.Load()
		if e == nil {
			return nil
		}
		if s.hash.Load() == h && e.h2 == h2 && e != tombstone {
			return e
		}
	}
}

// put stores e for a key known to be absent, in the first empty or
// tombstone slot of its probe chain. It reports whether it filled an empty
// slot (rather than reusing a tombstone). The caller holds the shard's lock.
func (t *table) put(h uint64, e *entry) (filledEmpty bool) {
	for i := h & t.mask; ; i = (i + 1) & t.mask {
		s := &t.slots[i]
		old := s.ent.Load()
		if old == nil || old == tombstone {
			s.hash.Store(h)
			s.ent.Store(e)
			return old == nil
		}
	}
}

// shard is one of a Limiter's power-of-two partitions of the key space.
// Lookups read tab without locking; mu serializes inserts, evictions and
// rebuilds. The padding puts tab, which every lookup reads, and the words
// inserts write on cache lines of their own, and keeps both off the
// neighbouring shards' lines.
type shard struct {
	tab atomic.Pointer[table]
	_   [cacheLine - 8]byte

	mu        sync.Mutex
	live      int // entries held
	used      int // slots holding an entry or a tombstone
	hand      int // next slot the incremental sweep looks at
	evictions uint64
	overflows uint64

	_ [cacheLine - 6*8]byte
}

// cacheLine is the size the padding of shared words assumes.
const cacheLine = 64

const minTableSize = 8

func (sh *shard) init() { sh.tab.Store(newTable(minTableSize)) }

// evictIfInitial evicts the entry in s if its state is back to the initial
// state at now. The caller holds sh.mu.
func (sh *shard) evictIfInitial(s *slot, now int64) bool {
	e := s.ent.Load()
	if e == nil || e == tombstone {
		return false
	}
	e.mu.Lock()
	ok := e.lim != nil && e.lim.initial(&e.state, now)
	if ok {
		e.lim = nil
		e.log = nil
	}
	e.mu.Unlock()
	if ok {
		s.ent.Store(tombstone)
		sh.live--
		sh.evictions++
	}
	return ok
}

// sweep looks at up to n entries, from the sweep hand on and at most once
// around the table, and evicts those back in their initial state. It returns
// how many it evicted. The caller holds sh.mu.
func (sh *shard) sweep(now int64, n int) int {
	t := sh.tab.Load()
	evicted, seen := 0, 0
	for range t.slots {
		if seen == n {
			break
		}
		sh.hand &= int(t.mask)
		s := &t.slots[sh.hand]
		sh.hand++
		if e := s.ent.Load(); e == nil || e == tombstone {
			continue
		}
		seen++
		if sh.evictIfInitial(s, now) {
			evicted++
		}
	}
	return evicted
}

// rebuild copies the live entries into a fresh table sized for them, which
// drops the tombstones. The caller holds sh.mu.
func (sh *shard) rebuild() *table {
	old := sh.tab.Load()
	size := minTableSize
	for size < 2*(sh.live+1) {
		size *= 2
	}
	t := newTable(size)
	for i := range old.slots {
		s := &old.slots[i]
		if e := s.ent.Load(); e != nil && e != tombstone {
			t.put(s.hash.Load(), e)
		}
	}
	sh.tab.Store(t)
	sh.used = sh.live
	return t
}

// overflowSweep is how many keys an insert into a full shard may look at to
// make room, which bounds the work a flood of new keys causes per request.
const overflowSweep = 64

// insert returns the entry for the key hashed to h and h2, creating it if it
// is absent. It returns
// nil when the shard holds perShard keys and none of the slots it looked at
// could be evicted.
func (sh *shard) insert(h, h2 uint64, lim *Limit, now int64, perShard int) *entry {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	t := sh.tab.Load()
	if e := t.find(h, h2); e != nil {
		return e
	}
	if sh.live >= perShard && sh.sweep(now, overflowSweep) == 0 {
		sh.overflows++
		return nil
	}
	if (sh.used+1)*4 > len(t.slots)*3 {
		// About to pass 3/4 full: evict what is idle, then rebuild, which
		// grows the table only if the live entries need it.
		sh.sweep(now, len(t.slots))
		t = sh.rebuild()
	}
	e := &entry{lim: lim, h2: h2}
	if t.put(h, e) {
		sh.used++
	}
	sh.live++
	return e
}
