package syncer

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hybridlimit/hybridlimit/internal/keyed"
	"github.com/hybridlimit/hybridlimit/local"
)

// Defaults for SyncConfig.
const (
	DefaultInterval = 100 * time.Millisecond
	DefaultEpsilon  = 0.05
	DefaultBatch    = 256
)

// SyncConfig configures a Syncer. Every zero field takes the default it
// documents; durations derive from Interval unless set.
type SyncConfig struct {
	// Client reaches Redis; see Config.Client. Required.
	Client redis.UniversalClient
	// Keyspace names the keys; every node must use the same one.
	Keyspace Keyspace
	// NodeID names this node in Redis: each node of a cluster needs its own.
	// Default: 64 random bits.
	NodeID string
	// Interval is the regular sync period: usage is reported and leases
	// renewed at most this long after they are due. Default 100ms. Shorter
	// means smaller leases and more scripts; longer means coarser leases.
	Interval time.Duration
	// Horizon is how long a lease is sized to last at the key's current
	// demand. Default 2 × Interval.
	Horizon time.Duration
	// MinGap is the least time between two syncs of one key asked for early
	// (a lease running low, a first request), less a tenth: a key's gap is
	// read from the Limiter's clock, which may lag the loop's timers by its
	// resolution. It is also the retry-after of a request refused for want
	// of a lease. Default Interval ÷ 10.
	MinGap time.Duration
	// FirstGap is the least time between two first-lease rounds: small
	// rounds, run between the others, that exchange only the keys waiting
	// for their first lease, or for the correction of a lease granted before
	// their demand could be measured (SyncFirstAt). A busy new key spends its
	// cold-start allowance in well under MinGap; these rounds bring its lease
	// within about a round trip, and each key takes part in at most two of
	// them in its life. Default MinGap ÷ 10.
	FirstGap time.Duration
	// PaceGap sizes the grants of a key whose grants are paced: a fixed
	// window's key whose budget, at the demand the nodes report, will not
	// last its window. Each node is then granted what lasts it 3 × PaceGap
	// at its demand, and asks for more in the first-lease rounds when what
	// it holds lasts less than 2 × PaceGap, so that the nodes run out of
	// the budget together and admit the same requests, but for a few, as
	// one exact limiter would. Shorter means fewer false rejections over
	// the limit, and more scripts while the budget lasts (see
	// docs/accuracy.md). Default MinGap ÷ 5; at most MinGap.
	PaceGap time.Duration
	// LeaseTTL is how long a bucket share is held without renewal. A node
	// that stops syncing (crashed, cut off) loses its share that long after
	// its last sync, and the others get it. Default 5 × Interval.
	LeaseTTL time.Duration
	// DemandTTL is how long a node's reported demand counts in the others'
	// shares. Default 5 × Interval.
	DemandTTL time.Duration
	// IdleRelease is how long a key goes without requests before the node
	// gives its lease back. Default 3 × Interval.
	IdleRelease time.Duration
	// Safety is how long before its expiry a node stops using a share, for
	// the error of its estimate of Redis's clock. Default MinGap.
	Safety time.Duration
	// Epsilon is the cold-start allowance: a new key may admit ε × limit ÷
	// nodes per node, counted as debt, while its first lease is fetched.
	// Default 0.05. Set NoColdStart to admit nothing before a lease.
	Epsilon float64
	// NoColdStart turns the cold-start allowance off.
	NoColdStart bool
	// Nodes is the number of nodes to assume until Redis has counted them,
	// and the least assumed afterwards. Each node registers in Redis at its
	// rounds; the live count sizes the cold-start allowance, the shares kept
	// for nodes yet to ask for a new key, and the failure policy's split of
	// a limit. Default 0: no allowance until the first round.
	Nodes int
	// Batch is how many scripts go in one pipeline. Default 256: enough to
	// amortize the round trip, few enough not to block Redis for long.
	Batch int
	// Timeout bounds each round's exchanges. Default Interval.
	Timeout time.Duration
	// Clock is the node's clock. Default: a CoarseClock the Syncer owns.
	Clock local.Clock
	// Observer receives each round's figures. Optional.
	Observer Observer
	// PassTime makes the scripts take the node's clock (plus the learned
	// offset, which is then 0) instead of Redis's: for simulations on a
	// virtual clock. Default false: Redis's clock rules.
	PassTime bool
}

// Observer receives what the Syncer does. Its methods are called from the
// sync loop, one at a time, and must not block.
type Observer interface {
	// Round reports a sync round.
	Round(RoundStats)
}

// RoundStats are one round's figures.
type RoundStats struct {
	Keys     int           // keys looked after (holding a lease or usage)
	Synced   int           // keys exchanged with Redis
	Failed   int           // keys whose exchange failed
	Took     time.Duration // the round's duration
	Err      error         // the round's error, wrapping ErrUnavailable or ErrRedis; nil if none
	Pipeline int           // pipelined exchanges
	// First reports a first-lease round (SyncFirstAt), which looks only at
	// the keys that asked for one.
	First bool
	// Registered reports that the round registered the node as live (one
	// more script, every DemandTTL ÷ 2).
	Registered bool
}

// Syncer exchanges leases with Redis for the keys of a hybrid limiter: it
// reports what each node admitted and brings back new leases, driven by
// need. It runs in its own goroutine (Start), or round by round (SyncAt) for
// tests and simulations. Close stops it. A Syncer is safe for concurrent use.
type Syncer struct {
	cfg      SyncConfig
	ks       Keyspace
	node     string
	ownClock *local.CoarseClock

	queues    [queueShards]queue
	first     queue // keys for the next first-lease round
	wake      chan struct{}
	wakeFirst chan struct{}

	mu         sync.Mutex // one round at a time; guards active and registered
	active     map[*keyed.Entry[Lease]]*LeaseRule
	registered int64 // node time of the last registration, 0 before any

	counted atomic.Int64 // live nodes as the registry last counted them
	// offset is Redis time − node time as the last reply measured it, from
	// any key or the registry: a new key starts from it until its own
	// first reply, so that its first decisions already fall in Redis's
	// windows, not the node clock's.
	offset atomic.Int64

	life            sync.Mutex // guards the fields below
	stop, done      chan struct{}
	closed, flushed bool
}

const queueShards = 16

type queue struct {
	mu    sync.Mutex
	items []queued
	_     [64 - 8 - 24]byte
}

type queued struct {
	rule  *LeaseRule
	entry *keyed.Entry[Lease]
}

// NewSyncer returns a Syncer for cfg, not yet running. It copies cfg and
// reports a bad field with an error wrapping ErrInvalidConfig.
func NewSyncer(cfg SyncConfig) (*Syncer, error) {
	if err := checkRedis(cfg.Client, cfg.Keyspace, "syncs"); err != nil {
		return nil, err
	}
	if cfg.Interval == 0 {
		cfg.Interval = DefaultInterval
	}
	def := func(d *time.Duration, name string, v time.Duration) error {
		if *d == 0 {
			*d = v
		}
		if *d < 0 {
			return fmt.Errorf("%w: %s %v: must be positive", ErrInvalidConfig, name, *d)
		}
		return nil
	}
	for _, f := range []struct {
		d    *time.Duration
		name string
		v    time.Duration
	}{
		{&cfg.Interval, "Interval", DefaultInterval},
		{&cfg.Horizon, "Horizon", 2 * cfg.Interval},
		{&cfg.MinGap, "MinGap", cfg.Interval / 10},
		{&cfg.LeaseTTL, "LeaseTTL", 5 * cfg.Interval},
		{&cfg.DemandTTL, "DemandTTL", 5 * cfg.Interval},
		{&cfg.IdleRelease, "IdleRelease", 3 * cfg.Interval},
		{&cfg.Timeout, "Timeout", cfg.Interval},
	} {
		if err := def(f.d, f.name, f.v); err != nil {
			return nil, err
		}
	}
	if err := def(&cfg.Safety, "Safety", cfg.MinGap); err != nil {
		return nil, err
	}
	if err := def(&cfg.FirstGap, "FirstGap", cfg.MinGap/10); err != nil {
		return nil, err
	}
	if err := def(&cfg.PaceGap, "PaceGap", cfg.MinGap/5); err != nil {
		return nil, err
	}
	if cfg.PaceGap > cfg.MinGap {
		return nil, fmt.Errorf("%w: PaceGap %v: must not pass MinGap %v", ErrInvalidConfig, cfg.PaceGap, cfg.MinGap)
	}
	if cfg.Interval < time.Millisecond {
		return nil, fmt.Errorf("%w: Interval %v: must be at least 1ms", ErrInvalidConfig, cfg.Interval)
	}
	if cfg.LeaseTTL <= 2*cfg.Interval {
		return nil, fmt.Errorf("%w: LeaseTTL %v: must be more than twice Interval, or shares expire between renewals", ErrInvalidConfig, cfg.LeaseTTL)
	}
	if cfg.Epsilon == 0 {
		cfg.Epsilon = DefaultEpsilon
	}
	if cfg.Epsilon < 0 || cfg.Epsilon > 1 {
		return nil, fmt.Errorf("%w: Epsilon %v: must be in (0, 1]", ErrInvalidConfig, cfg.Epsilon)
	}
	if cfg.NoColdStart {
		cfg.Epsilon = 0
	}
	if cfg.Batch == 0 {
		cfg.Batch = DefaultBatch
	}
	if cfg.Batch < 1 || cfg.Nodes < 0 {
		return nil, fmt.Errorf("%w: Batch and Nodes must not be negative", ErrInvalidConfig)
	}
	if cfg.NodeID == "" {
		b := make([]byte, 8)
		rand.Read(b)
		cfg.NodeID = base64.RawURLEncoding.EncodeToString(b)
	}
	if err := ValidRuleName(cfg.NodeID); err != nil {
		return nil, fmt.Errorf("%w: NodeID %q: letters, digits and -_.:/ only", ErrInvalidConfig, cfg.NodeID)
	}
	s := &Syncer{
		cfg: cfg, ks: cfg.Keyspace, node: cfg.NodeID,
		wake:      make(chan struct{}, 1),
		wakeFirst: make(chan struct{}, 1),
		active:    map[*keyed.Entry[Lease]]*LeaseRule{},
	}
	s.ks.Secret = append([]byte(nil), s.ks.Secret...)
	if s.cfg.Clock == nil {
		s.ownClock = local.NewCoarseClock(local.DefaultResolution)
		s.cfg.Clock = s.ownClock
	}
	return s, nil
}

// NodeID returns the node's name in Redis.
func (s *Syncer) NodeID() string { return s.node }

// Keyspace returns the Keyspace the Syncer names keys with.
func (s *Syncer) Keyspace() *Keyspace { return &s.ks }

// Interval returns the sync interval.
func (s *Syncer) Interval() time.Duration { return s.cfg.Interval }

// LeaseRule returns the hybrid form of r, or an error wrapping
// ErrNotLeasable when its limit cannot be split into leases.
func (s *Syncer) LeaseRule(r *Rule) (*LeaseRule, error) { return newLeaseRule(r, &s.cfg, s) }

// Nodes returns the number of live nodes: those whose last round Redis saw
// within DemandTTL (a node registers every DemandTTL ÷ 2), and at least
// SyncConfig.Nodes. It is SyncConfig.Nodes, possibly 0, before this node's
// first round.
func (s *Syncer) Nodes() int64 { return max(s.counted.Load(), int64(s.cfg.Nodes)) }

// registryKey names the registry of live nodes.
func (s *Syncer) registryKey() string { return s.ks.prefix() + ":nodes" }

// register is the round's registration, when one is due: every DemandTTL ÷
// 2, and on leaving. The caller holds mu.
func (s *Syncer) register(now int64, leave bool) (call, bool) {
	if !leave && s.registered != 0 && now-s.registered < s.cfg.DemandTTL.Microseconds()/2 {
		return call{}, false
	}
	s.registered = now
	return call{scriptRegistry, []string{s.registryKey()},
		[]any{s.scriptNow(now), s.node, s.cfg.DemandTTL.Microseconds(), boolFlag(leave)}}, true
}

// Notify hands a key to the syncer after Lease.Decide signalled: the key
// joins the next round, which an urgent key (its lease running low)
// brings forward. A key's first request, and a lease granted on a guess
// running low, ask for the next first-lease round instead. The caller holds
// the entry's lock. Notify does not block and, for a key already handed
// over, costs a check.
func (s *Syncer) Notify(r *LeaseRule, e *keyed.Entry[Lease]) {
	k := &e.Value
	if k.flags&(flagQueued|flagActive) == 0 {
		k.flags |= flagQueued
		s.queues[uintptr(k.Digest[0])%queueShards].push(r, e)
	}
	switch {
	case k.wantsFirst(r):
		if k.flags&(flagFirst|flagInFlight) == 0 {
			k.flags |= flagFirst
			s.first.push(r, e)
			signal(s.wakeFirst)
		}
	case k.flags&flagUrgent != 0:
		signal(s.wake)
	}
}

func (q *queue) push(r *LeaseRule, e *keyed.Entry[Lease]) {
	q.mu.Lock()
	q.items = append(q.items, queued{r, e})
	q.mu.Unlock()
}

// take empties q and returns what it held.
func (q *queue) take() []queued {
	q.mu.Lock()
	items := q.items
	q.items = nil
	q.mu.Unlock()
	return items
}

// signal wakes whoever waits on c, unless it is already signalled.
func signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// wanted reports, and clears, whether c was signalled.
func wanted(c chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// Start runs the sync loop in a goroutine until Close or Shutdown: a round
// every Interval, and sooner for keys that asked (at most every MinGap);
// between them, first-lease rounds for new keys (at most every FirstGap).
// Calling it again, or after Close, does nothing.
func (s *Syncer) Start() {
	s.life.Lock()
	defer s.life.Unlock()
	if s.closed || s.stop != nil {
		return
	}
	s.stop, s.done = make(chan struct{}), make(chan struct{})
	go s.loop()
}

func (s *Syncer) loop() {
	defer close(s.done)
	tick := time.NewTicker(s.cfg.Interval)
	defer tick.Stop()
	// Each kind of round waits its own gap after the last of its kind; a
	// round asked for sooner than that is run by its timer (nil channel:
	// none pending).
	var early, first gapTimer
	defer early.stop()
	defer first.stop()
	failed := false // the last round failed: wait for the next tick
	run := func(sync func(context.Context, int64) (RoundStats, error)) {
		ctx, cancel := context.WithTimeout(context.Background(), s.cfg.Timeout)
		_, err := sync(ctx, s.cfg.Clock.Now().UnixMicro())
		cancel()
		failed = errors.Is(err, ErrUnavailable)
	}
	for {
		select {
		case <-s.stop:
			return
		case <-tick.C:
			early.ran()
			run(s.SyncAt)
		case <-s.wake:
			// After a failure, keys that want leases would wake the loop at
			// every gap and resend, piling work on a server that is down or
			// overloaded: the next tick retries.
			if !failed && early.due(s.cfg.MinGap) {
				run(s.SyncAt)
			}
		case <-early.c:
			early.ran()
			run(s.SyncAt)
		case <-s.wakeFirst:
			if !failed && first.due(s.cfg.FirstGap) {
				run(s.SyncFirstAt)
			}
		case <-first.c:
			first.ran()
			run(s.SyncFirstAt)
		}
	}
}

// gapTimer paces one kind of the loop's rounds: at most one per gap.
type gapTimer struct {
	last time.Time
	t    *time.Timer
	c    <-chan time.Time // t's channel while it is pending, else nil
}

// due reports whether a round asked for now may run at once, and records
// it as run; if not, it sets the timer for when it may, unless it is set.
func (g *gapTimer) due(gap time.Duration) bool {
	if g.c != nil {
		return false
	}
	wait := gap - time.Since(g.last)
	if wait <= 0 {
		g.last = time.Now()
		return true
	}
	if g.t == nil {
		g.t = time.NewTimer(wait)
	} else {
		g.t.Reset(wait)
	}
	g.c = g.t.C
	return false
}

// ran records a round run now, and drops a pending timer's round, which it
// served.
func (g *gapTimer) ran() {
	g.last = time.Now()
	if g.c != nil {
		g.t.Stop()
		g.c = nil
	}
}

func (g *gapTimer) stop() {
	if g.t != nil {
		g.t.Stop()
	}
}

// stopLoop stops the loop, if it runs, and waits for it.
func (s *Syncer) stopLoop() {
	s.life.Lock()
	defer s.life.Unlock()
	if s.stop != nil && !s.closed {
		close(s.stop)
		<-s.done
	}
	s.closed = true
}

// Close stops the loop and the Syncer's own clock, and waits for them. It
// does not report what is unreported: Shutdown does. Idempotent; always
// returns nil.
func (s *Syncer) Close() error {
	s.stopLoop()
	if s.ownClock != nil {
		s.ownClock.Close()
	}
	return nil
}

// Shutdown stops the loop, then, in one last round within ctx, reports
// every key's unreported usage and gives its leases back, and closes the
// Syncer. Idempotent, like Close; the last round runs once.
func (s *Syncer) Shutdown(ctx context.Context) error {
	s.life.Lock()
	flushed := s.flushed
	s.flushed = true
	s.life.Unlock()
	s.stopLoop()
	var err error
	if !flushed {
		_, err = s.round(ctx, s.cfg.Clock.Now().UnixMicro(), true)
	}
	s.Close()
	return err
}

// Wanted reports, and clears, whether a key asked for an early round since
// the last call: the signal the loop wakes on, for callers that run the
// rounds themselves (simulations).
func (s *Syncer) Wanted() bool { return wanted(s.wake) }

// WantedFirst reports, and clears, whether a key asked for a first-lease
// round since the last call: for callers that run the rounds themselves,
// who then run one (SyncFirstAt) at once, or FirstGap after the last.
func (s *Syncer) WantedFirst() bool { return wanted(s.wakeFirst) }

// SyncAt runs one round at node time now (µs): it takes the keys handed
// over since the last round, and exchanges with Redis those that need it.
func (s *Syncer) SyncAt(ctx context.Context, now int64) (RoundStats, error) {
	return s.round(ctx, now, false)
}

// pending is a request out for one key.
type pending struct {
	entry   *keyed.Entry[Lease]
	rule    *LeaseRule
	sentAt  int64
	wid     int64 // windows: the window the current report is for
	used    int64 // ... and its use as sent
	pused   int64 // the previous window's use as sent
	debt    int64 // buckets: the debt sent
	release bool
}

// SyncFirstAt runs a first-lease round at node time now: it exchanges only
// the keys that asked, since the last such round, for their first lease or
// for the correction of a lease granted on a guess (before their demand
// could be measured). Such a key need not wait MinGap after the node's
// last round: a busy new key spends its cold-start allowance in far less.
func (s *Syncer) SyncFirstAt(ctx context.Context, now int64) (RoundStats, error) {
	start := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	var b batch
	for _, it := range s.first.take() {
		e, r := it.entry, it.rule.latest()
		e.Lock()
		k := &e.Value
		k.flags &^= flagFirst
		if !e.Evicted() && k.flags&flagInFlight == 0 && k.wantsFirst(r) {
			s.send(&b, e, r, now, false)
		}
		e.Unlock()
	}
	return s.exchange(ctx, &b, RoundStats{Keys: len(s.active), First: true}, start)
}

// batch is a round's calls, and for each what was sent.
type batch struct {
	calls []call
	outs  []pending
}

func (b *batch) add(c call, p pending) {
	b.calls, b.outs = append(b.calls, c), append(b.outs, p)
}

// send adds e's exchange at node time now to b and marks it in flight. The
// caller holds e's lock.
func (s *Syncer) send(b *batch, e *keyed.Entry[Lease], r *LeaseRule, now int64, final bool) {
	c, p := s.request(&e.Value, r, now, final)
	p.entry, p.rule = e, r
	e.Value.flags |= flagInFlight
	b.add(c, p)
}

func (s *Syncer) round(ctx context.Context, now int64, final bool) (RoundStats, error) {
	start := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	// The keys waiting for a first-lease round are looked after in this
	// one, if due: a round asks for them again at their next decision. (While
	// Redis is out, the loop runs no first-lease round, and its list would
	// otherwise grow with every new key.)
	for _, it := range s.first.take() {
		it.entry.Lock()
		it.entry.Value.flags &^= flagFirst
		it.entry.Unlock()
	}
	for i := range s.queues {
		for _, it := range s.queues[i].take() {
			it.entry.Lock()
			if !it.entry.Evicted() {
				it.entry.Value.flags = it.entry.Value.flags&^flagQueued | flagActive
				s.active[it.entry] = it.rule
			}
			it.entry.Unlock()
		}
	}
	var b batch
	if c, ok := s.register(now, final); ok {
		b.add(c, pending{sentAt: now}) // no entry: the registry's
	}
	for e, r := range s.active {
		if l := r.latest(); l != r { // the limit changed: exchange under the new one
			r = l
			s.active[e] = r
		}
		e.Lock()
		k := &e.Value
		if e.Evicted() {
			e.Unlock()
			delete(s.active, e)
			continue
		}
		switch {
		case k.flags&flagInFlight != 0:
		case final || s.due(k, r, now):
			s.send(&b, e, r, now, final)
		case k.holdsNothing() && !k.unreported():
			// Nothing held, nothing to report: the key needs no looking
			// after until its next request hands it over again.
			k.flags &^= flagActive
			delete(s.active, e)
		}
		e.Unlock()
	}
	return s.exchange(ctx, &b, RoundStats{Keys: len(s.active)}, start)
}

// exchange sends a round's calls in pipelines of Batch, applies the replies
// and reports the round (st) to the Observer. The caller holds mu.
func (s *Syncer) exchange(ctx context.Context, b *batch, st RoundStats, start time.Time) (RoundStats, error) {
	calls, outs := b.calls, b.outs
	var roundErr error
	for lo := 0; lo < len(calls); lo += s.cfg.Batch {
		hi := min(lo+s.cfg.Batch, len(calls))
		cmds, err := runPipelined(ctx, s.cfg.Client, s.cfg.Client.Pipeline, calls[lo:hi])
		st.Pipeline++
		recv := s.cfg.Clock.Now().UnixMicro()
		for i, cmd := range cmds {
			p := &outs[lo+i]
			vals, cerr := cmd.Int64Slice()
			if p.entry == nil { // the registration
				if cerr == nil && len(vals) == 2 {
					s.counted.Store(vals[1])
					s.offset.Store(vals[0] - (p.sentAt+recv)/2)
					st.Registered = true
				} else {
					s.registered = 0 // again at the next round
					if cerr != nil && roundErr == nil {
						roundErr = wrap(ctx, "register", cerr)
					}
				}
				continue
			}
			p.entry.Lock()
			p.entry.Value.flags &^= flagInFlight
			if cerr == nil && !p.entry.Evicted() {
				s.apply(&p.entry.Value, p, vals, recv)
				st.Synced++
			} else if cerr != nil {
				st.Failed++
				if roundErr == nil {
					roundErr = wrap(ctx, "sync", cerr)
				}
			}
			p.entry.Unlock()
		}
		if err != nil && roundErr == nil {
			roundErr = wrap(ctx, "sync", err)
		}
	}
	st.Took, st.Err = time.Since(start), roundErr
	if s.cfg.Observer != nil {
		s.cfg.Observer.Round(st)
	}
	return st, roundErr
}

// holdsNothing reports whether the lease holds no grant and no share.
func (k *Lease) holdsNothing() bool {
	return k.granted <= k.used && k.next == 0 && k.rate == 0 && k.burst == 0
}

// unreported reports whether the node admitted what Redis does not know of.
func (k *Lease) unreported() bool {
	return k.used > k.acked || k.pused > k.packed || k.debt > k.debtSent
}

// due reports whether k needs an exchange at node time now.
func (s *Syncer) due(k *Lease, r *LeaseRule, now int64) bool {
	gap := now - k.lastSync
	if k.flags&flagSynced == 0 { // a new key: fetch its first lease at once
		return gap >= s.cfg.MinGap.Microseconds() || k.flags&flagSent == 0
	}
	idle := now-k.lastUse > s.cfg.IdleRelease.Microseconds()
	urgent := k.flags&flagUrgent != 0 && elapsed(gap, s.cfg.MinGap.Microseconds())
	regular := elapsed(gap, r.interval)
	if r.buckets {
		rnow := now + k.offset
		renew := !idle && k.expiry-rnow < 2*r.interval
		switch {
		case k.debt > k.debtSent:
			return regular || urgent
		case idle:
			return regular && (k.rate > 0 || k.burst > 0)
		default:
			return urgent || (regular && renew)
		}
	}
	rnow := now + k.offset
	k.roll(r, rnow-rnow%r.w)
	// Use within a grant needs no report: Redis counts the grant. A sync
	// is for debt (use beyond the grant), a lease running low, or the next
	// window's grant when the key is busy enough to want one; a key that
	// is exhausted waits for the next window.
	debt := k.used > k.granted && k.used > k.acked || k.pused > k.packed
	busy := !idle && ceilDiv(k.demand*r.horizon, r.w) >= 2
	preGrant := busy && k.next == 0 && rnow >= k.wid+r.w-r.horizon
	// An idle key gives back a grant worth giving back: in a window longer
	// than a claim's span (5 horizons: shorter windows end soon enough), a
	// sizable one, with time left. A small one ends with its window.
	release := idle && r.w > 5*r.horizon && k.granted-k.used >= max(r.limit/(100*max(r.Nodes(), 1)), 1) &&
		rnow < k.wid+r.w-2*r.interval
	if k.flags&flagExhausted != 0 {
		return regular && (debt || preGrant)
	}
	return urgent || (regular && (debt || preGrant || release))
}

// elapsed reports whether gap, a key's time since its last sync by the
// node's clock, has reached want, less a tenth: the loop spaces its rounds
// by want on its timers, while the gap is read from a clock that may lag
// them by its resolution (a CoarseClock's millisecond), and a key synced in
// one round must be due in the next rather than two rounds on.
func elapsed(gap, want int64) bool { return gap >= want-want/10 }

// demandUnknown is the demand a key's first exchange reports when it came
// too soon after the key's first request to measure one (request): the
// lease scripts then count the node at the average demand, and grant it a
// quarter of that claim or share until its next exchange measures it.
const demandUnknown = -1

// request builds k's exchange at node time now.
func (s *Syncer) request(k *Lease, r *LeaseRule, now int64, final bool) (call, pending) {
	// Demand: requests per window, from those decided since the last sync.
	unknown, guess := false, false
	if k.lastSync > 0 && (now > k.lastSync || k.flags&flagSynced == 0) {
		hits, elapsed := k.hits, now-k.lastSync
		if k.flags&flagSynced == 0 {
			// A new key: the count started at its first request, which
			// does not measure the rate; the ones after it do, over at
			// least MinGap, as a few requests in a few microseconds say
			// little. An exchange sooner than that says the demand is
			// unknown (demandUnknown), and the next one measures it,
			// unless the key is taken as quiet (quietAtFirst). Either way
			// the lease is a guess, corrected in a first-lease round if it
			// runs low.
			hits = max(hits-1, 0)
			if gap := max(s.cfg.MinGap.Microseconds(), 1); elapsed < gap {
				unknown, guess, elapsed = !k.quietAtFirst(r), true, gap
			}
		}
		if !unknown {
			if k.demand == 0 {
				k.demand = hits * r.w / elapsed
			} else {
				// A moving average over about one Interval, whatever the
				// syncs' spacing: syncs a MinGap apart measure a few
				// requests each, too few to size a share on.
				k.demand = (k.demand*r.interval + hits*r.w + r.interval/2) / (r.interval + elapsed)
			}
		}
	} else if k.hits > 0 {
		k.demand = max(k.demand, k.hits)
	}
	k.hits = 0
	idle := now-k.lastUse > s.cfg.IdleRelease.Microseconds()
	release := final || idle
	demand := k.demand
	k.flags &^= flagGuess
	if release {
		demand = 0
	} else if guess {
		if unknown {
			demand = demandUnknown
		}
		k.flags |= flagGuess
	}
	k.lastSync = now
	k.flags = k.flags&^flagUrgent | flagSent
	digest := encodeDigest(k.Digest)
	p := pending{sentAt: now, release: release}
	if r.buckets {
		k.seq++
		rnow := now + k.offset
		p.debt = k.debt - k.debtSent
		tokens := int64(0)
		if release {
			// The node stops using its share now and hands back the tokens
			// it holds, which the pool takes: a quiet key's tokens would
			// otherwise be lost at its share's expiry, and the pool, drained
			// by the grants of nodes that each used a few, would leave the
			// key short of what it may admit. It sends no share as held:
			// nothing is to stay committed.
			k.refill(r, min(rnow, k.expiry-r.safety))
			tokens = k.tokens
			k.tokens, k.rem, k.rate, k.burst, k.expiry = 0, 0, 0, 0, 0
		} else {
			k.refill(r, rnow)
			tokens = k.tokens
		}
		state := s.ks.name(r.rule.name, digest, "s")
		args := []any{s.scriptNow(rnow), s.node, k.seq, boolFlag(release), demand, tokens, p.debt,
			s.cfg.LeaseTTL.Microseconds(), s.cfg.DemandTTL.Microseconds(), k.rate, k.burst, k.expiry, s.Nodes(), r.horizon, r.allowance()}
		return call{scriptLeaseBucket, []string{state}, append(args, r.rule.args...)}, p
	}
	rnow := now + k.offset
	k.roll(r, rnow-rnow%r.w)
	p.wid, p.used, p.pused = k.wid, k.used, k.pused
	need := max(ceilDiv(max(demand, 0)*r.horizon, r.w), 1)
	wantCur, wantNext := k.used+need, int64(0)
	if release {
		wantCur = 0
	} else if rnow >= k.wid+r.w-r.horizon {
		wantNext = need
	}
	keys := s.windowKeys(r, digest)
	args := []any{s.scriptNow(rnow), s.node, boolFlag(release), demand, wantCur, wantNext, r.horizon,
		k.wid - r.w, k.pused, k.wid, k.used, s.cfg.DemandTTL.Microseconds(), s.Nodes(), 2 * r.minGap, 3 * r.paceGap}
	return call{scriptLeaseWindow, keys, append(args, r.rule.args...)}, p
}

// scriptNow is the time argument of a script: empty for Redis's clock, or
// the node's estimate of it under PassTime.
func (s *Syncer) scriptNow(rnow int64) string {
	if !s.cfg.PassTime {
		return ""
	}
	return strconv.FormatInt(rnow, 10)
}

func boolFlag(b bool) int {
	if b {
		return 1
	}
	return 0
}

// windowKeys names the meta hash and the three window slots of a key.
func (s *Syncer) windowKeys(r *LeaseRule, digest string) []string {
	n := r.rule.name
	return []string{s.ks.name(n, digest, "m"), s.ks.name(n, digest, "w0"), s.ks.name(n, digest, "w1"), s.ks.name(n, digest, "w2")}
}

// apply takes a reply into k. recv is the node time it arrived.
func (s *Syncer) apply(k *Lease, p *pending, v []int64, recv int64) {
	r := p.rule
	k.rule = r
	redisNow := v[0]
	k.offset = redisNow - (p.sentAt+recv)/2
	s.offset.Store(k.offset)
	// The exchange answered whatever made the key urgent while it was out;
	// the next decision asks again if the new lease runs low too. (A lease
	// granted on a guess would otherwise be corrected at once, on a handful
	// of requests, by a first-request flag set before the reply.)
	k.flags = k.flags&^flagUrgent | flagSynced
	if r.buckets {
		s.applyBucket(k, p, v)
		return
	}
	// {now, wt, epoch, gcur, ucur, Rcur, gnext, Rprev, revoked, exhausted, live, room, paced}
	wt, ep, gcur, ucur, rcur, gnext, rprev := v[1], v[2], v[3], v[4], v[5], v[6], v[7]
	revoked, exhausted, paced := v[8] == 1, v[9] == 1, v[12] == 1 // v[10]: the key's live nodes, for tests
	k.epoch = ep
	k.roll(r, wt) // Redis may be a window ahead of what this node saw
	switch wt {
	case k.wid: // Redis's current window is the node's
		switch p.wid {
		case wt:
			// ucur is the node's use there as Redis holds it: at least what
			// was sent, unless Redis lost it (restart, failover), in which
			// case the rest is reported again.
			k.acked = min(p.used, ucur)
			k.packed = max(k.packed, min(p.pused, k.pused))
		case wt - r.w:
			k.packed = max(k.packed, min(p.used, k.pused))
		}
		k.granted, k.next = gcur, gnext
		k.others = rcur - max(gcur, ucur)
		k.room = v[11]
		k.flags &^= flagExhausted | flagPaced
		if exhausted {
			k.flags |= flagExhausted
		}
		if paced {
			k.flags |= flagPaced
		}
	case k.wid - r.w:
		// The node's clock is ahead: Redis's current window is the node's
		// previous one, and its next the node's current.
		if p.wid == k.wid {
			k.acked = max(k.acked, p.used)
		}
		k.packed = max(k.packed, min(ucur, k.pused))
		k.granted = max(k.granted, gnext)
		k.others = 0
		// "Exhausted" speaks of Redis's current window, the node's
		// previous one: its refusal must not carry into the window the
		// node has begun.
		if exhausted {
			k.flags |= flagExhaustedPrev
		}
	}
	if revoked {
		k.granted, k.next = min(k.granted, k.used), 0
	}
	k.prevR = rprev
}

func (s *Syncer) applyBucket(k *Lease, p *pending, v []int64) {
	r := p.rule
	// {now, epoch, l, b, expiry, grant, pool tokens, pool rate, pool cap, revoked, live}
	redisNow, ep, l, b, x, grant, pool := v[0], v[1], v[2], v[3], v[4], v[5], v[6]
	revoked := v[9] == 1
	k.refill(r, redisNow)
	if l < k.rate || b < k.burst {
		// The share shrank: Redis keeps the old one committed, idle for
		// everyone, until this node's next request says it applied the new
		// one. Send it soon.
		k.flags |= flagUrgent
	}
	if (k.epoch != 0 && ep != k.epoch) || revoked {
		k.tokens, k.rem = 0, 0 // what we held is gone with Redis's state, or revoked
	}
	k.epoch = ep
	k.debtSent += p.debt
	k.rate, k.burst, k.expiry = l, b, x
	k.tokens = min(k.tokens+grant, b)
	if k.tokens >= b {
		k.rem = 0
	}
	k.last = max(k.last, redisNow)
	k.others = pool
}
