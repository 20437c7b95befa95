package syncer

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hybridlimit/hybridlimit/internal/coarse"
	"github.com/hybridlimit/hybridlimit/internal/config"
	"github.com/hybridlimit/hybridlimit/internal/keyed"
	"github.com/hybridlimit/hybridlimit/internal/keyname"
	"github.com/hybridlimit/hybridlimit/internal/lease"
	"github.com/hybridlimit/hybridlimit/internal/synchook"
	"github.com/hybridlimit/hybridlimit/local"
)

// Defaults of syncConfig, which are hybrid.SyncConfig's:
// docs/operating.md#defaults lists them, and TestDefaults holds that table
// against them. The durations but Interval
// derive from it: Horizon is defaultHorizonIntervals × Interval, MinGap is
// Interval ÷ defaultMinGapsPerInterval, and so on.
const (
	defaultInterval             = 100 * time.Millisecond
	defaultHorizonIntervals     = 2
	defaultMinGapsPerInterval   = 10
	defaultFirstGapsPerMinGap   = 10
	defaultPaceGapsPerMinGap    = 5
	defaultLeaseTTLIntervals    = 5
	defaultDemandTTLIntervals   = 5
	defaultIdleReleaseIntervals = 3
	defaultEpsilon              = config.Epsilon
	defaultBatch                = 64
)

// minInterval bounds Tuning.Interval from below.
const minInterval = time.Millisecond

// syncConfig configures a syncer: the Tuning of hybrid.SyncConfig, which
// documents each field and its default, and what the hybrid Limiter
// provides. Every zero field takes its default; the durations derive from
// Interval unless set.
type syncConfig struct {
	synchook.Tuning
	// Client reaches Redis; see CentralConfig.Client. Required.
	Client redis.UniversalClient
	// Keyspace names the keys; every node must use the same one. Default:
	// prefix "hl".
	Keyspace Keyspace
	// Clock is the node's clock. Default: a coarse clock of 1ms resolution
	// that newSyncer starts and Close stops.
	Clock local.Clock
	// Observer receives each round's figures. Optional.
	Observer synchook.Observer
	// PassTime makes the scripts take the node's clock instead of Redis's
	// (the node then learns no offset between the two): for simulations on
	// a virtual clock. Default false: Redis's clock rules.
	PassTime bool
}

// withDefaults returns c with each zero field that has a default set to
// it. NodeID stays empty (newSyncer draws a random one) and Clock nil
// (newSyncer starts its own).
func (c syncConfig) withDefaults() syncConfig {
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	c.Keyspace = c.Keyspace.withDefaults()
	def(&c.Interval, defaultInterval)
	def(&c.Horizon, defaultHorizonIntervals*c.Interval)
	def(&c.MinGap, c.Interval/defaultMinGapsPerInterval)
	def(&c.LeaseTTL, defaultLeaseTTLIntervals*c.Interval)
	def(&c.DemandTTL, defaultDemandTTLIntervals*c.Interval)
	def(&c.IdleRelease, defaultIdleReleaseIntervals*c.Interval)
	def(&c.Timeout, c.Interval)
	def(&c.Safety, c.MinGap)
	def(&c.FirstGap, c.MinGap/defaultFirstGapsPerMinGap)
	def(&c.PaceGap, c.MinGap/defaultPaceGapsPerMinGap)
	if c.Epsilon == 0 {
		c.Epsilon = defaultEpsilon
	}
	if c.Batch == 0 {
		c.Batch = defaultBatch
	}
	return c
}

// validate reports c's first bad field, c having its defaults, in an error
// wrapping ErrInvalidConfig that names it. It builds nothing.
func (c syncConfig) validate() error {
	if err := checkRedis(c.Client, c.Keyspace, "syncs"); err != nil {
		return err
	}
	for _, f := range []struct {
		name string
		d    time.Duration
	}{
		{"Interval", c.Interval}, {"Horizon", c.Horizon}, {"MinGap", c.MinGap},
		{"LeaseTTL", c.LeaseTTL}, {"DemandTTL", c.DemandTTL}, {"IdleRelease", c.IdleRelease},
		{"Timeout", c.Timeout}, {"Safety", c.Safety}, {"FirstGap", c.FirstGap}, {"PaceGap", c.PaceGap},
	} {
		if f.d < 0 {
			return invalidConfig(f.name, f.d, "must be positive")
		}
	}
	switch {
	case c.PaceGap > c.MinGap:
		return invalidConfig("PaceGap", c.PaceGap, fmt.Sprintf("must not pass MinGap %v", c.MinGap))
	case c.Interval < minInterval:
		return invalidConfig("Interval", c.Interval, fmt.Sprintf("must be at least %v", minInterval))
	case c.LeaseTTL <= 2*c.Interval:
		return invalidConfig("LeaseTTL", c.LeaseTTL, "must be more than twice Interval, or shares expire between renewals")
	case c.Epsilon < 0 || c.Epsilon > 1:
		return invalidConfig("Epsilon", c.Epsilon, "must be in [0, 1] (0 takes the default)")
	case c.Batch < 1:
		return invalidConfig("Batch", c.Batch, "must be at least 1")
	case c.Nodes < 0:
		return invalidConfig("Nodes", c.Nodes, "must not be negative")
	}
	if c.NodeID != "" {
		if err := keyname.CheckRule(c.NodeID); err != nil {
			return invalidConfig("NodeID", fmt.Sprintf("%q", c.NodeID), err.Error())
		}
	}
	return nil
}

// syncer exchanges leases with Redis for the keys of a hybrid limiter: it
// reports what each node admitted and brings back new leases, driven by
// need. It runs in its own goroutines (Start), or round by round (SyncAt) for
// tests and simulations. Close stops it. A syncer is safe for concurrent use.
//
// It serves package hybrid, whose Limiter decides from the leases, through
// internal/syncx (hook.go): its methods are synchook.Syncer's.
type syncer struct {
	cfg      syncConfig
	ks       Keyspace
	node     string
	ownClock *coarse.Clock
	params   lease.Params

	// cluster is what the rounds learn and the leases read (live nodes,
	// Redis's clock), and the keys the hot path hands over.
	cluster *lease.Cluster

	mu         sync.Mutex // one round at a time; guards active and registered
	active     map[*keyed.Entry[lease.Lease]]*lease.Rule
	registered int64 // node time of the last registration, 0 before any
	// firstMu runs one first-lease round at a time, beside the other
	// rounds: a request waiting for its key's lease must not wait for a
	// long round over every key.
	firstMu sync.Mutex
	nactive atomic.Int64 // len(active), for the first-lease rounds' figures
	obsMu   sync.Mutex   // one Observer call at a time
	// failed reports that the last round found Redis unavailable: the
	// loops wait for the next tick rather than answer keys that ask.
	failed atomic.Bool

	life            sync.Mutex // guards the fields below
	stop            chan struct{}
	loops           sync.WaitGroup
	closed, flushed bool
}

var _ synchook.Syncer[*Rule] = (*syncer)(nil)

// newSyncer returns a syncer for cfg, not yet running. It works on a copy
// of cfg with its zero fields set to their defaults, and reports a bad
// field with an error wrapping ErrInvalidConfig.
func newSyncer(cfg syncConfig) (*syncer, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if cfg.NodeID == "" {
		b := make([]byte, 8)
		rand.Read(b)
		cfg.NodeID = base64.RawURLEncoding.EncodeToString(b)
	}
	s := &syncer{
		cfg: cfg, ks: cfg.Keyspace, node: cfg.NodeID,
		cluster: lease.NewCluster(cfg.Nodes),
		active:  map[*keyed.Entry[lease.Lease]]*lease.Rule{},
	}
	s.params = lease.Params{
		Interval: cfg.Interval, Horizon: cfg.Horizon, MinGap: cfg.MinGap, PaceGap: cfg.PaceGap,
		Safety: cfg.Safety, IdleRelease: cfg.IdleRelease, Epsilon: cfg.Epsilon, Virtual: cfg.PassTime,
	}
	if cfg.NoColdStart {
		s.params.Epsilon = 0
	}
	s.ks.Secret = append([]byte(nil), s.ks.Secret...)
	if s.cfg.Clock == nil {
		s.ownClock = coarse.New(config.ClockResolution)
		s.cfg.Clock = s.ownClock
	}
	return s, nil
}

// NodeID returns the node's name in Redis.
func (s *syncer) NodeID() string { return s.node }

// LeaseRule returns the hybrid form of r, whose leases this syncer
// exchanges, or an error wrapping errNotLeasable when its limit cannot be
// split into leases. The lease rule holds r (its
// Ref), so the syncer keeps no record of the rules it returned.
func (s *syncer) LeaseRule(r *Rule) (*lease.Rule, error) {
	p := r.limit.Params()
	switch r.limit.Algorithm() {
	case local.FixedWindow, local.SlidingWindowCounter, local.SlidingWindowLog:
	default:
		if p.Window.Microseconds() > config.MaxProduct/(p.Burst+p.Quota) {
			return nil, fmt.Errorf("%w: rule %q: window × (burst + limit) passes 2^51; use central mode", errNotLeasable, r.name)
		}
	}
	lr, err := lease.NewRule(r.limit, s.params, s.cluster, r)
	if err != nil {
		return nil, fmt.Errorf("%w: rule %q: %w; use central mode", errNotLeasable, r.name, err)
	}
	return lr, nil
}

// errNotLeasable is returned for a rule whose limit cannot be split into
// leases: the sliding window log (no exact lease exists: it keeps every
// request), and buckets whose window × (burst + limit) passes 2^51 (the pool's
// arithmetic in Redis would not be exact). Such rules run in central mode.
var errNotLeasable = fmt.Errorf("%w: the limit cannot be split into leases", ErrInvalidRule)

// redisRule returns the Redis form of a rule LeaseRule returned.
func redisRule(lr *lease.Rule) *Rule { return lr.Ref().(*Rule) }

// Nodes returns the number of live nodes: those whose last round Redis saw
// within DemandTTL (a node registers every DemandTTL ÷ 2), and at least
// Tuning.Nodes. It is Tuning.Nodes, possibly 0, before this node's first
// round.
func (s *syncer) Nodes() int64 { return s.cluster.Nodes() }

// registryKey names the registry of live nodes.
func (s *syncer) registryKey() string { return s.ks.prefix() + ":nodes" }

// register is the round's registration, when one is due: every DemandTTL ÷
// 2, and on leaving. The caller holds mu.
func (s *syncer) register(now int64, leave bool) (call, bool) {
	if !leave && s.registered != 0 && now-s.registered < s.cfg.DemandTTL.Microseconds()/2 {
		return call{}, false
	}
	s.registered = now
	return registryCall(s.registryKey(), registryRequest{Now: s.scriptNow(now), Node: s.node, Live: s.cfg.DemandTTL.Microseconds(), Leave: leave}), true
}

// Start runs the sync loop in a goroutine until Close or Shutdown: a round
// every Interval, and sooner for keys that asked (at most every MinGap);
// and, in a goroutine of their own, so that no long round delays them,
// first-lease rounds for new keys and for keys that requests wait for (at
// most every FirstGap). Calling it again, or after Close, does nothing.
func (s *syncer) Start() {
	s.life.Lock()
	defer s.life.Unlock()
	if s.closed || s.stop != nil {
		return
	}
	s.stop = make(chan struct{})
	s.loops.Add(2)
	go s.loop()
	go s.firstLoop()
}

func (s *syncer) loop() {
	defer s.loops.Done()
	tick := time.NewTicker(s.cfg.Interval)
	defer tick.Stop()
	// Early rounds wait MinGap after the last round; one asked for sooner
	// than that is run by the timer (nil channel: none pending).
	var early gapTimer
	defer early.stop()
	run := func() {
		// A round bounds its own time (Timeout); keys it left for the
		// next one get an early round, MinGap on.
		for {
			st, err := s.round(context.Background(), s.cfg.Clock.Now().UnixMicro(), false, s.cfg.Timeout)
			failed := errors.Is(err, ErrUnavailable)
			s.failed.Store(failed)
			if failed || st.Carried == 0 || !early.due(s.cfg.MinGap) {
				return
			}
		}
	}
	for {
		select {
		case <-s.stop:
			return
		case <-tick.C:
			early.ran()
			run()
		case <-s.cluster.Wake():
			s.cluster.WakeTaken()
			// After a failure, keys that want leases would wake the loop at
			// every gap and resend, piling work on a server that is down or
			// overloaded: the next tick retries.
			if !s.failed.Load() && early.due(s.cfg.MinGap) {
				run()
			}
		case <-early.c:
			early.ran()
			run()
		}
	}
}

// firstLoop runs the first-lease rounds: when a key asks, at most every
// FirstGap; none after a round that found Redis unavailable, until the
// loop's next round finds it again.
func (s *syncer) firstLoop() {
	defer s.loops.Done()
	var first gapTimer
	defer first.stop()
	run := func() {
		_, err := s.firstRound(context.Background(), s.cfg.Clock.Now().UnixMicro(), s.cfg.Timeout)
		if errors.Is(err, ErrUnavailable) {
			s.failed.Store(true)
		}
	}
	for {
		select {
		case <-s.stop:
			return
		case <-s.cluster.WakeFirst():
			// A request waiting for its key's exchange does not wait the
			// gap too: such rounds are few (the requests a lease cannot
			// decide) and each is a request's latency.
			gap := s.cfg.FirstGap
			if s.cluster.TakeWaiting() {
				gap = 0
			}
			if !s.failed.Load() && first.due(gap) {
				run()
			}
		case <-first.c:
			first.ran()
			run()
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
func (s *syncer) stopLoop() {
	s.life.Lock()
	defer s.life.Unlock()
	if s.stop != nil && !s.closed {
		close(s.stop)
		s.loops.Wait()
	}
	s.closed = true
}

// Close stops the loop and the syncer's own clock, and waits for them. It
// does not report what is unreported: Shutdown does. Idempotent; always
// returns nil.
func (s *syncer) Close() error {
	s.stopLoop()
	if s.ownClock != nil {
		s.ownClock.Close()
	}
	return nil
}

// Shutdown stops the loop, then, in one last round within ctx, reports
// every key's unreported usage and gives its leases back, and closes the
// syncer. Idempotent, like Close; the last round runs once.
func (s *syncer) Shutdown(ctx context.Context) error {
	s.life.Lock()
	flushed := s.flushed
	s.flushed = true
	s.life.Unlock()
	s.stopLoop()
	var err error
	if !flushed {
		_, err = s.round(ctx, s.cfg.Clock.Now().UnixMicro(), true, 0)
	}
	s.Close()
	return err
}

// Wanted reports, and clears, whether a key asked for an early round since
// the last call: the signal the loop wakes on, for callers that run the
// rounds themselves (simulations).
func (s *syncer) Wanted() bool { return s.cluster.Wanted() }

// WantedFirst reports, and clears, whether a key asked for a first-lease
// round since the last call: for callers that run the rounds themselves,
// who then run one (SyncFirstAt) at once, or FirstGap after the last.
func (s *syncer) WantedFirst() bool { return s.cluster.WantedFirst() }

// SyncAt runs one round at node time now (µs): it takes the keys handed
// over since the last round, and exchanges with Redis those that need it,
// in pipelines of Batch scripts, each within Timeout and ctx.
func (s *syncer) SyncAt(ctx context.Context, now int64) (synchook.RoundStats, error) {
	return s.round(ctx, now, false, 0)
}

// pending is a request out for one key, or the registration (entry nil).
type pending struct {
	entry *keyed.Entry[lease.Lease]
	rule  *lease.Rule
	req   lease.Request
}

// SyncFirstAt runs a first-lease round at node time now: it exchanges only
// the keys that asked, since the last such round, for their first lease or
// for the correction of a lease granted on a guess (before their demand
// could be measured). Such a key need not wait MinGap after the node's
// last round: a busy new key spends its cold-start allowance in far less.
func (s *syncer) SyncFirstAt(ctx context.Context, now int64) (synchook.RoundStats, error) {
	return s.firstRound(ctx, now, 0)
}

// firstRound is SyncFirstAt, within budget (see batch).
func (s *syncer) firstRound(ctx context.Context, now int64, budget time.Duration) (synchook.RoundStats, error) {
	start := time.Now()
	s.firstMu.Lock()
	defer s.firstMu.Unlock()
	b := batch{budget: budget}
	for _, it := range s.cluster.TakeFirst() {
		e, r := it.Entry, it.Rule.Latest()
		e.Lock()
		k := &e.Value
		k.TakeFirst()
		if !e.Evicted() && !k.InFlight() && k.WantsFirst(r) {
			b.due(e, r)
		}
		e.Unlock()
	}
	return s.exchange(ctx, &b, now, synchook.RoundStats{Keys: int(s.nactive.Load()), First: true}, start)
}

// batch is a round's work: the registration, if due, and the keys due,
// whose requests are built pipeline by pipeline as they are sent, so that a
// key the round does not reach is left as it was. A round starts no
// pipeline once it has run budget (0: no bound but ctx): the keys left are
// the next round's (RoundStats.Carried). calls and outs are the pipeline
// being sent, and for each what was sent.
type batch struct {
	reg    *call
	keys   []dueKey
	final  bool
	budget time.Duration
	calls  []call
	outs   []pending
}

// dueKey is a key due for an exchange, and the node time of its last one
// (or of its first request), which orders the keys of a round.
type dueKey struct {
	entry *keyed.Entry[lease.Lease]
	rule  *lease.Rule
	since int64
}

// due adds e to b's keys. The caller holds e's lock.
func (b *batch) due(e *keyed.Entry[lease.Lease], r *lease.Rule) {
	b.keys = append(b.keys, dueKey{e, r, e.Value.LastSync()})
}

func (b *batch) add(c call, p pending) {
	b.calls, b.outs = append(b.calls, c), append(b.outs, p)
}

// send adds e's exchange at node time now to b; the lease marks itself in
// flight. The caller holds e's lock.
func (s *syncer) send(b *batch, e *keyed.Entry[lease.Lease], r *lease.Rule, now int64, final bool) {
	q := e.Value.Request(r, now, final)
	b.add(s.leaseCall(r, e.Value.Digest, &q), pending{entry: e, rule: r, req: q})
}

// round runs a round (SyncAt), the last one if final, within budget (see
// batch).
func (s *syncer) round(ctx context.Context, now int64, final bool, budget time.Duration) (synchook.RoundStats, error) {
	start := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	// The keys waiting for a first-lease round are looked after in this
	// one, if due: a round asks for them again at their next decision. (While
	// Redis is out, the loop runs no first-lease round, and its list would
	// otherwise grow with every new key.)
	for _, it := range s.cluster.TakeFirst() {
		it.Entry.Lock()
		it.Entry.Value.TakeFirst()
		it.Entry.Unlock()
	}
	s.cluster.TakeHanded(func(it lease.Handed) {
		it.Entry.Lock()
		if !it.Entry.Evicted() {
			it.Entry.Value.Activate()
			s.active[it.Entry] = it.Rule
		}
		it.Entry.Unlock()
	})
	b := batch{final: final, budget: budget}
	if c, ok := s.register(now, final); ok {
		b.reg = &c
	}
	for e, r := range s.active {
		if l := r.Latest(); l != r { // the limit changed: exchange under the new one
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
		k.Tapped(r, now)
		switch {
		case k.InFlight():
		case final || k.Due(r, now):
			b.due(e, r)
		case k.Dormant():
			// Nothing held, nothing to report: the key needs no looking
			// after until its next request hands it over again.
			k.Deactivate()
			delete(s.active, e)
		}
		e.Unlock()
	}
	s.nactive.Store(int64(len(s.active)))
	return s.exchange(ctx, &b, now, synchook.RoundStats{Keys: len(s.active)}, start)
}

// exchange sends a round's work (b) in pipelines of Batch, the registration
// first, each pipeline within Timeout (and ctx): a failed pipeline fails its
// own keys only. Within a budget, it serves the keys longest unsynced
// first, starts no pipeline once the round has run b.budget, and counts the
// keys left as carried. It applies the replies and reports the round (st)
// to the Observer. A reply that does not decode counts as a failed
// exchange. now is the round's node time. The caller holds mu (a
// first-lease round, firstMu).
func (s *syncer) exchange(ctx context.Context, b *batch, now int64, st synchook.RoundStats, start time.Time) (synchook.RoundStats, error) {
	var roundErr error
	fail := func(err error) {
		if roundErr == nil {
			roundErr = err
		}
	}
	if len(b.keys) > s.cfg.Batch && b.budget > 0 {
		slices.SortFunc(b.keys, func(x, y dueKey) int { return cmp.Compare(x.since, y.since) })
	}
	next := 0 // b.keys[next:] are yet to be sent
	// A later pipeline's requests are built at now plus the time since.
	now0, clk0 := now, s.cfg.Clock.Now().UnixMicro()
	for first := true; first || next < len(b.keys); first = false {
		if !first {
			if b.budget > 0 && time.Since(start) >= b.budget {
				st.Carried = len(b.keys) - next
				break
			}
			now = now0 + max(s.cfg.Clock.Now().UnixMicro()-clk0, 0)
		}
		b.calls, b.outs = b.calls[:0], b.outs[:0]
		if first && b.reg != nil {
			b.add(*b.reg, pending{req: lease.Request{SentAt: now}}) // no entry: the registry's
		}
		for ; next < len(b.keys) && len(b.calls) < s.cfg.Batch; next++ {
			d := &b.keys[next]
			d.entry.Lock()
			if !d.entry.Evicted() && !d.entry.Value.InFlight() {
				s.send(b, d.entry, d.rule, now, b.final)
			}
			d.entry.Unlock()
		}
		if len(b.calls) == 0 {
			continue
		}
		err := s.pipeline(ctx, b, &st, fail)
		if err != nil {
			fail(err)
		}
	}
	st.Took, st.Err = time.Since(start), roundErr
	if errors.Is(roundErr, ErrUnavailable) && st.Synced == 0 {
		// Replies in a window this touched grant nothing on top of use
		// (lease.Rule.SetOutage). Not after a round Redis answered in
		// part (a pipeline past its deadline on a busy server): Redis was
		// up and lost nothing, and the hand-back would give its keys to
		// the failure policy, whose admissions come on top of Redis's
		// counts.
		s.cluster.NoteOutage(s.cfg.Clock.Now().UnixMicro() + s.cluster.Offset())
	}
	if s.cfg.Observer != nil {
		s.obsMu.Lock()
		s.cfg.Observer.Round(st)
		s.obsMu.Unlock()
	}
	s.cluster.RoundDone() // after the Observer: a waiter wakes to what it learned
	return st, roundErr
}

// pipeline sends b's current pipeline within Timeout (and ctx), applies its
// replies, counts them in st and reports each failure to fail; it returns
// the pipeline's own error, wrapped. The caller holds mu.
func (s *syncer) pipeline(ctx context.Context, b *batch, st *synchook.RoundStats, fail func(error)) error {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
	defer cancel()
	// Each reply's Redis clock is read against the midpoint of send and
	// receipt: the send is now, not when the round began (a round that
	// looked over many keys first would put every node's clock ahead).
	sent := s.cfg.Clock.Now().UnixMicro()
	for i := range b.outs {
		b.outs[i].req.SentAt = sent
	}
	cmds, err := runPipelined(ctx, s.cfg.Client, s.cfg.Client.Pipeline, b.calls)
	st.Pipeline++
	recv := s.cfg.Clock.Now().UnixMicro()
	for i, cmd := range cmds {
		p := &b.outs[i]
		vals, cerr := cmd.Int64Slice()
		if p.entry == nil { // the registration
			var v registryReply
			if cerr == nil {
				v, cerr = decodeRegistry(vals)
				if cerr != nil {
					fail(cerr)
				}
			} else {
				fail(wrap(ctx, "register", cerr))
			}
			if cerr == nil {
				s.cluster.SetNodes(v.Live)
				if !s.cfg.PassTime {
					s.cluster.Measure(v.Now-(p.req.SentAt+recv)/2, max(recv-p.req.SentAt, 0)/2, recv)
				}
				st.Registered = true
			} else {
				s.registered = 0 // again at the next round
			}
			continue
		}
		applied := false
		if cerr != nil {
			cerr = wrap(ctx, "sync", cerr)
			s.answered(p, errors.Is(cerr, ErrRedis))
		} else {
			applied, cerr = s.apply(p, vals, recv)
		}
		switch {
		case cerr != nil:
			st.Failed++
			fail(cerr)
		case applied:
			st.Synced++
		}
	}
	return wrap(ctx, "sync", err)
}

// answered records that p's exchange failed: its lease is left as it was,
// but for its request no longer in flight, and for the fault when Redis
// answered it with an error (lease.Lease.Fault).
func (s *syncer) answered(p *pending, fault bool) {
	p.entry.Lock()
	p.entry.Value.Answered()
	if fault {
		p.entry.Value.Fault()
	}
	p.entry.Unlock()
}

// apply decodes the reply vals to p and takes it into p's lease, under the
// entry's lock, and reports whether it did: an evicted entry's reply is
// dropped. recv is the node time it arrived. A reply that does not decode
// returns an error wrapping ErrRedis and leaves the lease as answered, with
// the fault.
func (s *syncer) apply(p *pending, vals []int64, recv int64) (bool, error) {
	e := p.entry
	e.Lock()
	defer e.Unlock()
	e.Value.Answered()
	if p.req.Bucket {
		v, err := decodeLeaseBucket(vals)
		if err != nil {
			e.Value.Fault()
		}
		if err != nil || e.Evicted() {
			return false, err
		}
		e.Value.ApplyBucket(p.rule, &p.req, &v, recv)
		return true, nil
	}
	v, err := decodeLeaseWindow(vals)
	if err != nil {
		e.Value.Fault()
	}
	if err != nil || e.Evicted() {
		return false, err
	}
	e.Value.ApplyWindow(p.rule, &p.req, &v, recv)
	return true, nil
}

// scriptNow is the time argument of a script: empty for Redis's clock, or
// the node's estimate of it under PassTime.
func (s *syncer) scriptNow(rnow int64) string {
	if !s.cfg.PassTime {
		return ""
	}
	return strconv.FormatInt(rnow, 10)
}

// leaseCall is the lease script call of request q for the key of digest d
// under lr.
func (s *syncer) leaseCall(lr *lease.Rule, d [lease.DigestSize]byte, q *lease.Request) call {
	r, digest := redisRule(lr), encodeDigest(d)
	c := leaseConsts{now: s.scriptNow(q.Now), node: s.node, leaseTTL: s.cfg.LeaseTTL.Microseconds(), demandTTL: s.cfg.DemandTTL.Microseconds()}
	if q.Bucket {
		return call{scriptLeaseBucket, []string{s.ks.name(r.name, digest, "s")}, encodeLeaseBucket(q, c, r)}
	}
	n := r.name
	keys := []string{s.ks.name(n, digest, "m"), s.ks.name(n, digest, "w0"), s.ks.name(n, digest, "w1"), s.ks.name(n, digest, "w2")}
	return call{scriptLeaseWindow, keys, encodeLeaseWindow(q, c, r)}
}
