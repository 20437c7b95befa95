package local

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/hybridlimit/hybridlimit/internal/coarse"
	"github.com/hybridlimit/hybridlimit/internal/keyed"
)

// Limiter limits requests per key under one Limit. Its keys are held in a
// sharded table: deciding for a key already held allocates nothing and
// takes no lock. When the Limit's state fits in a word (every algorithm but
// the sliding window log, for all but extreme parameters: see
// docs/algorithms.md) a decision is one compare-and-swap on the key's state,
// and a rejection none; otherwise it takes the key's own lock. Keys back in
// their initial state are evicted, and the table holds at most
// Config.MaxKeys keys.
//
// A Limiter is safe for concurrent use. Close stops its goroutines (the
// clock and the sweeper); decisions remain possible after Close, reading
// time.Now.
type Limiter struct {
	limit atomic.Pointer[compiled]
	store *keyed.Store[keyState]

	clock    Clock
	coarse   *coarse.Clock // clock, when it is one: read without an interface call
	ownClock bool

	overflow Overflow
	shared   keyed.Entry[keyState] // the state all overflowing keys share under OverflowShared

	stop      chan struct{}
	done      chan struct{}
	closeOnce sync.Once
}

// keyState is a Limiter's value per key: the algorithm's state, and the
// limit it is expressed in (a SetLimit carries it over on the key's next
// decision, in a new entry: see settle).
//
// The state is in word when lim is packed (packed.go), except for the
// overflow entry's, and in *st otherwise. lim is set once, when the key is
// first decided, under the entry's lock; it is read lock-free. word is
// changed lock-free by compare-and-swap, or by a holder of the entry's lock
// who has set wordLocked in it (hold). st is guarded by the entry's lock; it
// is allocated on the key's first decision in it, so that an entry stays in
// the 64-byte size class, one cache line, and a packed key carries no unused
// state; the entry of a key first seen under a sliding window log has room
// for its log in the same object (logBlock), which spare points to.
type keyState struct {
	lim   atomic.Pointer[compiled]
	word  atomic.Uint64
	st    *state
	spare *logState
}

// packedIn reports whether e's state under lim, the limit it is expressed
// in, is in its word. The overflow entry (standalone) is only ever decided
// under its lock, so its state stays in st whatever the limit, and it is
// carried over to a new limit in place.
func packedIn(e *keyed.Entry[keyState], lim *compiled) bool {
	return lim.packed && !e.Standalone()
}

// hold returns e's state under lim, the limit it is expressed in, to read
// and write, for a caller that holds e's lock and found it not evicted. A
// packed state is locked against the lock-free path and unpacked into
// *tmp. Pass what hold returns to release.
func hold(e *keyed.Entry[keyState], lim *compiled, tmp *state) (*state, uint64) {
	s, w := holdInto(e, lim, tmp)
	if s == nil {
		s = tmp
	}
	return s, w
}

// holdInto is hold returning nil for a state it unpacked into *tmp: its
// result never points into tmp, so a caller may store it next to tmp
// without moving both to the heap.
func holdInto(e *keyed.Entry[keyState], lim *compiled, tmp *state) (*state, uint64) {
	v := &e.Value
	if !packedIn(e, lim) {
		if v.st == nil {
			v.st = newState(lim, v.spare)
		}
		return v.st, 0
	}
	for {
		// Neither locked nor dead: both need e's lock, which the caller holds.
		w := v.word.Load()
		if v.word.CompareAndSwap(w, w|wordLocked) {
			*tmp = lim.unpack(w)
			return nil, w
		}
	}
}

// release ends a hold of s: a packed state is packed back, unlocked.
func release(e *keyed.Entry[keyState], lim *compiled, s *state, w uint64) {
	if packedIn(e, lim) {
		e.Value.word.Store(lim.pack(s, w))
	}
}

// idleKey reports whether the key's state is back to the initial state. A
// packed one is marked dead in the same step, so that no lock-free decision
// lands on it afterwards. The caller holds the entry's lock.
func idleKey(v *keyState, now int64) bool {
	lim := v.lim.Load()
	switch {
	case lim == nil: // never decided
		return true
	case !lim.packed: // its state is in st (a store's entry under a packed limit is always in word)
		return v.st == nil || lim.initial(v.st, now)
	}
	for {
		w := v.word.Load() // not locked: the caller holds the entry's lock
		s := lim.unpack(w)
		if !lim.initial(&s, now) {
			return false
		}
		if v.word.CompareAndSwap(w, wordDead) {
			return true
		}
	}
}

// New returns a Limiter for lim. It returns an error wrapping
// ErrInvalidConfig, naming the field, for an invalid lim or a bad cfg. New
// works on a copy of cfg, with its defaults filled in, and does not modify
// the caller's.
func New(lim Limit, cfg Config) (*Limiter, error) {
	c, err := compile(lim)
	if err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	l := &Limiter{clock: cfg.Clock, overflow: cfg.Overflow}
	l.store, err = keyed.New(keyed.Config{Shards: cfg.Shards, MaxKeys: cfg.MaxKeys}, idleKey, l.newEntry)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidConfig, err)
	}
	p := own(c)
	l.limit.Store(p)
	l.shared.MakeStandalone() // never in the store, never evicted
	l.shared.Value.lim.Store(p)
	if l.clock == nil {
		l.clock = coarse.New(defaultResolution)
		l.ownClock = true
	}
	l.coarse, _ = l.clock.(*coarse.Clock)
	if !cfg.NoBackgroundSweep {
		l.stop, l.done = make(chan struct{}), make(chan struct{})
		go l.sweepLoop(cfg.SweepInterval)
	}
	return l, nil
}

// newEntry allocates the store's entries. While the limit keeps a log (the
// sliding window log, the sub-window counter), a key's entry has room for
// the log in the same object (logBlock).
func (l *Limiter) newEntry() *keyed.Entry[keyState] {
	if !l.limit.Load().logged() {
		return new(keyed.Entry[keyState])
	}
	b := new(logBlock)
	b.e.Value.spare = &b.l
	return &b.e
}

func (l *Limiter) sweepLoop(every time.Duration) {
	defer close(l.done)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-l.stop:
			return
		case <-t.C:
			l.SweepAt(l.clock.Now())
		}
	}
}

// Close stops the Limiter's goroutines and waits for them to exit. It is
// idempotent and always returns nil.
func (l *Limiter) Close() error {
	l.closeOnce.Do(func() {
		if l.stop != nil {
			close(l.stop)
			<-l.done
		}
		if l.ownClock {
			l.coarse.Close()
		}
	})
	return nil
}

func (l *Limiter) nowMicro() int64 {
	if l.coarse != nil {
		return l.coarse.NowMicro()
	}
	return l.clock.Now().UnixMicro()
}

// own returns the Limiter's own copy of lim, which records how far its
// shaper queues requests under it (Limit.queue).
func own(lim compiled) *compiled {
	lim.queued = new(atomic.Int64)
	return &lim
}

// Limit returns the limit in force, with Burst and SubWindows' defaults
// filled in.
func (l *Limiter) Limit() Limit { return l.limit.Load().p }

// SetLimit replaces the limit, for every key, without losing what keys have
// consumed. Each key's state is carried over the first time the key is next
// decided: for the same algorithm, window counts are kept (clamped to the new
// limit) and buckets keep their available tokens (rounded down, clamped to
// the new burst), also from one bucket algorithm to another; requests that
// a bucket's shaper (Reserve, Wait) queued past the burst keep the times
// they were promised, and the new limit admits nothing that would act
// before the last of them, having no tokens then; a bucket whose rate and
// burst did not change keeps its state exactly. Any other change of
// algorithm starts every key afresh.
// An invalid lim is refused with an error wrapping ErrInvalidConfig, and
// the limit in force kept.
func (l *Limiter) SetLimit(lim Limit) error {
	c, err := compile(lim)
	if err != nil {
		return err
	}
	l.limit.Store(own(c))
	return nil
}

// Allow is AllowN(key, 1).
func (l *Limiter) Allow(key string) Decision {
	return l.allow(time.Time{}, true, key, 1)
}

// AllowN decides whether a request of cost n for key is admitted now, and
// consumes n if it is.
func (l *Limiter) AllowN(key string, n int64) Decision {
	return l.allow(time.Time{}, true, key, n)
}

// AllowNAt decides whether a request of cost n for key is admitted at now,
// and consumes n if it is. A cost of zero asks without consuming; a negative
// cost is rejected (ReasonInvalidCost), and so is a cost above what the limit
// can ever admit (ReasonCostTooHigh), without looking at the key, so with
// Remaining and ResetAfter 0. Times before the Unix epoch count as the
// epoch, and times after 2^53 − 1 µs past it (in the year 2255) as that
// time. A time earlier than the key's state counts as the earliest time
// that state can have been stored at: the start of the window stored
// (fixed window, sliding window counter), the newest request logged
// (sliding window log). The bucket algorithms store no time: they keep
// their theoretical arrival time (TAT), and decide a time that ran back as
// given, unless it is before TAT − Burst's emission intervals, less the
// longest delay the shaper (Reserve, Wait) gave under the limit in force;
// then it counts as that time.
func (l *Limiter) AllowNAt(now time.Time, key string, n int64) Decision {
	return l.allow(now, false, key, n)
}

// allow is the hot path: it decides at t or, when clock is set, at the
// Limiter's clock's time. It takes the time as the exported methods have it
// so that they are small enough to inline, and so cost no call of their
// own: among many keys, every call on the path delays the next cache miss.
// It returns the Decision itself, four words that stay in registers.
//
// The usual case, a packed key already held, settled, and an admission, is
// decided here on the key's word (packed.go), retried here when another
// decision changed the word first; the rest in allowSlow.
func (l *Limiter) allow(t time.Time, clock bool, key string, n int64) Decision {
	var now int64
	if !clock {
		now = t.UnixMicro()
	} else if us, ok := l.coarse.Running(); ok {
		now = us
	} else {
		now = l.nowMicro()
	}
	now = clampTime(now)
	e := l.store.Get(key, now)
	if e != nil && n > 0 {
		lim, v := l.limit.Load(), &e.Value
		if v.lim.Load() == lim && n <= lim.max { // settled: the usual case
			if !lim.packed {
				// Lock and Evicted rather than LockLive: they inline
				// here, LockLive's generic body does not.
				e.Lock()
				if !e.Evicted() {
					if v.st != nil {
						var vd verdict
						ok := false
						if lim.p.Algorithm == SlidingWindowLog {
							vd, ok = lim.logAt(v.st, now, n)
						}
						if !ok {
							vd = lim.decide(v.st, now, n, true)
						}
						e.Unlock()
						return vd.decision(lim.max)
					}
					// The key's first decision: its state is made
					// under the lock already held.
					vd := decideSettled(e, lim, now, n)
					e.Unlock()
					return vd.decision(lim.max)
				}
				e.Unlock()
				return l.allowSlow(e, now, key, n)
			}
			// A compare-and-swap fails when another decision on the
			// key got in first: decide again here on the word it left,
			// until one succeeds or the word's decision is not an
			// admission. Retrying here, not in allowSlow's general path
			// (unpack, decide, pack), holds the key's cache line for
			// less time while other cores wait for it. The parts that
			// depend on now alone stay in the loop: they run while the
			// word is fetched again.
			for {
				w := v.word.Load()
				var vd verdict
				var nw uint64
				var ok bool
				switch lim.p.Algorithm {
				case FixedWindow:
					vd, nw, ok = lim.fixedAt(w, now, n)
				case SlidingWindowCounter:
					idx, reset, left := lim.counterNow(now)
					vd, nw, ok = lim.counterAt(w, idx, reset, left, n)
				default:
					vd, nw, ok = lim.bucketWord(w, now, n)
				}
				if !ok || w&(wordLocked|wordDead) != 0 {
					break
				}
				if v.word.CompareAndSwap(w, nw) {
					return vd.decision(lim.max)
				}
			}
		}
	}
	return l.allowSlow(e, now, key, n)
}

// allowSlow decides what allow leaves to it: e is key's entry as allow got
// it, or nil if the table was full.
func (l *Limiter) allowSlow(e *keyed.Entry[keyState], now int64, key string, n int64) Decision {
	if n < 0 {
		return verdict{reason: ReasonInvalidCost}.decision(l.limit.Load().max)
	}
	for {
		if e == nil {
			return decisionOf(l.overflowed(now, n))
		}
		lim, v := l.limit.Load(), &e.Value
		if n <= lim.max && v.lim.Load() == lim && lim.packed { // settled
			for { // lock-free on the word, until it is held or gone
				w := v.word.Load()
				if w&(wordLocked|wordDead) != 0 {
					break // held, or gone: wait for the lock below
				}
				if vd, ok := lim.rejectWord(w, now, n); ok {
					return vd.decision(lim.max)
				}
				vd, nw := lim.slowWord(w, now, n)
				if nw == w || v.word.CompareAndSwap(w, nw) {
					return vd.decision(lim.max)
				}
			}
		}
		if vd, limit, ok := l.allowLocked(e, lim, key, now, n); ok {
			return vd.decision(limit)
		}
		e = l.store.Get(key, now)
	}
}

// allowLocked decides under e's lock what allow and allowSlow leave to it:
// a key's first decision, a limit changed since the key's last one, a cost
// too high, a decision that found the word held, and an unpacked key's
// decisions that allow did not take (a cost of 0, an entry evicted under
// it). It reports false when the key must be looked up again (e was
// evicted or replaced).
func (l *Limiter) allowLocked(e *keyed.Entry[keyState], lim *compiled, key string, now, n int64) (verdict, int64, bool) {
	if !e.LockLive() {
		return verdict{}, 0, false
	}
	defer e.Unlock()
	switch {
	case n > lim.max:
		return verdict{reason: ReasonCostTooHigh}, lim.max, true
	case !l.settle(e, lim, key, now):
		return verdict{}, 0, false
	}
	return decideSettled(e, lim, now, n), lim.max, true
}

// decideSettled decides a cost of n under lim on e's state, for a caller
// holding e's lock that found e not evicted and its value settled to lim.
func decideSettled(e *keyed.Entry[keyState], lim *compiled, now, n int64) verdict {
	var tmp state
	s, w := hold(e, lim, &tmp)
	vd := lim.decide(s, now, n, true)
	release(e, lim, s, w)
	return vd
}

// settle brings e's value to lim, the limit in force, for a caller holding
// e's lock that found it not evicted. A new key takes lim as it is. A key
// under another limit is carried over to lim (Limit.convert) in a new entry
// that replaces e: a state read lock-free must never change its meaning in
// place. settle then reports false, e being evicted, and the caller looks
// key up again. Callers refuse a cost above lim's MaxCost before they
// settle: such a request changes nothing, not even the limit a state is
// expressed in, as the Redis twin refuses it without a script.
func (l *Limiter) settle(e *keyed.Entry[keyState], lim *compiled, key string, now int64) bool {
	v := &e.Value
	from := v.lim.Load()
	switch {
	case from == lim:
		return true
	case from == nil:
		v.lim.Store(lim)
		return true
	case e.Standalone(): // never read lock-free: carried over in place
		if v.st != nil {
			lim.convert(v.st, from, now)
		}
		v.lim.Store(lim)
		return true
	}
	var tmp state
	s, _ := hold(e, from, &tmp)
	st := *s
	lim.convert(&st, from, now)
	if packedIn(e, from) {
		v.word.Store(wordDead)
	}
	l.store.Replace(key, e, func(nv *keyState) {
		nv.lim.Store(lim)
		if lim.packed {
			nv.word.Store(lim.pack(&st, 0))
		} else if st != (state{}) { // a zero state is left to the key's first hold, in the entry's room
			nv.st = moveLog(&st, nv.spare)
		}
	})
	return false
}

// decideHeld decides on s, a key's state that the caller holds (the
// entry's lock, settled, and hold), under lim, the limit it is expressed in.
// A cost no state can admit is refused before the state is looked at.
func decideHeld(s *state, lim *compiled, now, n int64, commit bool) (verdict, int64) {
	if n > lim.max {
		return verdict{reason: ReasonCostTooHigh}, lim.max
	}
	return lim.decide(s, now, n, commit), lim.max
}

// overflowed decides a request for a new key that did not fit.
func (l *Limiter) overflowed(now, n int64) (verdict, int64) {
	switch l.overflow {
	case OverflowAllow:
		lim := l.limit.Load()
		if n > lim.max {
			return verdict{reason: ReasonCostTooHigh}, lim.max
		}
		return verdict{reason: reasonAdmittedOverflow, remaining: lim.max - n}, lim.max
	case OverflowShared:
		e, lim := &l.shared, l.limit.Load()
		if n > lim.max {
			return verdict{reason: ReasonCostTooHigh}, lim.max
		}
		e.Lock()
		l.settle(e, lim, "", now)
		var tmp state
		s, _ := hold(e, lim, &tmp)
		v, limit := decideHeld(s, lim, now, n, true)
		e.Unlock()
		return v.overflowed(), limit
	default:
		return verdict{reason: ReasonOverflow}, l.limit.Load().max
	}
}

// SweepAt evicts every key whose state is back to its initial state at now,
// and returns how many it evicted. The background sweeper calls it with the
// Limiter's clock.
func (l *Limiter) SweepAt(now time.Time) int { return l.store.Sweep(clampTime(now.UnixMicro())) }

// Stats are a Limiter's counters.
type Stats struct {
	Keys      int    // keys held now
	Evictions uint64 // keys evicted since New, back in their initial state
	Overflows uint64 // requests for new keys that found the table full
	// Bytes estimates the heap the Limiter holds: itself, its table of
	// keys' shards (each with a table once it holds a key) and an entry per
	// key, as laid out. A sliding window log's requests and a sub-window
	// counter's counts, kept beside the entry, are not counted. For sizing,
	// not accounting.
	Bytes int64
}

// Stats returns the Limiter's counters. It locks each shard in turn; call it
// for monitoring, not per request.
func (l *Limiter) Stats() Stats {
	s := Stats(l.store.Stats())
	s.Bytes += keyed.AllocSize(unsafe.Sizeof(*l))
	return s
}
