package keyed

import (
	"errors"
	"fmt"
	"math/bits"
	"sync"
	"sync/atomic"
)

// Store is a sharded table of per-key values: the key table of a
// local.Limiter, and of the hybrid limiter's leases. It is built for hot
// paths:
//
//   - Looking up a key already held takes no lock and allocates nothing: the
//     shards are power-of-two open-addressing tables whose slots readers
//     load atomically. Inserts, evictions and resizes take the shard's
//     mutex.
//   - Each entry has a mutex of its own, which guards its Value (a value may
//     also guard parts of itself with atomics, as the local Limiter's does).
//     A caller locks the entry it got, checks it was not evicted in between
//     (Evicted), and gets it again if it was: Lock and LockAll do this.
//   - Keys are evicted only when the idle function given to New says their
//     value is back to its initial state. The store holds at most MaxKeys;
//     beyond that Get returns nil and the caller applies its overflow
//     policy.
//
// The key bytes are not kept: comparing them would cost a dependent cache
// miss per lookup among many keys, and a copy of every key. A key is
// identified by 128 bits held in its entry: a key of up to 15 bytes (user
// IDs, IPv4 addresses) by its bytes and its length, exactly; a longer one by
// a 64-bit hash of its bytes under a random seed and a mark. It is found by
// a 64-bit hash under secret random keys: of those 128 bits for a short key
// (two rounds of a 64×64→128-bit multiply folded, wyhash's mix, cheaper
// than hashing the bytes again), and of its bytes under a second,
// independent seed for a long one. Two distinct long keys are taken for one
// with probability about 2^-127 per pair (10^-26 for a million keys held),
// far below hardware error rates; the seeds are secret, so a client cannot
// aim for a collision, nor for one probe chain.
//
// A Store is safe for concurrent use.
type Store[V any] struct {
	shards   []shard[V]
	shift    uint // a hash's top bits pick its shard (shardOf)
	keys     keyer
	perShard int
	idle     func(v *V, now int64) bool
	tomb     *Entry[V] // marks the slot of an evicted entry
	// empty is the table of every shard that holds no key: no slots, so a
	// store that holds few keys costs its shards and little more. A
	// shard's first insert replaces it (insert), and a sweep that empties
	// a shard puts it back (Sweep).
	empty    *table[V]
	newEntry func() *Entry[V]
}

// Entry is one key's place in a Store: a Value guarded by a mutex. Lock it
// before touching Value; an Entry must not be copied.
type Entry[V any] struct {
	// The key's identity (keyer.place), set before the entry is published
	// and never changed: lookups compare it without locking.
	id0, id1 uint64
	// Value is the caller's state for the key; a new key starts with V's
	// zero value. It comes right after the identity, so that a lookup and
	// the first words of the value share a cache line.
	Value   V
	mu      sync.Mutex
	evicted bool // guarded by mu
}

// Lock locks e.
func (e *Entry[V]) Lock() { e.mu.Lock() }

// Unlock unlocks e.
func (e *Entry[V]) Unlock() { e.mu.Unlock() }

// Evicted reports whether e was evicted since the caller got it. The caller
// holds e's lock; an evicted entry is no longer in the store, and the key
// must be looked up again.
func (e *Entry[V]) Evicted() bool { return e.evicted }

// LockLive locks e and reports true, unless e was evicted since the caller
// got it: then it leaves e unlocked and reports false, and the caller looks
// the key up again.
func (e *Entry[V]) LockLive() bool {
	e.mu.Lock()
	if e.evicted {
		e.mu.Unlock()
		return false
	}
	return true
}

// standaloneID is the id1 of an entry that is no key's: no key's identity
// has it (keyer.place).
const standaloneID = 1

// MakeStandalone marks e, an entry its owner holds outside any store (such
// as a limiter's one entry shared by the keys that do not fit), as no key's.
// Call it before e is used.
func (e *Entry[V]) MakeStandalone() { e.id1 = standaloneID }

// Standalone reports whether e was marked by MakeStandalone.
func (e *Entry[V]) Standalone() bool { return e.id1 == standaloneID }

// Defaults for Config, and the bound on Shards.
const (
	DefaultShards  = 64
	DefaultMaxKeys = 1 << 20
	MaxShards      = 1 << 16
)

// ErrInvalidConfig reports a bad Config. New's errors match it (errors.Is)
// but print only the field and what is wrong with it, so that a caller
// wrapping its own sentinel names the field once.
var ErrInvalidConfig = errors.New("keyed: invalid config")

// configError is New's error for a bad field.
type configError string

func (e configError) Error() string { return string(e) }

// Is makes a configError match ErrInvalidConfig.
func (e configError) Is(target error) bool { return target == ErrInvalidConfig }

// Config sizes a Store.
type Config struct {
	// Shards is the number of partitions, a power of two from 1 to 65,536.
	// Default DefaultShards (64).
	Shards int
	// MaxKeys caps the keys held, enforced per shard at ⌈MaxKeys/Shards⌉.
	// Default DefaultMaxKeys (1,048,576).
	MaxKeys int
}

// New returns a Store sized by cfg. idle reports whether a value is back to
// its initial state at now, so that its key may be forgotten: it is called
// with the entry locked, on the slow paths only (sweeps, and inserts that
// need room), and when it returns true the entry is evicted. An entry whose
// lock is held when a sweep reaches it is busy, so not idle: the sweep
// passes it by (a sweep never waits for an entry's lock while holding its
// shard's, so a caller holding an entry may call into the Store).
//
// newEntry, when not nil, allocates the entries of new keys and of
// replacements, zero but for what the owner puts in their Value (the local
// Limiter's sliding logs: their state in the same object). It may be
// called under a shard's lock, and must not call back into the store.
//
// A bad field is reported with an error matching ErrInvalidConfig.
func New[V any](cfg Config, idle func(v *V, now int64) bool, newEntry func() *Entry[V]) (*Store[V], error) {
	if cfg.Shards == 0 {
		cfg.Shards = DefaultShards
	}
	if cfg.Shards < 1 || cfg.Shards > MaxShards || cfg.Shards&(cfg.Shards-1) != 0 {
		return nil, configError(fmt.Sprintf("Shards %d: must be a power of two from 1 to %d", cfg.Shards, MaxShards))
	}
	if cfg.MaxKeys == 0 {
		cfg.MaxKeys = DefaultMaxKeys
	}
	if cfg.MaxKeys < 1 {
		return nil, configError(fmt.Sprintf("MaxKeys %d: must be positive", cfg.MaxKeys))
	}
	if idle == nil {
		return nil, configError("idle function: required")
	}
	s := &Store[V]{
		shards:   make([]shard[V], cfg.Shards),
		shift:    uint(63 - bits.TrailingZeros(uint(cfg.Shards))),
		keys:     newKeyer(),
		perShard: (cfg.MaxKeys + cfg.Shards - 1) / cfg.Shards,
		idle:     idle,
		tomb:     new(Entry[V]),
		empty:    new(table[V]),
		newEntry: newEntry,
	}
	for i := range s.shards {
		s.shards[i].tab.Store(s.empty)
	}
	return s, nil
}

// Get returns key's entry, inserting it with a zero Value if the key is
// new. It returns nil when the key is new and the store holds MaxKeys keys,
// none of which it could evict: evictions are judged at now (µs since the
// epoch), which must be on the same timeline as the values' times.
func (s *Store[V]) Get(key string, now int64) *Entry[V] {
	var id0, id1, h1 uint64
	if uint(len(key)-8) < 8 { // 8 to 15 bytes: placed here, without a call
		id0, id1 = ident8(key)
		h1 = s.keys.hash(id0, id1)
	} else {
		id0, id1, h1 = s.keys.place(key)
	}
	sh := s.shardOf(h1)
	if e := sh.tab.Load().find(h1, id0, id1); e != nil {
		return e
	}
	return s.insert(sh, h1, id0, id1, now)
}

// shardOf returns the shard of the key whose hash is h: its top bits, as
// many as there are shard bits. The shift is split in two so that none
// reaches 64, which a shift then need not test for.
func (s *Store[V]) shardOf(h uint64) *shard[V] {
	return &s.shards[h>>1>>(s.shift&63)]
}

// Sweep evicts every entry whose value is idle at now and returns how many
// it evicted.
func (s *Store[V]) Sweep(now int64) int {
	total := 0
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		t := sh.tab.Load()
		total += s.sweep(sh, now, len(t.slots))
		switch {
		case sh.live == 0 && t != s.empty:
			// Nothing held: the table goes, until the shard's next key.
			sh.tab.Store(s.empty)
			sh.used, sh.hand = 0, 0
		case sh.used-sh.live > sh.live && len(t.slots) > minTableSize:
			s.rebuild(sh) // mostly tombstones: shrink
		}
		sh.mu.Unlock()
	}
	return total
}

// Range calls f for every entry held, unlocked, until f returns false. An
// entry may be evicted while f runs: f locks it and checks Evicted. Entries
// inserted during the call may be missed.
func (s *Store[V]) Range(f func(e *Entry[V]) bool) {
	for i := range s.shards {
		t := s.shards[i].tab.Load()
		for j := range t.slots {
			if e := t.slots[j].ent.Load(); e != nil && e != s.tomb {
				if !f(e) {
					return
				}
			}
		}
	}
}

// shard is one of a Store's power-of-two partitions of the key space.
// Lookups read tab without locking; mu serializes inserts, evictions and
// rebuilds. The padding puts tab, which every lookup reads, and the words
// inserts write on cache lines of their own, and keeps both off the
// neighbouring shards' lines.
type shard[V any] struct {
	tab atomic.Pointer[table[V]]
	_   [cacheLine - 8]byte

	mu        sync.Mutex
	live      int // entries held
	used      int // slots holding an entry or a tombstone
	hand      int // next slot the incremental sweep looks at
	evictions uint64
	overflows uint64
	_         [cacheLine - 6*8]byte
}

// cacheLine is the size the padding of shared words assumes.
const cacheLine = 64

const minTableSize = 8

// evictIfIdle evicts the entry in sl if its value is idle at now. An entry
// whose lock is held is in use, and passed by: waiting for it here, holding
// sh.mu, could deadlock with a holder of the entry calling Replace. The
// caller holds sh.mu.
func (s *Store[V]) evictIfIdle(sh *shard[V], sl *slot[V], now int64) bool {
	e := sl.ent.Load()
	if e == nil || e == s.tomb || !e.mu.TryLock() {
		return false
	}
	ok := !e.evicted && s.idle(&e.Value, now)
	if ok {
		e.evicted = true
	}
	e.mu.Unlock()
	if ok {
		sl.ent.Store(s.tomb)
		sh.live--
		sh.evictions++
	}
	return ok
}

// sweep looks at up to n entries, from the sweep hand on and at most once
// around the table, and evicts those idle at now. It returns how many it
// evicted. The caller holds sh.mu.
func (s *Store[V]) sweep(sh *shard[V], now int64, n int) int {
	t := sh.tab.Load()
	evicted, seen := 0, 0
	for range t.slots {
		if seen == n {
			break
		}
		sh.hand &= int(t.mask)
		sl := &t.slots[sh.hand]
		sh.hand++
		if e := sl.ent.Load(); e == nil || e == s.tomb {
			continue
		}
		seen++
		if s.evictIfIdle(sh, sl, now) {
			evicted++
		}
	}
	return evicted
}

// rebuild copies the live entries into a fresh table sized for them, which
// drops the tombstones. The caller holds sh.mu.
func (s *Store[V]) rebuild(sh *shard[V]) *table[V] {
	old := sh.tab.Load()
	size := minTableSize
	for size < 2*(sh.live+1) {
		size *= 2
	}
	t := newTable[V](size)
	for i := range old.slots {
		sl := &old.slots[i]
		if e := sl.ent.Load(); e != nil && e != s.tomb {
			t.put(sl.hash.Load(), e, s.tomb)
		}
	}
	sh.tab.Store(t)
	sh.used = sh.live
	return t
}

// overflowSweep is how many keys an insert into a full shard may look at to
// make room, which bounds the work a flood of new keys causes per request.
const overflowSweep = 64

// insert returns the entry for the key of hash h1 and identity id0, id1,
// creating it if it is absent. It returns nil when the shard holds perShard keys and none of
// those it looked at could be evicted.
func (s *Store[V]) insert(sh *shard[V], h1, id0, id1 uint64, now int64) *Entry[V] {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	t := sh.tab.Load()
	if e := t.find(h1, id0, id1); e != nil {
		return e
	}
	if sh.live >= s.perShard && s.sweep(sh, now, overflowSweep) == 0 {
		sh.overflows++
		return nil
	}
	if (sh.used+1)*4 > len(t.slots)*3 {
		// About to pass 3/4 full (or the shard's first key, in the empty
		// table): evict what is idle, then rebuild, which grows the table
		// only if the live entries need it.
		s.sweep(sh, now, len(t.slots))
		t = s.rebuild(sh)
	}
	e := s.alloc(id0, id1)
	if t.put(h1, e, s.tomb) {
		sh.used++
	}
	sh.live++
	return e
}

// alloc returns a new entry for the key of identity id0, id1.
func (s *Store[V]) alloc(id0, id1 uint64) *Entry[V] {
	var e *Entry[V]
	if s.newEntry != nil {
		e = s.newEntry()
	} else {
		e = new(Entry[V])
	}
	e.id0, e.id1 = id0, id1
	return e
}

// Replace puts a new entry for key in the place of old, its value set by
// init before anyone can see it, and marks old evicted: a holder of old
// finds that it was evicted and looks key up again, to find the new entry.
// It is how a value that lock-free readers hold (the local Limiter's packed
// states) changes its meaning: in a new entry, never in place. The caller
// holds old's lock, and old is key's entry.
func (s *Store[V]) Replace(key string, old *Entry[V], init func(v *V)) {
	ne := s.alloc(old.id0, old.id1)
	init(&ne.Value)
	_, _, h1 := s.keys.place(key) // old holds key's identity
	sh := s.shardOf(h1)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	old.evicted = true
	t := sh.tab.Load()
	if len(t.slots) == 0 {
		return // not held (cannot happen, as below)
	}
	for i := h1 & t.mask; ; i = (i + 1) & t.mask {
		sl := &t.slots[i]
		switch sl.ent.Load() {
		case nil:
			return // not held (cannot happen: evicting old needs its lock)
		case old:
			sl.ent.Store(ne)
			return
		}
	}
}
