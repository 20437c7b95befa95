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

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/hybridlimit/hybridlimit/internal/coarse"
	"github.com/hybridlimit/hybridlimit/internal/config"
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

// Defaults of Config: docs/operating.md#defaults lists them, with Sync's
// and Gossip's (packages syncer and fallback), and TestDefaults holds that
// table against them.
const (
	// defaultPolicy is the rules' failure policy when neither the Rule nor
	// the Config names one and Config.Gossip is nil; with it, Gossip.
	defaultPolicy = FailLocal
	// defaultTimeout bounds each central decision, and a hybrid decision's
	// wait for a lease.
	defaultTimeout = config.Timeout
	// defaultResolution is the resolution of the clock a Limiter starts when
	// Config.Clock is nil.
	defaultResolution = config.ClockResolution
	defaultShards     = keyed.DefaultShards
	defaultMaxKeys    = keyed.DefaultMaxKeys
	defaultPrefix     = config.KeyPrefix
)

const (
	// sweepInterval is how often a Limiter forgets idle keys.
	sweepInterval = config.SweepInterval
	// closeTimeout is how long Close gives Shutdown.
	closeTimeout = 2 * time.Second
)

// maxShards bounds Config.Shards, as it bounds local.Config's.
const maxShards = keyed.MaxShards

// The probe's backoff: while Redis is unavailable, a background probe
// PINGs it first probeMin after the failure, then at twice the previous
// wait, up to probeMax.
const (
	probeMin = 50 * time.Millisecond
	probeMax = time.Second
)

// Config configures a Limiter. Every field documents its default, and
// docs/operating.md#defaults lists them all; the zero Config is a Limiter
// of Local rules.
type Config struct {
	// Redis reaches Redis: a *redis.Client (one server, or Sentinel through
	// redis.NewFailoverClient), a *redis.ClusterClient, or another
	// redis.UniversalClient. Default nil: no Redis; only Local rules can be
	// registered.
	//
	// A go-redis client must set ContextTimeoutEnabled in its options: New
	// refuses one that does not (ErrInvalidConfig, naming Redis). Without
	// it go-redis bounds a call by its ReadTimeout (5s by default), not by
	// Timeout, and a paused Redis would hold each central decision that
	// long. The Limiter does not copy the client with the option set: the
	// copy would lose the hooks (tracing, metrics) added to the caller's.
	Redis redis.UniversalClient
	// RequireRedis makes New PING Redis (every master of a Cluster), within
	// Timeout, and fail with an error wrapping ErrUnavailable when it does
	// not answer. Default false: New does not wait for Redis, and rules
	// decide by their failure policy until it answers (see Ping for a
	// health check later).
	RequireRedis bool
	// Keyspace names the Redis keys; every node must use the same one.
	// Default: prefix "hl", no secret.
	Keyspace Keyspace
	// Mode is the rules' default mode. Default: Hybrid with Redis, Local
	// without.
	Mode Mode
	// Policy is the rules' default failure policy. Default Gossip with
	// Gossip, FailLocal without.
	Policy Policy
	// Gossip, if not nil, starts a gossip node (package fallback) that runs
	// as long as the Limiter, so that membership and each key's counts and
	// demand are known across the nodes when Redis fails; the Gossip
	// policy decides from them. Its fields take package fallback's
	// defaults, but its Logger, which defaults to Logger. New checks it as
	// it starts the node, which joins its Seeds. The Limiter owns the node:
	// Shutdown and Close stop it; Stats reports its address and figures.
	// Default nil: no gossip.
	Gossip *GossipConfig
	// Clock tells the time: any type with a Now() time.Time method.
	// Default: a coarse clock of 1ms resolution that New starts and Shutdown
	// stops. Hybrid and local decisions read it;
	// Redis scripts read Redis's clock, which the syncer relates to this
	// one.
	Clock local.Clock
	// Sync tunes the syncer of hybrid rules (interval, lease sizing,
	// cold-start allowance, …); each field documents its default, filled in
	// when New starts the syncer. The syncer reaches Redis through Redis,
	// names keys by Keyspace and reads Clock. New checks Sync as it starts
	// the syncer, with Redis; without Redis there is no syncer, and Sync is
	// not used.
	Sync SyncConfig
	// Shards is the number of partitions of each rule's table of keys, a
	// power of two from 1 to 65,536. Default 64.
	Shards int
	// MaxKeys caps the keys each rule's table holds, enforced per shard at
	// ⌈MaxKeys/Shards⌉. Default 1,048,576.
	MaxKeys int
	// Timeout bounds each central decision, and each hybrid decision that
	// waits for a lease (Rule.Wait): its deadline is its context's or
	// Timeout from its start, whichever comes first; the failure policy
	// decides what Redis did not answer in time. Default 250ms.
	Timeout time.Duration
	// manualSync leaves the syncer's rounds to the caller (syncAt when
	// syncWanted, syncFirstAt when syncFirstWanted, and syncAt every
	// Interval), for simulations and tests: no goroutine runs them.
	// Default false.
	manualSync bool
	// virtualTime makes Redis scripts take the Limiter's Clock instead of
	// Redis's own: for simulations and tests on a virtual clock. In
	// production Redis's clock sets window boundaries and refills, so
	// nodes' clocks need not agree. Default false.
	virtualTime bool
	// MeterProvider receives the Limiter's metrics. Default: the global
	// one (otel.GetMeterProvider()).
	MeterProvider metric.MeterProvider
	// TracerProvider receives a span per sync round and per hand-back
	// after an outage, never one per decision. Default: the global one
	// (otel.GetTracerProvider()).
	TracerProvider trace.TracerProvider
	// Logger receives changes of availability and mode. Default:
	// slog.Default(). The first Limiter with Redis also routes go-redis's
	// own log lines (dial failures, pool events) to its Logger at Debug
	// level: go-redis has one logger for the whole process (redis.SetLogger),
	// set once; call redis.SetLogger after New to send them elsewhere.
	Logger *slog.Logger
}

// withDefaults returns c with each zero field that has a default set to it;
// a Gossip without a Logger becomes a copy with c's. Clock stays nil (New
// starts its own); Sync's defaults are package syncer's, filled in when New
// starts the syncer, and Gossip's others package fallback's.
func (c Config) withDefaults() Config {
	if c.Mode == modeDefault {
		c.Mode = Local
		if c.Redis != nil {
			c.Mode = Hybrid
		}
	}
	if c.Policy == policyDefault {
		c.Policy = defaultPolicy
		if c.Gossip != nil {
			c.Policy = Gossip
		}
	}
	if c.Keyspace.Prefix == "" {
		c.Keyspace.Prefix = defaultPrefix
	}
	if c.Shards == 0 {
		c.Shards = defaultShards
	}
	if c.MaxKeys == 0 {
		c.MaxKeys = defaultMaxKeys
	}
	if c.Timeout == 0 {
		c.Timeout = defaultTimeout
	}
	if c.MeterProvider == nil {
		c.MeterProvider = otel.GetMeterProvider()
	}
	if c.TracerProvider == nil {
		c.TracerProvider = otel.GetTracerProvider()
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Gossip != nil && c.Gossip.Logger == nil {
		g := *c.Gossip
		g.Logger = c.Logger
		c.Gossip = &g
	}
	return c
}

// validate reports c's first bad field, c having its defaults, in an error
// wrapping ErrInvalidConfig that names it. It builds nothing: what needs
// another package's checks (Redis's client and Keyspace, Sync, Gossip) New
// checks as it builds the Limiter.
func (c Config) validate() error {
	switch {
	case c.Mode > Hybrid:
		return configError("Mode", uint8(c.Mode), "unknown")
	case c.Mode != Local && c.Redis == nil:
		return configError("Mode", c.Mode, "needs Redis")
	case c.RequireRedis && c.Redis == nil:
		return configError("RequireRedis", c.RequireRedis, "needs Redis")
	case c.Policy > Gossip:
		return configError("Policy", uint8(c.Policy), "unknown")
	case c.Timeout < 0:
		return configError("Timeout", c.Timeout, "must be positive")
	case c.Shards < 1 || c.Shards > maxShards || c.Shards&(c.Shards-1) != 0:
		return configError("Shards", c.Shards, fmt.Sprintf("must be a power of two from 1 to %d", maxShards))
	case c.MaxKeys < 1:
		return configError("MaxKeys", c.MaxKeys, "must be positive")
	}
	return nil
}

// configError is the error of a bad Config field.
func configError(field string, value any, reason string) error {
	return config.Invalid(ErrInvalidConfig, field, value, reason)
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
	ownClock *coarse.Clock
	logger   *slog.Logger
	central  *syncer.Central
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
		if cfg.RequireRedis {
			if err := l.central.Ping(context.Background()); err != nil {
				return fail(fmt.Errorf("hybrid: New: Redis does not answer (Config.RequireRedis): %w", err))
			}
		}
		sc := syncx.Config{
			Tuning: cfg.Sync.tuning(), Client: cfg.Redis, Keyspace: cfg.Keyspace, Clock: l.clock,
			Observer: observer{l}, PassTime: cfg.virtualTime,
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
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil, ErrClosed
	}
	if rs, ok := l.rules[r.Name]; ok {
		if *rs.limit.Load() != lim {
			return nil, fmt.Errorf("%w: rule %q is registered with %v; use SetLimit to change it", ErrInvalidRule, r.Name, *rs.limit.Load())
		}
		if (rs.requested != mode && rs.mode.kind() != mode) || rs.policy != policy || rs.keyTTL != r.KeyTTL.Microseconds() || rs.wait != wait {
			return nil, fmt.Errorf("%w: rule %q is registered with another mode, policy, key TTL or Wait", ErrInvalidRule, r.Name)
		}
		out := r
		out.state, out.Mode = rs, rs.mode.kind()
		return &out, nil
	}
	rs := &ruleState{l: l, name: r.Name, requested: mode, policy: policy, keyTTL: r.KeyTTL.Microseconds(), wait: wait, counts: new(counters)}
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

// roundStrikes is how many sync rounds in a row must fail, Redis
// answering nothing in them, before the breaker opens. One round that
// timed out is as likely a busy machine (the node's own process not run in
// time) as a Redis gone, and opening the breaker hands every key without a
// lease to its failure policy, whose admissions come on top of what Redis
// counts. A central call that fails opens it at once: it cannot wait.
const roundStrikes = 3

// roundFailed takes the error of a sync round in which Redis answered
// nothing: the third in a row opens the breaker.
func (l *Limiter) roundFailed(now int64, err error) {
	if l.strikes.Add(1) >= roundStrikes {
		l.markUnavailable(now, err)
	}
}

// markUnavailable opens the circuit breaker: failure policies decide for
// central rules, and for hybrid keys without a lease, until a probe, a sync
// round or Ping finds Redis again.
func (l *Limiter) markUnavailable(now int64, err error) {
	if l.shut.Load() {
		return
	}
	if l.unavailable.Swap(max(now, 1)) == 0 {
		l.outageAt.Store(time.Now().UnixMicro())
		l.handBack.Store(true)
		l.logger.Warn("hybridlimit: redis unavailable; failure policies apply", "err", err)
		l.metrics.modeChanged(false)
	}
	l.startProbe()
}

// markAvailable closes the circuit breaker.
func (l *Limiter) markAvailable() {
	l.strikes.Store(0)
	if l.shut.Load() {
		return
	}
	if l.unavailable.Swap(0) != 0 {
		l.logger.Info("hybridlimit: redis available again; what was admitted without it is reported")
		l.metrics.modeChanged(true)
	}
}

// breakerOpen reports whether central calls go to the failure policy
// without asking Redis: Redis is known unavailable, or the Limiter is shut
// down.
func (l *Limiter) breakerOpen() bool { return l.unavailable.Load() != 0 }

// startProbe starts the probe unless one runs, the Limiter is shut down,
// or the caller runs the rounds (manualSync: syncAt probes).
func (l *Limiter) startProbe() {
	if l.cfg.manualSync || !l.probing.CompareAndSwap(false, true) {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		l.probing.Store(false)
		return
	}
	l.probeWG.Add(1)
	go l.probeLoop()
}

// probeLoop PINGs Redis, with backoff from probeMin to probeMax, until it
// answers (or a sync round found it again), then closes the breaker. Shutdown
// stops it.
func (l *Limiter) probeLoop() {
	defer l.probeWG.Done()
	wait := probeMin
	t := time.NewTimer(wait)
	defer t.Stop()
	for {
		select {
		case <-l.probeStop:
			return
		case <-t.C:
		}
		if l.unavailable.Load() != 0 && l.central.Ping(context.Background()) != nil {
			wait = min(2*wait, probeMax)
			t.Reset(wait)
			continue
		}
		l.markAvailable()
		l.probing.Store(false)
		// Unavailable again since the PING: probe on, unless another
		// probe started.
		if l.unavailable.Load() == 0 || !l.probing.CompareAndSwap(false, true) {
			return
		}
		wait = probeMin
		t.Reset(wait)
	}
}

// Ping PINGs Redis (every master of a Cluster), bounded by ctx and
// Config.Timeout, for a health endpoint: nil when it answers, or without
// Redis; an error wrapping ErrUnavailable when it does not; ErrClosed after
// Shutdown. An answer closes the circuit breaker at once.
func (l *Limiter) Ping(ctx context.Context) error {
	if l.shut.Load() {
		return ErrClosed
	}
	if l.central == nil {
		return nil
	}
	if err := l.central.Ping(ctx); err != nil {
		return err
	}
	l.markAvailable()
	return nil
}

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
