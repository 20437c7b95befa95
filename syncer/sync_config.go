package syncer

import (
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hybridlimit/hybridlimit/internal/config"
	"github.com/hybridlimit/hybridlimit/internal/keyname"
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

// minGlobalTimeout is the least default bound of an exchange with the
// global store: a link across regions takes tens of milliseconds each way.
const minGlobalTimeout = time.Second

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
	// Global is the exchange of the rules of global reach (region.go); nil:
	// none.
	Global *synchook.Global
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
	if c.Global != nil {
		g := *c.Global
		def(&g.Interval, c.Interval)
		def(&g.Timeout, max(c.Timeout, minGlobalTimeout))
		c.Global = &g
	}
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
	if g := c.Global; g != nil {
		if enabled, known := contextTimeouts(g.Client); known && !enabled {
			return invalidConfig("Global", fmt.Sprintf("%T", g.Client), "set ContextTimeoutEnabled in its options, or deadlines will not bound the exchanges with the global store")
		}
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
