package hybrid

import (
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/hybridlimit/hybridlimit/internal/config"
	"github.com/hybridlimit/hybridlimit/internal/keyed"
	"github.com/hybridlimit/hybridlimit/internal/synchook"
	"github.com/hybridlimit/hybridlimit/local"
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
	// Global is the global store of the rules of global reach
	// (Rule.Global): a Redis every region reaches (single, Sentinel or
	// Cluster), which holds one limit across regions that each run their
	// own Redis (Redis). A region's nodes lease from their own
	// Redis as for any rule, from the region's part of the limit; one of
	// them at a time exchanges those parts with Global every
	// Sync.Interval, never on a request's path. docs/multiregion.md has the
	// design, its bounds and what to run where. Default nil: no rule may be
	// Global.
	Global redis.UniversalClient
	// Region names this node's region in Global: the same for every node
	// that shares its Redis, and another for each region. 1 to 64 bytes of
	// letters, digits and -_.:. Required with Global.
	Region string
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
	// stops, asleep while nothing reads it. Hybrid and local decisions read
	// it; Redis scripts read Redis's clock, which the syncer relates to this
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
	return c.validateGlobal()
}

// validateGlobal checks Global and Region.
func (c Config) validateGlobal() error {
	if c.Global == nil {
		if c.Region != "" {
			return configError("Region", c.Region, "needs Global")
		}
		return nil
	}
	switch {
	case c.Redis == nil:
		return configError("Global", "set", "needs Redis: the region's own")
	case !validRegion(c.Region):
		return configError("Region", c.Region, "must be 1 to 64 bytes of letters, digits and -_.:")
	}
	return nil
}

// validRegion reports whether name may name a region.
func validRegion(name string) bool {
	if len(name) < 1 || len(name) > 64 {
		return false
	}
	for _, c := range []byte(name) {
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte("-_.:", c) >= 0) {
			return false
		}
	}
	return true
}

// configError is the error of a bad Config field.
func configError(field string, value any, reason string) error {
	return config.Invalid(ErrInvalidConfig, field, value, reason)
}

// global is the exchange of the rules of global reach, nil without Global;
// the syncer sets its period and bound (Sync.Interval, and a second or
// Sync.Timeout when longer).
func (c Config) global() *synchook.Global {
	if c.Global == nil {
		return nil
	}
	return &synchook.Global{Client: c.Global, Region: c.Region}
}
