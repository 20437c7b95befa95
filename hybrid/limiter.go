package hybrid

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/hybridlimit/hybridlimit/internal/coarse"
	"github.com/hybridlimit/hybridlimit/internal/keyed"
	"github.com/hybridlimit/hybridlimit/internal/localx"
	"github.com/hybridlimit/hybridlimit/internal/synchook"
	"github.com/hybridlimit/hybridlimit/internal/syncx"
	"github.com/hybridlimit/hybridlimit/local"
	"github.com/hybridlimit/hybridlimit/syncer"
)

// Sentinel errors. Match them with errors.Is.
var (
	// ErrInvalidConfig reports a bad Config, naming the field.
	ErrInvalidConfig = errors.New("hybrid: invalid config")
	// ErrInvalidRule reports a bad Rule, naming the field.
	ErrInvalidRule = errors.New("hybrid: invalid rule")
	// ErrUnknownRule is returned for a Rule not registered with this
	// Limiter, or unregistered since (Unregister).
	ErrUnknownRule = errors.New("hybrid: rule not registered with this limiter")
	// ErrClosed is returned by Register and Ping after Close.
	ErrClosed = errors.New("hybrid: limiter closed")
	// ErrUnavailable (syncer.ErrUnavailable) is wrapped by the errors of
	// Ping, of New with Config.RequireRedis, and of Shutdown when Redis
	// does not answer. Decisions never return it: a decision Redis could
	// not make is the failure policy's, with a nil error and
	// Decision.Degraded true.
	ErrUnavailable = syncer.ErrUnavailable
	// ErrRedis (syncer.ErrRedis) is wrapped by the error of a central
	// decision Redis answered with an error that is not about its
	// availability (a key of another type under the Keyspace's prefix, a
	// script error): a misconfiguration. The failure policy still decides.
	ErrRedis = syncer.ErrRedis
)

// Limiter limits requests per rule and key, in each rule's mode: local,
// central (Redis) or hybrid (local decisions against leases of the global
// budget). In hybrid mode a decision never waits on Redis: it takes a lock
// on the key's entry, allocates nothing, and costs about what a local one
// does.
//
// A Limiter is safe for concurrent use. Shutdown (or Close) reports what is
// unreported, gives leases back and stops every goroutine.
type Limiter struct {
	cfg      Config
	clock    local.Clock
	ownClock *coarse.Clock
	logger   *slog.Logger
	central  *syncer.Central
	shards   *shards // a Cluster's breakers, one per master, for central rules
	sync     syncx.Syncer
	metrics  *metrics
	gossip   *gossip // nil without Config.Gossip
	tracer   trace.Tracer
	// redisErrs counts Redis's failures by kind, and logs its error
	// answers once a minute.
	redisErrs redisErrors

	mu     sync.Mutex // guards rules, closed
	rules  map[string]*ruleState
	closed bool

	// unavailable is the node time (µs) Redis was last seen failing, 0 while
	// it answers. While it is set, the circuit breaker is open: central
	// calls go to the failure policy without asking Redis, and a probe
	// (probeLoop) PINGs Redis until it answers. Shutdown sets it for good.
	unavailable atomic.Int64
	// strikes counts the sync rounds in a row in which Redis answered
	// nothing (roundFailed).
	strikes atomic.Int32
	// outageAt is the wall time (µs) Redis was first seen failing in the
	// current or last outage, for the hand-back's span.
	outageAt atomic.Int64
	handBack atomic.Bool // an outage ended, and its hand-back round is not traced yet
	// shut is set by Shutdown: every distributed rule then decides on this
	// node's part of the limit.
	shut        atomic.Bool
	probing     atomic.Bool // a probeLoop runs
	probeStop   chan struct{}
	probeWG     sync.WaitGroup // the probeLoop; Added under mu while !closed
	sweepStop   chan struct{}
	sweepDone   chan struct{}
	shutdown    sync.Once
	shutdownErr error
}

// New returns a Limiter for cfg. It works on a copy of cfg with its zero
// fields set to their defaults (never changing the caller's), reports a
// bad field with an error wrapping ErrInvalidConfig, PINGs Redis if
// RequireRedis asks it to, and starts the syncer (unless manualSync) and
// the sweeper of idle keys.
func New(cfg Config) (*Limiter, error) {
	cfg = cfg.withDefaults()
	cfg.Keyspace.Secret = bytes.Clone(cfg.Keyspace.Secret)
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	l := &Limiter{cfg: cfg, clock: cfg.Clock, logger: cfg.Logger, rules: map[string]*ruleState{}, probeStop: make(chan struct{})}
	if l.clock == nil {
		l.ownClock = coarse.New(defaultResolution)
		l.clock = l.ownClock
	}
	fail := func(err error) (*Limiter, error) {
		if l.gossip != nil {
			l.gossip.close()
		}
		if l.metrics != nil {
			l.metrics.close()
		}
		if l.ownClock != nil {
			l.ownClock.Close()
		}
		return nil, err
	}
	var err error
	if l.metrics, err = newMetrics(cfg.MeterProvider, l); err != nil {
		return fail(fmt.Errorf("%w: MeterProvider: %w", ErrInvalidConfig, err))
	}
	l.tracer = cfg.TracerProvider.Tracer(meterName)
	if cfg.Gossip != nil {
		if l.gossip, err = startGossip(*cfg.Gossip, l); err != nil {
			return fail(err)
		}
	}
	if cfg.Redis != nil {
		l.central, err = syncer.NewCentral(syncer.CentralConfig{Client: cfg.Redis, Keyspace: cfg.Keyspace, Timeout: cfg.Timeout})
		if err != nil {
			return fail(fmt.Errorf("%w: Redis, Keyspace or Timeout: %w", ErrInvalidConfig, err))
		}
		routeRedisLog(cfg.Logger)
		l.shards = newShards(cfg.Redis, &l.cfg.Keyspace, l.logger)
		if cfg.RequireRedis {
			if err := l.central.Ping(context.Background()); err != nil {
				return fail(fmt.Errorf("hybrid: New: Redis does not answer (Config.RequireRedis): %w", err))
			}
		}
		sc := syncx.Config{
			Tuning: cfg.Sync.tuning(), Client: cfg.Redis, Keyspace: cfg.Keyspace, Clock: l.clock,
			Observer: observer{l}, PassTime: cfg.virtualTime, Global: cfg.global(),
		}
		if l.sync, err = syncx.NewSyncer(sc); err != nil {
			return fail(fmt.Errorf("%w: Sync: %w", ErrInvalidConfig, err))
		}
		if !cfg.manualSync {
			l.sync.Start()
		}
	}
	l.sweepStop, l.sweepDone = make(chan struct{}), make(chan struct{})
	go l.sweepLoop()
	return l, nil
}

// nodeID returns the node's name in Redis, or "" without Redis.
func (l *Limiter) nodeID() string {
	if l.sync == nil {
		return ""
	}
	return l.sync.NodeID()
}

// Register validates r and returns the *Rule that decisions take, whose Mode
// is the mode the rule runs in: its own, or the Limiter's default.
// Hybrid runs every leasable limit, however small and on however many
// nodes. A limit with no lease (the sliding window log, which keeps every
// request; a bucket whose window × (burst + limit) passes 2^51) cannot run
// Hybrid: asked for by the rule's Mode, that is an error (ErrInvalidRule);
// taken from the Limiter's default, the rule runs Central, and the returned
// Rule's Mode says so.
// Registering a name again returns the existing rule if the
// limit is the same, and an error otherwise (use SetLimit).
func (l *Limiter) Register(r Rule) (*Rule, error) {
	r.state = nil
	if err := syncx.ValidRuleName(r.Name); err != nil {
		return nil, fmt.Errorf("%w: Name: %w", ErrInvalidRule, err)
	}
	lim, err := localx.NewLimit(r.Limit)
	if err != nil {
		return nil, fmt.Errorf("%w: rule %q: Limit: %w", ErrInvalidRule, r.Name, err)
	}
	if r.KeyTTL < 0 {
		return nil, fmt.Errorf("%w: rule %q: KeyTTL %v: must not be negative", ErrInvalidRule, r.Name, r.KeyTTL)
	}
	mode, policy := r.Mode, r.Policy
	if mode == modeDefault {
		mode = l.cfg.Mode
	}
	if mode > Hybrid {
		return nil, fmt.Errorf("%w: rule %q: Mode %d: unknown", ErrInvalidRule, r.Name, mode)
	}
	if mode != Local && l.central == nil {
		return nil, fmt.Errorf("%w: rule %q: Mode %s needs Redis in the Config", ErrInvalidRule, r.Name, mode)
	}
	if policy == policyDefault {
		policy = l.cfg.Policy
	}
	if policy > Gossip {
		return nil, fmt.Errorf("%w: rule %q: Policy %d: unknown", ErrInvalidRule, r.Name, policy)
	}
	wait := r.Wait
	switch {
	case wait > WaitFirst:
		return nil, fmt.Errorf("%w: rule %q: Wait %d: unknown", ErrInvalidRule, r.Name, wait)
	case wait == waitDefault && l.cfg.manualSync:
		wait = WaitNever
	case wait == waitDefault:
		wait = WaitInFlight
	}
	if err := l.checkGlobal(r, mode, lim); err != nil {
		return nil, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil, ErrClosed
	}
	if rs, ok := l.rules[r.Name]; ok {
		if *rs.limit.Load() != lim {
			return nil, fmt.Errorf("%w: rule %q is registered with %v; use SetLimit to change it", ErrInvalidRule, r.Name, *rs.limit.Load())
		}
		if (rs.requested != mode && rs.mode.kind() != mode) || rs.policy != policy || rs.keyTTL != r.KeyTTL.Microseconds() || rs.wait != wait || rs.global != r.Global {
			return nil, fmt.Errorf("%w: rule %q is registered with another mode, policy, key TTL, Wait or reach", ErrInvalidRule, r.Name)
		}
		out := r
		out.state, out.Mode = rs, rs.mode.kind()
		return &out, nil
	}
	rs := &ruleState{l: l, name: r.Name, requested: mode, policy: policy, keyTTL: r.KeyTTL.Microseconds(), wait: wait, global: r.Global, counts: new(counters)}
	rs.owner.Store(l)
	rs.limit.Store(&lim)
	m, err := l.newMode(rs, mode, r.Mode == Hybrid, lim)
	if err != nil {
		return nil, err
	}
	rs.mode = m
	l.rules[r.Name] = rs
	out := r
	out.state, out.Mode = rs, m.kind()
	return &out, nil
}

// checkGlobal refuses a rule of global reach that cannot be one.
func (l *Limiter) checkGlobal(r Rule, mode Mode, lim localx.Limit) error {
	switch {
	case !r.Global:
		return nil
	case l.cfg.Global == nil:
		return fmt.Errorf("%w: rule %q: Global needs Config.Global", ErrInvalidRule, r.Name)
	case mode != Hybrid:
		return fmt.Errorf("%w: rule %q: Global needs Mode hybrid, not %s", ErrInvalidRule, r.Name, mode)
	case lim.Algorithm() != local.FixedWindow:
		return fmt.Errorf("%w: rule %q: Global needs the fixed window, not %s", ErrInvalidRule, r.Name, lim.Algorithm())
	}
	return nil
}

// newMode builds the mode rs runs in: mode, or Central for a limit with no
// lease when Hybrid is only the Limiter's default (explicit is false).
func (l *Limiter) newMode(rs *ruleState, mode Mode, explicit bool, lim localx.Limit) (modeRule, error) {
	if mode == Local {
		return newLocalRule(rs, lim)
	}
	sr, err := syncx.NewRule(rs.name, lim)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidRule, err)
	}
	if mode == Hybrid {
		m, err := newHybridRule(rs, sr)
		switch {
		case err == nil:
			return m, nil
		case !errors.Is(err, syncx.ErrNotLeasable):
			return nil, err
		case explicit:
			return nil, fmt.Errorf("%w: rule %q: Mode hybrid: %w", ErrInvalidRule, rs.name, err)
		}
		// The log, or a bucket past the exact range: exact in Redis.
		l.logger.Info("hybridlimit: rule runs central: its limit has no lease", "rule", rs.name, "limit", lim.String())
	}
	return newCentralRule(rs, sr)
}

// localConfig configures the local limiters of Local rules and of the
// FailLocal policy: the Limiter's clock and table size; the Limiter sweeps.
func (l *Limiter) localConfig() local.Config {
	return local.Config{Shards: l.cfg.Shards, MaxKeys: l.cfg.MaxKeys, Clock: l.clock, NoBackgroundSweep: true}
}

// storeConfig sizes the hybrid rules' tables of keys.
func (l *Limiter) storeConfig() keyed.Config {
	return keyed.Config{Shards: l.cfg.Shards, MaxKeys: l.cfg.MaxKeys}
}

// expectedNodes is the number of nodes the Config expects (Sync.Nodes, at
// least 1), for rules with no lease exchange to count them.
func (l *Limiter) expectedNodes() int64 { return int64(max(l.cfg.Sync.Nodes, 1)) }

// SetLimit replaces a registered rule's Limit (its algorithm and
// parameters) at runtime, on this node.
// Consumption is kept: in local mode as local.Limiter.SetLimit says; in
// central and hybrid modes Redis carries the state over at its next script,
// and every lease of the rule is revoked and granted again under the new
// limit. Every node must make the same change.
func (l *Limiter) SetLimit(r *Rule, limit Limit) error {
	rs, err := l.state(r)
	if err != nil {
		return err
	}
	lim, err := localx.NewLimit(limit)
	if err != nil {
		return fmt.Errorf("%w: rule %q: Limit: %w", ErrInvalidRule, rs.name, err)
	}
	// Under mu, so that Unregister marks the lease rule in force, not one
	// this call is replacing.
	l.mu.Lock()
	defer l.mu.Unlock()
	if rs.owner.Load() != l {
		return fmt.Errorf("%w: %q", ErrUnknownRule, rs.name)
	}
	if err := rs.mode.setLimit(lim); err != nil {
		return err
	}
	rs.limit.Store(&lim)
	return nil
}

// Unregister removes r's rule from the Limiter, so that the memory it holds
// (its keys, its failure policy's state) and its metric series go; every
// *Rule of it returns ErrUnknownRule from then on, to decisions, SetLimit,
// and Unregister again. A decision under way when it is called completes as
// usual.
//
// What the rule's keys admitted is not lost: in Hybrid mode the syncer's
// next round reports each key's unreported use to Redis and gives its
// leases back, as Shutdown does, then forgets it (while Redis is
// unavailable, the first round that reaches it; if the Limiter shuts down
// first, Shutdown's last round). In
// Central mode Redis holds all of it already. The rule's state in Redis
// stays until its keys' TTLs end: registered again meanwhile, under the
// same name and limit, a distributed rule takes it up; a Local rule starts
// afresh.
//
// After Shutdown, which reported everything, it only ends the rule's
// decisions.
func (l *Limiter) Unregister(r *Rule) error {
	rs, err := l.state(r)
	if err != nil {
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if !rs.owner.CompareAndSwap(l, nil) {
		return fmt.Errorf("%w: %q", ErrUnknownRule, rs.name) // another call was first
	}
	if l.closed {
		return nil // Shutdown closes the rules it holds, without mu
	}
	delete(l.rules, rs.name)
	if m, ok := rs.mode.(*hybridRule); ok {
		m.remove()
	}
	rs.mode.close()
	return nil
}

func (l *Limiter) state(r *Rule) (*ruleState, error) {
	if r == nil {
		return nil, ErrUnknownRule
	}
	rs := r.state
	if rs == nil || rs.owner.Load() != l {
		return nil, fmt.Errorf("%w: %q", ErrUnknownRule, r.Name)
	}
	return rs, nil
}

// Allow is AllowN(ctx, r, key, 1).
func (l *Limiter) Allow(ctx context.Context, r *Rule, key string) (Decision, error) {
	return l.AllowN(ctx, r, key, 1)
}

// AllowN decides whether a request of cost n for key is admitted under r,
// and charges it if it is. The Decision is always usable.
//
// When Redis cannot decide (unreachable, too slow for the deadline), or
// after Shutdown, the rule's failure policy decides: that is an ordinary
// decision, with a nil error, and Decision.Degraded reports it (its Reason
// is ReasonUnavailable when the policy refused). A non-nil error means
// misuse: r is not registered here (ErrUnknownRule), or Redis answered a
// central call with an error that is not about its availability (ErrRedis,
// a misconfiguration; the policy still decided).
//
// In hybrid mode a decision is made in memory, from the key's lease, and
// waits on Redis only when the lease cannot decide it and an exchange may
// (Rule.Wait): then ctx, and Config.Timeout, bound the wait. In central
// mode ctx bounds the round trip. Once the Limiter knows Redis is
// unavailable, no decision waits on it (a circuit breaker: see Ping).
func (l *Limiter) AllowN(ctx context.Context, r *Rule, key string, n int64) (Decision, error) {
	rs, err := l.state(r)
	if err != nil {
		return localx.Outcome{Reason: local.ReasonInvalidCost}.Decision(), err
	}
	return rs.mode.allow(ctx, l.nowMicro(), key, n)
}

func (l *Limiter) nowMicro() int64 { return l.clock.Now().UnixMicro() }

// observer takes the syncer's rounds into the Limiter (availability,
// metrics, traces).
type observer struct{ l *Limiter }

func (o observer) Round(st synchook.RoundStats) {
	switch {
	case st.Synced > 0 || st.Registered:
		// Redis answered, if not every pipeline of the round.
		o.l.markAvailable()
	case st.Err != nil && errors.Is(st.Err, syncer.ErrUnavailable):
		o.l.roundFailed(o.l.nowMicro(), st.Err)
	}
	if st.Err != nil {
		o.l.redisErrs.failed(o.l, st.Err)
	}
	o.l.metrics.round(st)
	o.l.traceRound(st)
}

// syncAt runs one round of the syncer at the Limiter's clock time, for
// Config.manualSync. It returns the round's figures.
func (l *Limiter) syncAt(ctx context.Context, now time.Time) (synchook.RoundStats, error) {
	if l.sync == nil {
		return synchook.RoundStats{}, nil
	}
	if l.breakerOpen() && l.cfg.manualSync && l.central.Ping(ctx) == nil {
		// The probe, which manualSync leaves to the caller's rounds.
		l.markAvailable()
	}
	return l.sync.SyncAt(ctx, now.UnixMicro())
}

// syncWanted reports, and clears, whether a hybrid key asked for an early
// sync round since the last call; with manualSync the caller runs one
// (syncAt) soon after, as the loop would, MinGap later.
func (l *Limiter) syncWanted() bool { return l.sync != nil && l.sync.Wanted() }

// syncFirstAt runs a first-lease round of the syncer at the Limiter's clock
// time, for Config.manualSync: it exchanges only the keys that asked for
// their first lease, or for the correction of a lease granted on a guess
// (syncx.Syncer.SyncFirstAt). It returns the round's figures.
func (l *Limiter) syncFirstAt(ctx context.Context, now time.Time) (synchook.RoundStats, error) {
	if l.sync == nil {
		return synchook.RoundStats{}, nil
	}
	return l.sync.SyncFirstAt(ctx, now.UnixMicro())
}

// syncFirstWanted reports, and clears, whether a hybrid key asked for a
// first-lease round since the last call; with manualSync the caller runs
// one (syncFirstAt) soon after, as the loop would, at once or FirstGap
// after the last one.
func (l *Limiter) syncFirstWanted() bool { return l.sync != nil && l.sync.WantedFirst() }

// sweepLoop evicts idle keys of every rule every sweepInterval.
func (l *Limiter) sweepLoop() {
	defer close(l.sweepDone)
	t := time.NewTicker(sweepInterval)
	defer t.Stop()
	for {
		select {
		case <-l.sweepStop:
			return
		case <-t.C:
			l.sweepAt(l.clock.Now())
		}
	}
}

// sweepAt forgets every key back in its initial state at now, of every
// rule, and returns how many.
func (l *Limiter) sweepAt(now time.Time) int {
	l.mu.Lock()
	rules := make([]*ruleState, 0, len(l.rules))
	for _, rs := range l.rules {
		rules = append(rules, rs)
	}
	l.mu.Unlock()
	n := 0
	for _, rs := range rules {
		n += rs.mode.sweep(now)
	}
	return n
}

// Shutdown reports to Redis what hybrid rules admitted and did not report
// yet, gives their leases back, and stops every goroutine, within ctx.
// Decisions remain possible afterwards, locally: each central and hybrid
// rule decides on this node's part of its limit (the limit divided by the
// nodes, as FailLocal does, whatever the rule's policy), Degraded, and
// never asks Redis again. Idempotent.
func (l *Limiter) Shutdown(ctx context.Context) error {
	l.shutdown.Do(func() {
		l.mu.Lock()
		l.closed = true
		l.mu.Unlock()
		close(l.probeStop)
		l.probeWG.Wait()
		close(l.sweepStop)
		<-l.sweepDone
		if l.sync != nil {
			l.shutdownErr = l.sync.Shutdown(ctx)
		}
		// From here on, no decision asks Redis: the breaker stays open.
		l.unavailable.Store(max(l.nowMicro(), 1))
		l.shut.Store(true)
		if l.gossip != nil {
			l.shutdownErr = errors.Join(l.shutdownErr, l.gossip.close())
		}
		l.metrics.close()
		for _, rs := range l.rules {
			rs.mode.close()
		}
		if l.ownClock != nil {
			l.ownClock.Close()
		}
	})
	return l.shutdownErr
}

// Close is Shutdown with a deadline 2s away.
func (l *Limiter) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
	defer cancel()
	return l.Shutdown(ctx)
}
