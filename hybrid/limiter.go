package hybrid

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/metric"

	"github.com/hybridlimit/hybridlimit/internal/keyed"
	"github.com/hybridlimit/hybridlimit/internal/lease"
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
	// Limiter.
	ErrUnknownRule = errors.New("hybrid: rule not registered with this limiter")
	// ErrClosed is returned by Register after Close.
	ErrClosed = errors.New("hybrid: limiter closed")
	// ErrUnavailable (syncer.ErrUnavailable) is wrapped by the error that
	// comes with a decision made by a failure policy.
	ErrUnavailable = syncer.ErrUnavailable
)

// DefaultShutdownTimeout is how long Close gives Shutdown.
const DefaultShutdownTimeout = 2 * time.Second

// Config configures a Limiter. Every field documents its default.
type Config struct {
	// Redis reaches Redis: a *redis.Client (one server, or Sentinel through
	// redis.NewFailoverClient), a *redis.ClusterClient, or another
	// redis.UniversalClient, with ContextTimeoutEnabled set. Default nil: no
	// Redis; only Local rules can be registered.
	Redis redis.UniversalClient
	// Keyspace names the Redis keys; every node must use the same one.
	Keyspace syncer.Keyspace
	// Mode is the rules' default mode. Default: Hybrid with Redis, Local
	// without.
	Mode Mode
	// Policy is the rules' default failure policy. Default FailLocal.
	Policy Policy
	// Clock tells the time. Default: a CoarseClock (1ms) the Limiter owns.
	// Hybrid and local decisions read it; Redis scripts read Redis's clock,
	// which the syncer relates to this one.
	Clock local.Clock
	// Sync configures the syncer of hybrid rules (interval, lease sizing,
	// cold-start allowance, …); see syncer.SyncConfig. Its Client, Keyspace
	// and Clock are this Config's; its Observer, if set, receives every
	// round after the Limiter.
	Sync syncer.SyncConfig
	// Shards is the number of partitions of each rule's table of keys, a
	// power of two from 1 to 65,536. Default local.DefaultShards (64).
	Shards int
	// MaxKeys caps the keys each rule's table holds, enforced per shard at
	// ⌈MaxKeys/Shards⌉. Default local.DefaultMaxKeys (1,048,576).
	MaxKeys int
	// Timeout bounds each central decision: its deadline is its context's
	// or Timeout from its start, whichever comes first. Default
	// syncer.DefaultTimeout.
	Timeout time.Duration
	// ManualSync leaves the syncer's rounds to the caller (SyncAt when
	// SyncWanted, SyncFirstAt when SyncFirstWanted, and SyncAt every
	// Interval), for simulations and tests: no goroutine runs them.
	// Default false.
	ManualSync bool
	// VirtualTime makes Redis scripts take the Limiter's Clock instead of
	// Redis's own: for simulations and tests on a virtual clock. In
	// production Redis's clock sets window boundaries and refills, so
	// nodes' clocks need not agree. Default false.
	VirtualTime bool
	// MeterProvider receives the Limiter's metrics. Default: the global
	// one (otel.GetMeterProvider).
	MeterProvider metric.MeterProvider
	// Logger receives changes of availability and mode. Default:
	// slog.Default().
	Logger *slog.Logger
}

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
	ownClock *local.CoarseClock
	logger   *slog.Logger
	central  *syncer.Central
	sync     *syncer.Syncer
	metrics  *metrics

	mu     sync.Mutex // guards rules, closed
	rules  map[string]*ruleState
	closed bool

	// unavailable is the node time (µs) Redis was last seen failing, 0 while
	// it answers.
	unavailable atomic.Int64
	sweepStop   chan struct{}
	sweepDone   chan struct{}
	shutdown    sync.Once
	shutdownErr error
}

// storeConfig sizes the rules' tables of keys.
func (c *Config) storeConfig() keyed.Config {
	return keyed.Config{Shards: c.Shards, MaxKeys: c.MaxKeys}
}

// New returns a Limiter for cfg. It copies cfg, reports a bad field with an
// error wrapping ErrInvalidConfig, and starts the syncer (unless
// ManualSync) and the sweeper of idle keys.
func New(cfg Config) (*Limiter, error) {
	if cfg.Mode == ModeDefault {
		cfg.Mode = Local
		if cfg.Redis != nil {
			cfg.Mode = Hybrid
		}
	}
	if cfg.Mode > Hybrid {
		return nil, fmt.Errorf("%w: Mode %d: unknown", ErrInvalidConfig, cfg.Mode)
	}
	if cfg.Mode != Local && cfg.Redis == nil {
		return nil, fmt.Errorf("%w: Mode %s: needs Redis", ErrInvalidConfig, cfg.Mode)
	}
	if cfg.Policy == PolicyDefault {
		cfg.Policy = FailLocal
	}
	if cfg.Policy > FailLocal {
		return nil, fmt.Errorf("%w: Policy %d: unknown", ErrInvalidConfig, cfg.Policy)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Timeout < 0 {
		return nil, fmt.Errorf("%w: Timeout %v: must be positive", ErrInvalidConfig, cfg.Timeout)
	}
	if _, err := keyed.New(cfg.storeConfig(), func(*lease.Lease, int64) bool { return false }, nil); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	l := &Limiter{cfg: cfg, clock: cfg.Clock, logger: cfg.Logger, rules: map[string]*ruleState{}}
	if l.clock == nil {
		l.ownClock = local.NewCoarseClock(local.DefaultResolution)
		l.clock = l.ownClock
	}
	fail := func(err error) (*Limiter, error) {
		if l.ownClock != nil {
			l.ownClock.Close()
		}
		return nil, err
	}
	var err error
	if l.metrics, err = newMetrics(cfg.MeterProvider, l); err != nil {
		return fail(fmt.Errorf("%w: MeterProvider: %w", ErrInvalidConfig, err))
	}
	if cfg.Redis != nil {
		l.central, err = syncer.NewCentral(syncer.CentralConfig{Client: cfg.Redis, Keyspace: cfg.Keyspace, Timeout: cfg.Timeout})
		if err != nil {
			return fail(fmt.Errorf("%w: Redis, Keyspace or Timeout: %w", ErrInvalidConfig, err))
		}
		sc := cfg.Sync
		sc.Client, sc.Keyspace, sc.Clock, sc.PassTime = cfg.Redis, cfg.Keyspace, l.clock, cfg.VirtualTime
		sc.Observer = observer{l, cfg.Sync.Observer}
		if l.sync, err = syncer.NewSyncer(sc); err != nil {
			return fail(fmt.Errorf("%w: Sync: %w", ErrInvalidConfig, err))
		}
		if !cfg.ManualSync {
			l.sync.Start()
		}
	} else if err := cfg.Sync.Validate(); err != nil {
		// Without Redis the syncer does not run, but a bad field is still
		// a bad field.
		return fail(fmt.Errorf("%w: Sync: %w", ErrInvalidConfig, err))
	}
	l.sweepStop, l.sweepDone = make(chan struct{}), make(chan struct{})
	go l.sweepLoop()
	return l, nil
}

// NodeID returns the node's name in Redis, or "" without Redis.
func (l *Limiter) NodeID() string {
	if l.sync == nil {
		return ""
	}
	return l.sync.NodeID()
}

// Register validates r and returns the *Rule that decisions take. It
// decides the mode the rule runs in: its own, or the Limiter's default; a
// rule that cannot be split into leases runs Central rather than Hybrid
// (the sliding window log; limits too small to split among the nodes, see
// lease.Split). Registering a name again returns the existing rule if the
// limit is the same, and an error otherwise (use SetLimit).
func (l *Limiter) Register(r Rule) (*Rule, error) {
	r.state = nil
	if err := syncer.ValidRuleName(r.Name); err != nil {
		return nil, fmt.Errorf("%w: Name: %w", ErrInvalidRule, err)
	}
	if !r.Limit.Valid() {
		return nil, fmt.Errorf("%w: rule %q: Limit: zero; build it with local.NewLimit", ErrInvalidRule, r.Name)
	}
	if r.KeyTTL < 0 {
		return nil, fmt.Errorf("%w: rule %q: KeyTTL %v: must not be negative", ErrInvalidRule, r.Name, r.KeyTTL)
	}
	mode, policy := r.Mode, r.Policy
	if mode == ModeDefault {
		mode = l.cfg.Mode
	}
	if mode > Hybrid {
		return nil, fmt.Errorf("%w: rule %q: Mode %d: unknown", ErrInvalidRule, r.Name, mode)
	}
	if mode != Local && l.central == nil {
		return nil, fmt.Errorf("%w: rule %q: Mode %s needs Redis in the Config", ErrInvalidRule, r.Name, mode)
	}
	if policy == PolicyDefault {
		policy = l.cfg.Policy
	}
	if policy > FailLocal {
		return nil, fmt.Errorf("%w: rule %q: Policy %d: unknown", ErrInvalidRule, r.Name, policy)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil, ErrClosed
	}
	if rs, ok := l.rules[r.Name]; ok {
		if *rs.limit.Load() != r.Limit {
			return nil, fmt.Errorf("%w: rule %q is registered with %v; use SetLimit to change it", ErrInvalidRule, r.Name, *rs.limit.Load())
		}
		if rs.requested != mode || rs.policy != policy || rs.keyTTL != r.KeyTTL.Microseconds() {
			return nil, fmt.Errorf("%w: rule %q is registered with another mode, policy or key TTL", ErrInvalidRule, r.Name)
		}
		out := r
		out.state = rs
		return &out, nil
	}
	rs := &ruleState{l: l, name: r.Name, mode: mode, requested: mode, policy: policy, keyTTL: r.KeyTTL.Microseconds(), counts: new(counters)}
	lim := r.Limit
	rs.limit.Store(&lim)
	if mode != Local {
		sr, err := syncer.NewRule(r.Name, r.Limit)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrInvalidRule, err)
		}
		rs.redis.Store(sr)
	}
	if mode == Hybrid {
		lr, err := l.sync.LeaseRule(rs.redis.Load())
		if err != nil || !lease.Split(r.Limit, l.sync.Interval(), max(l.cfg.Sync.Nodes, 1)) {
			mode = Central // the log, or a limit too small to split: exact in Redis
			l.logger.Info("hybridlimit: rule runs central: it cannot be split into leases", "rule", r.Name, "limit", r.Limit.String())
		} else {
			rs.lease.Store(lr)
			rs.store, err = keyed.New(l.cfg.storeConfig(), rs.idle, nil)
			if err != nil {
				return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
			}
		}
		rs.mode = mode
	}
	if mode == Local {
		ll, err := local.New(r.Limit, local.Config{Shards: l.cfg.Shards, MaxKeys: l.cfg.MaxKeys, Clock: l.clock, NoBackgroundSweep: true})
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
		}
		rs.local = ll
	}
	if policy == FailLocal && mode != Local {
		fl, err := local.New(r.Limit, local.Config{Shards: l.cfg.Shards, MaxKeys: l.cfg.MaxKeys, Clock: l.clock, NoBackgroundSweep: true})
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
		}
		rs.fallback = fl
	}
	l.rules[r.Name] = rs
	out := r
	out.state = rs
	return &out, nil
}

// SetLimit changes a registered rule's limit at runtime, on this node.
// Consumption is kept: in local mode as local.Limiter.SetLimit says; in
// central and hybrid modes Redis carries the state over at its next script,
// and every lease of the rule is revoked and granted again under the new
// limit. Every node must make the same change.
func (l *Limiter) SetLimit(r *Rule, lim local.Limit) error {
	rs, err := l.state(r)
	if err != nil {
		return err
	}
	if !lim.Valid() {
		return fmt.Errorf("%w: rule %q: Limit: zero", ErrInvalidRule, rs.name)
	}
	if rs.local != nil {
		if err := rs.local.SetLimit(lim); err != nil {
			return err
		}
	}
	if rs.mode != Local {
		sr, err := syncer.NewRule(rs.name, lim)
		if err != nil {
			return fmt.Errorf("%w: %w", ErrInvalidRule, err)
		}
		if rs.mode == Hybrid {
			lr, err := l.sync.LeaseRule(sr)
			if err != nil {
				return fmt.Errorf("%w: rule %q: the new limit cannot be leased; register a central rule instead: %w", ErrInvalidRule, rs.name, err)
			}
			rs.lease.Swap(lr).Replace(lr)
		}
		rs.redis.Store(sr)
	}
	rs.limit.Store(&lim)
	return nil
}

func (l *Limiter) state(r *Rule) (*ruleState, error) {
	if r == nil {
		return nil, ErrUnknownRule
	}
	rs := r.state
	if rs == nil || rs.l != l {
		return nil, fmt.Errorf("%w: %q", ErrUnknownRule, r.Name)
	}
	return rs, nil
}

// Mode returns the mode r runs in: Local, Central or Hybrid.
func (l *Limiter) Mode(r *Rule) Mode {
	if rs, err := l.state(r); err == nil {
		return rs.mode
	}
	return ModeDefault
}

// Allow is AllowN(ctx, r, key, 1).
func (l *Limiter) Allow(ctx context.Context, r *Rule, key string) (local.Decision, error) {
	return l.AllowN(ctx, r, key, 1)
}

// AllowN decides whether a request of cost n for key is admitted under r,
// and charges it if it is. The Decision is always usable. The error is nil
// unless r is not registered here (ErrUnknownRule), or Redis could not
// decide and the rule's failure policy did (the error wraps ErrUnavailable
// and the Decision's Reason is ReasonUnavailable when it rejected).
//
// In hybrid mode ctx is not used: the decision never waits on Redis. In
// central mode it bounds the round trip.
func (l *Limiter) AllowN(ctx context.Context, r *Rule, key string, n int64) (local.Decision, error) {
	rs, err := l.state(r)
	if err != nil {
		return local.Outcome{Reason: local.ReasonInvalidCost}.Decision(), err
	}
	now := l.nowMicro()
	switch rs.mode {
	case Hybrid:
		return rs.allowHybrid(ctx, now, key, n)
	case Central:
		var d local.Decision
		if l.cfg.VirtualTime {
			d, err = l.central.AllowNAt(ctx, time.UnixMicro(now), rs.redis.Load(), key, n)
		} else {
			d, err = l.central.AllowN(ctx, rs.redis.Load(), key, n)
		}
		if err != nil {
			if errors.Is(err, syncer.ErrUnavailable) {
				l.markUnavailable(now, err)
			}
			return rs.failed(ctx, now, key, n, err)
		}
		if l.unavailable.Load() != 0 {
			l.markAvailable()
		}
		rs.counts.count(d.Reason())
		return d, nil
	default:
		d := rs.local.AllowNAt(time.UnixMicro(now), key, n)
		rs.counts.count(d.Reason())
		return d, nil
	}
}

var errUnavailable = fmt.Errorf("hybrid: no lease and redis unreachable: %w", syncer.ErrUnavailable)

func micros(v int64) time.Duration { return time.Duration(v) * time.Microsecond }

func (l *Limiter) nowMicro() int64 { return l.clock.Now().UnixMicro() }

// allowHybrid is the hybrid hot path: the key's entry, locked once for the
// whole decision, its lease, and a hand to the syncer when the lease asks
// for it. A key without a lease while Redis is out of reach is decided by
// the failure policy (degraded), under the same lock.
func (rs *ruleState) allowHybrid(ctx context.Context, now int64, key string, n int64) (local.Decision, error) {
	lr := rs.lease.Load()
	if v, bad := badCost(lr, n); bad {
		rs.counts.count(v.Reason)
		return dress(v, lr.MaxCost()), nil
	}
	e := rs.lockedEntry(key, now)
	if e == nil {
		rs.counts.count(local.ReasonOverflow)
		return dress(lease.Verdict{Reason: local.ReasonOverflow}, lr.MaxCost()), nil
	}
	v, signal := e.Value.Decide(lr, now, n)
	if signal {
		lr.Notify(e)
	}
	if v.Reason == local.ReasonNoLease && rs.l.unavailable.Load() != 0 {
		d, err := rs.degraded(ctx, e, lr, now, key, n)
		e.Unlock()
		return d, err
	}
	e.Unlock()
	rs.counts.count(v.Reason)
	return dress(v, lr.MaxCost()), nil
}

// badCost refuses, charging nothing, a cost no lease of lr can admit.
func badCost(lr *lease.Rule, n int64) (lease.Verdict, bool) {
	switch {
	case n < 0:
		return lease.Verdict{Reason: local.ReasonInvalidCost}, true
	case n > lr.MaxCost():
		return lease.Verdict{Reason: local.ReasonCostTooHigh}, true
	}
	return lease.Verdict{}, false
}

// degraded decides for a key without a lease while Redis is out of reach:
// by FailLocal on a window rule's lease, else by the rule's failure policy,
// recording in the lease what the policy admitted. e is key's entry, which
// the caller holds locked.
func (rs *ruleState) degraded(ctx context.Context, e *keyed.Entry[lease.Lease], lr *lease.Rule, now int64, key string, n int64) (local.Decision, error) {
	if rs.policy == FailLocal {
		if d, ok := rs.fallbackLease(e, lr, now, n); ok {
			return d, errUnavailable
		}
	}
	d, err := rs.failed(ctx, now, key, n, errUnavailable)
	if d.Allowed() {
		rs.chargeLease(e, lr, now, n)
	}
	return d, err
}

// lockedEntry returns key's entry, locked and with its digest set; nil when
// the table has no room for the key.
func (rs *ruleState) lockedEntry(key string, now int64) *keyed.Entry[lease.Lease] {
	e := rs.store.Lock(key, now)
	if e != nil {
		rs.l.setDigest(&e.Value, key)
	}
	return e
}

// setDigest names a new key's lease in Redis: the digest is computed once,
// on the key's first decision.
func (l *Limiter) setDigest(k *lease.Lease, key string) {
	if k.Digest == ([16]byte{}) {
		k.Digest = l.sync.Keyspace().DigestBytes(key)
	}
}

// chargeLease records in a hybrid key's lease, in e, which the caller holds
// locked, what a failure policy admitted for it while Redis was out of
// reach: the next exchange reports it, and Redis counts it once it answers
// again.
func (rs *ruleState) chargeLease(e *keyed.Entry[lease.Lease], lr *lease.Rule, now int64, n int64) {
	if e.Value.Charge(lr, now, n) {
		lr.Notify(e)
	}
}

// fallbackLease decides by FailLocal on a window rule's lease, in e, which
// the caller holds locked (see lease.Lease.Fallback); ok is false for
// bucket rules.
func (rs *ruleState) fallbackLease(e *keyed.Entry[lease.Lease], lr *lease.Rule, now int64, n int64) (d local.Decision, ok bool) {
	part := max(rs.limit.Load().Params().Limit/max(lr.Nodes(), 1), 1)
	v, ok := e.Value.Fallback(lr, now, n, part)
	if !ok {
		return local.Decision{}, false
	}
	if v.Reason == local.ReasonOK {
		lr.Notify(e)
	}
	rs.counts.fallback.Add(1)
	rs.counts.count(v.Reason)
	return dress(v, lr.MaxCost()), true
}

// failed decides by the rule's failure policy; err says why Redis could
// not.
func (rs *ruleState) failed(_ context.Context, now int64, key string, n int64, err error) (local.Decision, error) {
	lim := rs.limit.Load()
	rs.counts.fallback.Add(1)
	switch rs.policy {
	case FailOpen:
		rs.counts.count(local.ReasonOK)
		return local.Outcome{Allowed: true, Reason: local.ReasonUnavailable, Limit: lim.MaxCost(), Remaining: lim.MaxCost()}.Decision(), err
	case FailClosed:
		rs.counts.count(local.ReasonUnavailable)
		return local.Outcome{Reason: local.ReasonUnavailable, Limit: lim.MaxCost(), RetryAfter: time.Second}.Decision(), err
	default: // FailLocal: this node's part of the limit
		// The nodes: as the last lease exchange counted them, or, for a
		// central rule (no lease), as the Config says (Sync.Nodes).
		nodes := int64(max(rs.l.cfg.Sync.Nodes, 1))
		if lr := rs.lease.Load(); lr != nil && lr.Nodes() > 0 {
			nodes = lr.Nodes()
		}
		part := *lim
		if nodes > 1 {
			p := lim.Params()
			p.Limit = max(p.Limit/nodes, 1)
			if p.Burst > 0 {
				p.Burst = max(p.Burst/nodes, 1)
			}
			if nl, perr := local.NewLimit(p); perr == nil {
				part = nl
			}
		}
		if rs.fallback.Limit() != part {
			rs.fallback.SetLimit(part)
		}
		d := rs.fallback.AllowNAt(time.UnixMicro(now), key, n)
		if !d.Allowed() && d.Reason() == local.ReasonLimited {
			o := d.Outcome()
			o.Reason = local.ReasonUnavailable
			d = o.Decision()
		}
		rs.counts.count(d.Reason())
		return d, err
	}
}

// idle is the store's eviction test for a hybrid key.
func (rs *ruleState) idle(v *lease.Lease, now int64) bool {
	return v.Idle(now) && now-v.LastUse() >= rs.keyTTL
}

func (l *Limiter) markUnavailable(now int64, err error) {
	if l.unavailable.Swap(max(now, 1)) == 0 {
		l.logger.Warn("hybridlimit: redis unavailable; failure policies apply", "err", err)
		l.metrics.modeChanged()
	}
}

func (l *Limiter) markAvailable() {
	if l.unavailable.Swap(0) != 0 {
		l.logger.Info("hybridlimit: redis available again")
		l.metrics.modeChanged()
	}
}

// observer turns the syncer's rounds into availability and metrics.
// observer takes the syncer's rounds into the Limiter (availability,
// metrics), then hands them to the caller's Sync.Observer, if any.
type observer struct {
	l    *Limiter
	next syncer.Observer
}

func (o observer) Round(st syncer.RoundStats) {
	switch {
	case st.Err != nil && errors.Is(st.Err, syncer.ErrUnavailable):
		o.l.markUnavailable(o.l.nowMicro(), st.Err)
	case st.Synced > 0 || st.Registered:
		o.l.markAvailable()
	}
	o.l.metrics.round(st)
	if o.next != nil {
		o.next.Round(st)
	}
}

// SyncAt runs one round of the syncer at the Limiter's clock time, for
// Config.ManualSync. It returns the round's figures.
func (l *Limiter) SyncAt(ctx context.Context, now time.Time) (syncer.RoundStats, error) {
	if l.sync == nil {
		return syncer.RoundStats{}, nil
	}
	return l.sync.SyncAt(ctx, now.UnixMicro())
}

// SyncWanted reports, and clears, whether a hybrid key asked for an early
// sync round since the last call; with ManualSync the caller runs one
// (SyncAt) soon after, as the loop would, MinGap later.
func (l *Limiter) SyncWanted() bool { return l.sync != nil && l.sync.Wanted() }

// SyncFirstAt runs a first-lease round of the syncer at the Limiter's clock
// time, for Config.ManualSync: it exchanges only the keys that asked for
// their first lease, or for the correction of a lease granted on a guess
// (syncer.Syncer.SyncFirstAt). It returns the round's figures.
func (l *Limiter) SyncFirstAt(ctx context.Context, now time.Time) (syncer.RoundStats, error) {
	if l.sync == nil {
		return syncer.RoundStats{}, nil
	}
	return l.sync.SyncFirstAt(ctx, now.UnixMicro())
}

// SyncFirstWanted reports, and clears, whether a hybrid key asked for a
// first-lease round since the last call; with ManualSync the caller runs
// one (SyncFirstAt) soon after, as the loop would, at once or FirstGap
// after the last one.
func (l *Limiter) SyncFirstWanted() bool { return l.sync != nil && l.sync.WantedFirst() }

// sweepLoop evicts idle keys of every rule every minute.
func (l *Limiter) sweepLoop() {
	defer close(l.sweepDone)
	t := time.NewTicker(local.DefaultSweepInterval)
	defer t.Stop()
	for {
		select {
		case <-l.sweepStop:
			return
		case <-t.C:
			l.SweepAt(l.clock.Now())
		}
	}
}

// SweepAt forgets every key back in its initial state at now, of every
// rule, and returns how many.
func (l *Limiter) SweepAt(now time.Time) int {
	l.mu.Lock()
	rules := make([]*ruleState, 0, len(l.rules))
	for _, rs := range l.rules {
		rules = append(rules, rs)
	}
	l.mu.Unlock()
	us, n := now.UnixMicro(), 0
	for _, rs := range rules {
		if rs.store != nil {
			n += rs.store.Sweep(us)
		}
		if rs.local != nil {
			n += rs.local.SweepAt(now)
		}
		if rs.fallback != nil {
			n += rs.fallback.SweepAt(now)
		}
	}
	return n
}

// Shutdown reports to Redis what hybrid rules admitted and did not report
// yet, gives their leases back, and stops every goroutine, within ctx.
// Decisions remain possible afterwards, locally. Idempotent.
func (l *Limiter) Shutdown(ctx context.Context) error {
	l.shutdown.Do(func() {
		l.mu.Lock()
		l.closed = true
		l.mu.Unlock()
		close(l.sweepStop)
		<-l.sweepDone
		if l.sync != nil {
			l.shutdownErr = l.sync.Shutdown(ctx)
		}
		l.metrics.close()
		for _, rs := range l.rules {
			if rs.local != nil {
				rs.local.Close()
			}
			if rs.fallback != nil {
				rs.fallback.Close()
			}
		}
		if l.ownClock != nil {
			l.ownClock.Close()
		}
	})
	return l.shutdownErr
}

// Close is Shutdown with DefaultShutdownTimeout.
func (l *Limiter) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), DefaultShutdownTimeout)
	defer cancel()
	return l.Shutdown(ctx)
}
