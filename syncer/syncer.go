package syncer

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hybridlimit/hybridlimit/internal/coarse"
	"github.com/hybridlimit/hybridlimit/internal/config"
	"github.com/hybridlimit/hybridlimit/internal/keyed"
	"github.com/hybridlimit/hybridlimit/internal/lease"
	"github.com/hybridlimit/hybridlimit/internal/synchook"
	"github.com/hybridlimit/hybridlimit/local"
)

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

	mu         sync.Mutex // one round at a time; guards active, registered, carry and look
	active     map[*keyed.Entry[lease.Lease]]*lease.Rule
	registered int64 // node time of the last registration, 0 before any
	regDue     int64 // node time the next registration is due
	// carry holds the keys a round's budget left for the next (each
	// marked Left), and look the keys an early round looks at (reused).
	carry []dueKey
	look  []lease.Handed
	// firstMu runs one first-lease round at a time, beside the other
	// rounds: a request waiting for its key's lease must not wait for a
	// long round over every key.
	firstMu sync.Mutex
	nactive atomic.Int64 // len(active), for the first-lease rounds' figures
	obsMu   sync.Mutex   // one Observer call at a time
	// failed reports that the last round found Redis unavailable: the
	// loops wait for the next tick rather than answer keys that ask.
	failed atomic.Bool
	// masters are a Cluster's masters out of reach (runByMaster).
	masters masters
	// region exchanges the rules of global reach with the global store;
	// nil without one.
	region *exchanger
	// regionsAt is the node time (µs) the regions' count was last read
	// (cluster.Regions: what the exchanger learned from the global store):
	// a key of global reach new to the region opens at its part of the
	// limit.
	regionsAt atomic.Int64

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
	if cfg.Global != nil {
		s.region = newExchanger(s)
	}
	if s.cfg.Clock == nil {
		s.ownClock = coarse.New(config.ClockResolution)
		s.cfg.Clock = s.ownClock
	}
	return s, nil
}

// NodeID returns the node's name in Redis.
func (s *syncer) NodeID() string { return s.node }

// NoteOutage records that Redis is out of reach at node time now: replies
// in a window this touches grant nothing on top of use for a while
// (lease.Rule.SetOutage).
func (s *syncer) NoteOutage(now int64) { s.cluster.NoteOutage(now + s.cluster.Offset()) }

// NotePartial records that a Cluster master is out of reach at node time
// now while the others answer (lease.Cluster.NotePartial).
func (s *syncer) NotePartial(now int64) { s.cluster.NotePartial(now + s.cluster.Offset()) }

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
// within DemandTTL (a node registers every DemandTTL ÷ 2, or ahead of time
// while idle: register), and at least
// Tuning.Nodes. It is Tuning.Nodes, possibly 0, before this node's first
// round.
func (s *syncer) Nodes() int64 { return s.cluster.Nodes() }

// registryKey names the registry of live nodes.
func (s *syncer) registryKey() string { return s.ks.prefix() + ":nodes" }

// register is the round's registration, when one is due: every DemandTTL ÷
// 2, and on leaving; every idleRegister while the node has no key to look
// after (idle), the registration then scored ahead so that the node stays
// live until the next. The caller holds mu.
func (s *syncer) register(now int64, leave, idle bool) (call, bool) {
	if !leave && s.registered != 0 && now < s.regDue {
		return call{}, false
	}
	live := s.cfg.DemandTTL.Microseconds()
	every, ahead := live/2, int64(0)
	if idle && !leave {
		every = max(idleRegister*s.cfg.Interval.Microseconds(), every)
		ahead = every - live/2
	}
	s.registered, s.regDue = now, now+every
	regions := ""
	if s.region != nil {
		regions = s.ks.regionsKey()
	}
	return registryCall(s.registryKey(), regions, registryRequest{Now: s.scriptNow(now), Node: s.node, Live: live, Leave: leave, Ahead: ahead}), true
}

// idleRegister is how often, in intervals, a node with no key to look
// after registers: a Limiter that holds nothing costs a round trip every two
// seconds (by default), not four a second. A node that dies idle counts as
// live for up to as long, plus DemandTTL.
const idleRegister = 20

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
	if s.region != nil {
		s.loops.Add(1)
		go s.region.loop(s.stop)
	}
}

func (s *syncer) loop() {
	defer s.loops.Done()
	tick := time.NewTicker(s.cfg.Interval)
	defer tick.Stop()
	// Early rounds wait MinGap after the last round; one asked for sooner
	// than that is run by the timer (nil channel: none pending).
	var early gapTimer
	defer early.stop()
	// run runs a round, regular (all: every key of the set) or early (the
	// keys that asked). A round bounds its own time (Timeout); keys it left
	// for the next one get an early round, MinGap on.
	run := func(all bool) {
		for {
			st, err := s.round(context.Background(), s.cfg.Clock.Now().UnixMicro(), false, all, s.cfg.Timeout)
			failed := unanswered(st, err)
			s.failed.Store(failed)
			if failed || st.Carried == 0 || !early.due(s.cfg.MinGap) {
				return
			}
			all = false
		}
	}
	// With no key to look after, the loop wakes only to register again
	// (DemandTTL/2): an idle Limiter's rounds cost it and Redis nothing
	// between. A key handed over wakes it (lease.Cluster.Sleep).
	period := s.cfg.Interval
	pace := func() {
		want := s.cfg.Interval
		if wait, ok := s.idleFor(); ok && !s.failed.Load() && s.cluster.Sleep() {
			want = max(wait, want)
		} else {
			s.cluster.Awake()
		}
		if want != period {
			tick.Reset(want)
			period = want
		}
	}
	for {
		select {
		case <-s.stop:
			return
		case <-tick.C:
			early.ran()
			run(true)
		case <-s.cluster.Wake():
			s.cluster.WakeTaken()
			// After a failure, keys that want leases would wake the loop at
			// every gap and resend, piling work on a server that is down or
			// overloaded: the next tick retries.
			if !s.failed.Load() && early.due(s.cfg.MinGap) {
				run(false)
			}
		case <-early.c:
			early.ran()
			run(false)
		}
		pace()
	}
}

// idle reports whether the syncer has no key to look after: none in its
// set, none carried to the next round. The caller holds mu.
func (s *syncer) idle() bool { return len(s.active) == 0 && len(s.carry) == 0 }

// idleFor reports whether the syncer has no key to look after (none in its
// set, none carried to the next round), and if so how long until its
// registration is due again.
func (s *syncer) idleFor() (time.Duration, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.idle() {
		return 0, false
	}
	if s.registered == 0 {
		return 0, true
	}
	return time.Duration(s.regDue-s.cfg.Clock.Now().UnixMicro()) * time.Microsecond, true
}

// unanswered reports whether a round, st, with error err found Redis out
// of reach with nothing answered: a Cluster with a master down answers
// the others' keys, and their early rounds go on.
func unanswered(st synchook.RoundStats, err error) bool {
	return errors.Is(err, ErrUnavailable) && st.Synced == 0 && !st.Registered
}

// firstLoop runs the first-lease rounds: when a key asks, at most every
// FirstGap; none after a round that found Redis unavailable, until the
// loop's next round finds it again.
func (s *syncer) firstLoop() {
	defer s.loops.Done()
	var first gapTimer
	defer first.stop()
	run := func() {
		st, err := s.firstRound(context.Background(), s.cfg.Clock.Now().UnixMicro(), s.cfg.Timeout)
		if unanswered(st, err) {
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
		_, err = s.round(ctx, s.cfg.Clock.Now().UnixMicro(), true, true, 0)
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
