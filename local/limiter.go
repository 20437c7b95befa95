package local

import (
	"fmt"
	"hash/maphash"
	"math/bits"
	"sync"
	"sync/atomic"
	"time"
)

// Overflow is what a Limiter does with a request for a new key when its key
// table is at Config.MaxKeys and no key held can be evicted. Keys are only
// ever evicted once back in their initial state: evicting a live key would
// let anyone reset a victim's budget by flooding the table with new keys.
type Overflow uint8

const (
	// OverflowReject rejects requests for new keys (ReasonOverflow) until
	// keys become idle. It never admits more than the limits allow; the cost
	// is that new clients are refused while the table is full.
	OverflowReject Overflow = iota
	// OverflowAllow admits requests for new keys without limiting them
	// (Allowed, ReasonOverflow). It keeps serving new clients and lets a key
	// flood through unlimited.
	OverflowAllow
	// OverflowShared decides requests for all keys that do not fit against
	// one shared state under the same limit. New clients share one budget
	// while the table is full: the flood is limited, at the price of
	// limiting legitimate new keys together with it.
	OverflowShared
)

var overflowNames = [...]string{OverflowReject: "reject", OverflowAllow: "allow", OverflowShared: "shared"}

// String returns the policy's name.
func (o Overflow) String() string {
	if int(o) < len(overflowNames) {
		return overflowNames[o]
	}
	return fmt.Sprintf("Overflow(%d)", uint8(o))
}

// Defaults for Config.
const (
	DefaultShards        = 64
	DefaultMaxKeys       = 1 << 20
	DefaultSweepInterval = time.Minute
)

// Config configures a Limiter. The zero value is a usable configuration:
// every field documents its default.
type Config struct {
	// Shards is the number of partitions of the key table, a power of two
	// from 1 to 65,536. More shards spread the locking of inserts and sweeps.
	// Lookups of existing keys take no shard lock. Default DefaultShards (64).
	Shards int
	// MaxKeys caps the keys held. The cap is enforced per shard, at
	// ⌈MaxKeys/Shards⌉ keys each. Default DefaultMaxKeys (1,048,576).
	MaxKeys int
	// Overflow is the policy for new keys beyond MaxKeys. Default
	// OverflowReject. Every overflow is counted in Stats.
	Overflow Overflow
	// Clock tells the time for the methods without an At suffix and for the
	// background sweeper. Default: a CoarseClock of DefaultResolution (1ms)
	// that the Limiter starts and Close stops. Pass a shared CoarseClock when
	// running many limiters.
	//
	// Eviction compares a key's state with a time, so all times a Limiter
	// sees must be on one timeline: the times passed to the At methods must
	// be the Clock's (time.Now with the default), or the sweeper, judging by
	// the Clock, may forget keys that are live on the caller's timeline and
	// let them start afresh. Callers passing times of their own (simulations,
	// replays) set NoBackgroundSweep and call SweepAt with their time.
	Clock Clock
	// SweepInterval is how often a background goroutine evicts the keys
	// whose state is back to the initial state. Default
	// DefaultSweepInterval (1 minute). Keys are also evicted as new keys
	// arrive, judged at the new request's time: when a shard's table is
	// about to grow or is full.
	SweepInterval time.Duration
	// NoBackgroundSweep turns the sweeping goroutine off; call SweepAt to
	// free idle keys. Default false.
	NoBackgroundSweep bool
}

// Limiter limits requests per key under one Limit. Its keys are held in a
// sharded table: deciding for a key already held allocates nothing and
// takes no lock but that key's own. Keys back in their initial state are
// evicted, and the table holds at most Config.MaxKeys keys.
//
// A Limiter is safe for concurrent use. Close stops its goroutines (the
// clock and the sweeper); decisions remain possible after Close, reading
// time.Now.
type Limiter struct {
	limit  atomic.Pointer[Limit]
	shards []shard
	shift  uint // a hash's top bits pick its shard: h >> shift
	seed   maphash.Seed
	seed2  maphash.Seed

	clock    Clock
	coarse   *CoarseClock // clock, when it is one: read without an interface call
	ownClock bool

	perShard int
	overflow Overflow
	shared   entry // the state all overflowing keys share under OverflowShared

	stop      chan struct{}
	done      chan struct{}
	closeOnce sync.Once
}

// New returns a Limiter for lim. It returns an error wrapping ErrInvalidLimit
// for an invalid lim and ErrInvalidConfig, naming the field, for a bad cfg.
// New copies cfg and does not modify it.
func New(lim Limit, cfg Config) (*Limiter, error) {
	if !lim.Valid() {
		return nil, fmt.Errorf("%w: zero Limit; build one with NewLimit", ErrInvalidLimit)
	}
	if cfg.Shards == 0 {
		cfg.Shards = DefaultShards
	}
	if cfg.Shards < 1 || cfg.Shards > 1<<16 || cfg.Shards&(cfg.Shards-1) != 0 {
		return nil, fmt.Errorf("%w: Shards %d: must be a power of two from 1 to 65536", ErrInvalidConfig, cfg.Shards)
	}
	if cfg.MaxKeys == 0 {
		cfg.MaxKeys = DefaultMaxKeys
	}
	if cfg.MaxKeys < 1 {
		return nil, fmt.Errorf("%w: MaxKeys %d: must be positive", ErrInvalidConfig, cfg.MaxKeys)
	}
	if cfg.Overflow > OverflowShared {
		return nil, fmt.Errorf("%w: Overflow %d: unknown policy", ErrInvalidConfig, cfg.Overflow)
	}
	if cfg.SweepInterval == 0 {
		cfg.SweepInterval = DefaultSweepInterval
	}
	if cfg.SweepInterval < 0 {
		return nil, fmt.Errorf("%w: SweepInterval %v: must be positive", ErrInvalidConfig, cfg.SweepInterval)
	}
	l := &Limiter{
		shards:   make([]shard, cfg.Shards),
		shift:    uint(64 - bits.TrailingZeros(uint(cfg.Shards))),
		seed:     maphash.MakeSeed(),
		seed2:    maphash.MakeSeed(),
		clock:    cfg.Clock,
		perShard: (cfg.MaxKeys + cfg.Shards - 1) / cfg.Shards,
		overflow: cfg.Overflow,
	}
	p := lim
	l.limit.Store(&p)
	l.shared.lim = &p
	for i := range l.shards {
		l.shards[i].init()
	}
	if l.clock == nil {
		l.clock = NewCoarseClock(DefaultResolution)
		l.ownClock = true
	}
	l.coarse, _ = l.clock.(*CoarseClock)
	if !cfg.NoBackgroundSweep {
		l.stop, l.done = make(chan struct{}), make(chan struct{})
		go l.sweepLoop(cfg.SweepInterval)
	}
	return l, nil
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
		return l.coarse.nowMicro()
	}
	return l.clock.Now().UnixMicro()
}

// Limit returns the limit in force.
func (l *Limiter) Limit() Limit { return *l.limit.Load() }

// SetLimit replaces the limit, for every key, without losing what keys have
// consumed. Each key's state is carried over the first time the key is next
// decided: for the same algorithm, window counts are kept (clamped to the
// new limit) and buckets keep their available tokens (rounded down, clamped
// to the new burst), also from one bucket algorithm to another; any other
// change of algorithm starts every key afresh.
func (l *Limiter) SetLimit(lim Limit) error {
	if !lim.Valid() {
		return fmt.Errorf("%w: zero Limit; build one with NewLimit", ErrInvalidLimit)
	}
	l.limit.Store(&lim)
	return nil
}

// Allow is AllowN(key, 1).
func (l *Limiter) Allow(key string) Decision {
	v, limit := l.allow(l.nowMicro(), key, 1)
	return Decision{
		Allowed: v.allowed(), Reason: v.public(), Limit: limit,
		Remaining: v.remaining, ResetAfter: micros(v.reset), RetryAfter: micros(v.retry),
	}
}

// AllowN decides whether a request of cost n for key is admitted now, and
// consumes n if it is.
func (l *Limiter) AllowN(key string, n int64) Decision {
	v, limit := l.allow(l.nowMicro(), key, n)
	return Decision{
		Allowed: v.allowed(), Reason: v.public(), Limit: limit,
		Remaining: v.remaining, ResetAfter: micros(v.reset), RetryAfter: micros(v.retry),
	}
}

// AllowAt is AllowNAt(now, key, 1).
func (l *Limiter) AllowAt(now time.Time, key string) Decision {
	v, limit := l.allow(now.UnixMicro(), key, 1)
	return Decision{
		Allowed: v.allowed(), Reason: v.public(), Limit: limit,
		Remaining: v.remaining, ResetAfter: micros(v.reset), RetryAfter: micros(v.retry),
	}
}

// AllowNAt decides whether a request of cost n for key is admitted at now,
// and consumes n if it is. A cost of zero asks without consuming; a negative
// cost is rejected (ReasonInvalidCost), and so is a cost above what the limit
// can ever admit (ReasonCostTooHigh). Times before the Unix epoch count as
// the epoch, and a time earlier than one the key has already stored counts as
// that time.
func (l *Limiter) AllowNAt(now time.Time, key string, n int64) Decision {
	v, limit := l.allow(now.UnixMicro(), key, n)
	return Decision{
		Allowed: v.allowed(), Reason: v.public(), Limit: limit,
		Remaining: v.remaining, ResetAfter: micros(v.reset), RetryAfter: micros(v.retry),
	}
}

// allow is the hot path. It returns a verdict, which stays in registers,
// and the limit's MaxCost; the exported methods make them a Decision.
func (l *Limiter) allow(now int64, key string, n int64) (verdict, int64) {
	now = max(now, 0)
	if n < 0 {
		return verdict{reason: ReasonInvalidCost}, l.limit.Load().max
	}
	for {
		e := l.lookup(key, now)
		if e == nil {
			return l.overflowed(now, n)
		}
		e.mu.Lock()
		lim := l.limit.Load()
		if e.lim != lim || n > lim.max { // rare: evicted, limit changed, cost too high
			if e.lim == nil { // evicted since we found it
				e.mu.Unlock()
				continue
			}
			v, limit := l.decideLocked(e, now, n, true)
			e.mu.Unlock()
			return v, limit
		}
		v := lim.decide(&e.state, now, n, true)
		e.mu.Unlock()
		return v, lim.max
	}
}

// lookup returns key's entry, inserting it if need be, or nil when the
// table is full. The caller locks the entry and checks it was not evicted in
// between (lim == nil).
func (l *Limiter) lookup(key string, now int64) *entry {
	h, h2 := maphash.String(l.seed, key), maphash.String(l.seed2, key)
	sh := &l.shards[h>>l.shift]
	if e := sh.tab.Load().find(h, h2); e != nil {
		return e
	}
	return sh.insert(h, h2, l.limit.Load(), now, l.perShard)
}

// decideLocked decides for e, which the caller has locked, under the limit
// in force, carrying e's state over to it first if it changed.
func (l *Limiter) decideLocked(e *entry, now, n int64, commit bool) (verdict, int64) {
	return decideWith(e, l.limit.Load(), now, n, commit)
}

// decideWith decides for e, which the caller has locked, under lim. A cost
// no state can admit is refused before the state is looked at, or carried
// over to a changed limit: the Redis twin refuses it without a script.
func decideWith(e *entry, lim *Limit, now, n int64, commit bool) (verdict, int64) {
	if n > lim.max {
		return verdict{reason: ReasonCostTooHigh}, lim.max
	}
	if e.lim != lim {
		lim.convert(&e.state, e.lim, now)
		e.lim = lim
	}
	return lim.decide(&e.state, now, n, commit), lim.max
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
		l.shared.mu.Lock()
		v, limit := l.decideLocked(&l.shared, now, n, true)
		l.shared.mu.Unlock()
		return v.overflowed(), limit
	default:
		return verdict{reason: ReasonOverflow}, l.limit.Load().max
	}
}

// SweepAt evicts every key whose state is back to its initial state at now,
// and returns how many it evicted. The background sweeper calls it with the
// Limiter's clock.
func (l *Limiter) SweepAt(now time.Time) int {
	us := max(now.UnixMicro(), 0)
	total := 0
	for i := range l.shards {
		sh := &l.shards[i]
		sh.mu.Lock()
		t := sh.tab.Load()
		n := sh.sweep(us, len(t.slots))
		if sh.used-sh.live > sh.live && len(t.slots) > minTableSize {
			sh.rebuild() // mostly tombstones: shrink
		}
		sh.mu.Unlock()
		total += n
	}
	return total
}

// Stats are a Limiter's counters.
type Stats struct {
	Keys      int    // keys held now
	Evictions uint64 // keys evicted since New, back in their initial state
	Overflows uint64 // requests for new keys that found the table full
}

// Stats returns the Limiter's counters. It locks each shard in turn; call it
// for monitoring, not per request.
func (l *Limiter) Stats() Stats {
	var s Stats
	for i := range l.shards {
		sh := &l.shards[i]
		sh.mu.Lock()
		s.Keys += sh.live
		s.Evictions += sh.evictions
		s.Overflows += sh.overflows
		sh.mu.Unlock()
	}
	return s
}

// Len returns the number of keys held.
func (l *Limiter) Len() int { return l.Stats().Keys }
