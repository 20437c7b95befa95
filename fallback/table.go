package fallback

import (
	"sync"
	"sync/atomic"

	"github.com/hybridlimit/hybridlimit/internal/gossiphook"
)

// digest identifies a rule's key on the wire (gossiphook.Digest): a
// collision-resistant digest of the rule and key that every node computes
// alike. The raw user key never leaves the node.
type digest = gossiphook.Digest

// digestSize is the length of a digest.
const digestSize = len(digest{})

const (
	numShards = 64 // a power of two
	// winBits is how many low bits of the window id an entry's packed word
	// keeps; the rest holds the count (up to 2^36). Windows are compared
	// modulo 2^28: a key idle for 2^27 windows is long forgotten.
	winBits  = 28
	winMask  = 1<<winBits - 1
	cntShift = winBits
)

// entry is this node's state for one key. The hot path touches only its
// atomics; the rest belongs to the background loop.
type entry struct {
	// word packs the window id's low bits and the count admitted in it, so
	// a new window resets the count in the same compare-and-swap.
	word  atomic.Uint64
	asked atomic.Int64 // requests asked for, ever, refused ones included
	limit atomic.Int64 // the key's limit per window, as last reported; 0 when unknown
	// window is the last full window id observed.
	window atomic.Int64

	// Owned by the loop.
	lastAsked int64
	demand    float64
	sent      record // the record last queued; seq 0 when none
	sentAt    int64  // unix nanoseconds of that
	idleSince int64  // unix nanoseconds since the key has had no demand; 0 while busy
}

// shard holds a slice of the keys, with its own lock. The lock is a read
// lock on the hot path; only a key's first Observe takes it for writing.
type shard struct {
	mu sync.RWMutex
	m  map[digest]*entry
	_  [64 - 32]byte // keeps neighbouring shards' locks off one cache line
}

// table is this node's per-key consumption and demand, sharded by digest.
type table struct {
	shards  [numShards]shard
	n       atomic.Int64 // keys held
	max     int64
	dropped atomic.Uint64 // observations of keys beyond max
}

func newTable(maxKeys int) *table {
	t := &table{max: int64(maxKeys)}
	for i := range t.shards {
		t.shards[i].m = make(map[digest]*entry)
	}
	return t
}

func (t *table) shard(d *digest) *shard {
	// Digests are uniform already (a cryptographic hash): no need to hash.
	return &t.shards[d[0]&(numShards-1)]
}

// observe records asked requests and admitted ones for key in window.
func (t *table) observe(key *digest, window, asked, admitted int64) {
	t.count(key, window, asked, admitted, false)
}

// report records asked requests for key, consumed as its whole count in
// window, and its limit per window.
func (t *table) report(key *digest, window, asked, consumed, limit int64) {
	if e := t.count(key, window, asked, max(consumed, 0), true); e != nil {
		e.limit.Store(limit)
	}
}

// limitOf returns key's limit per window as last reported, or 0.
func (t *table) limitOf(key *digest) int64 {
	s := t.shard(key)
	s.mu.RLock()
	e := s.m[*key]
	s.mu.RUnlock()
	if e == nil {
		return 0
	}
	return e.limit.Load()
}

// count adds asked to key's demand, and n to its count in window (or sets
// the count to n, if absolute); a report for an earlier window than the
// key's latest counts as demand only. It returns the key's entry, or nil
// when the table is full or the report is late.
func (t *table) count(key *digest, window, asked, n int64, absolute bool) *entry {
	s := t.shard(key)
	s.mu.RLock()
	e := s.m[*key]
	s.mu.RUnlock()
	if e == nil {
		if e = t.insert(s, key, window); e == nil {
			return nil
		}
	}
	e.asked.Add(asked)
	w := uint64(window) & winMask
	for {
		old := e.word.Load()
		ow := old & winMask
		var nw uint64
		switch {
		case ow == w && !absolute:
			nw = old + uint64(n)<<cntShift
		case ow == w || (w-ow)&winMask < 1<<(winBits-1): // this window, or a later one
			nw = w | uint64(n)<<cntShift
		default: // a late report for an earlier window: it is gone
			return nil
		}
		if e.word.CompareAndSwap(old, nw) {
			if ow != w {
				e.window.Store(window)
			}
			return e
		}
	}
}

// counts returns the window an entry last saw and its count in it.
func (e *entry) counts() (window, consumed int64) {
	v := e.word.Load()
	w := e.window.Load()
	if uint64(w)&winMask != v&winMask {
		// The word moved on between the loads; the window's own bits win.
		w = w&^winMask | int64(v&winMask)
	}
	return w, int64(v >> cntShift)
}

func (t *table) insert(s *shard, key *digest, window int64) *entry {
	s.mu.Lock()
	defer s.mu.Unlock()
	if e := s.m[*key]; e != nil {
		return e
	}
	if t.n.Load() >= t.max {
		t.dropped.Add(1)
		return nil
	}
	e := &entry{}
	e.word.Store(uint64(window) & winMask)
	e.window.Store(window)
	s.m[*key] = e
	t.n.Add(1)
	return e
}

// each calls f for every entry of shard i under the shard's read lock.
func (t *table) each(f func(*digest, *entry)) {
	for i := range t.shards {
		s := &t.shards[i]
		s.mu.RLock()
		for k, e := range s.m {
			f(&k, e)
		}
		s.mu.RUnlock()
	}
}

// remove deletes the keys in keys.
func (t *table) remove(keys []digest) {
	for i := range keys {
		s := t.shard(&keys[i])
		s.mu.Lock()
		if _, ok := s.m[keys[i]]; ok {
			delete(s.m, keys[i])
			t.n.Add(-1)
		}
		s.mu.Unlock()
	}
}
