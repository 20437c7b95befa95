package local

import (
	"fmt"
	"time"

	"github.com/hybridlimit/hybridlimit/internal/config"
	"github.com/hybridlimit/hybridlimit/internal/keyed"
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

// Defaults of Config: docs/operating.md#defaults lists them, and
// TestDefaults holds that table against them.
const (
	defaultShards        = keyed.DefaultShards
	defaultMaxKeys       = keyed.DefaultMaxKeys
	defaultSweepInterval = config.SweepInterval
)

// maxShards bounds Config.Shards.
const maxShards = keyed.MaxShards

// Config configures a Limiter. The zero value is a usable configuration:
// every field documents its default, and docs/operating.md#defaults lists
// them all.
type Config struct {
	// Shards is the number of partitions of the key table, a power of two
	// from 1 to 65,536. More shards spread the locking of inserts and sweeps.
	// Lookups of existing keys take no shard lock. Default 64.
	Shards int
	// MaxKeys caps the keys held. The cap is enforced per shard, at
	// ⌈MaxKeys/Shards⌉ keys each. Default 1,048,576.
	MaxKeys int
	// Overflow is the policy for new keys beyond MaxKeys. Default
	// OverflowReject. Every overflow is counted in Stats.
	Overflow Overflow
	// Clock tells the time for the methods without an At suffix and for the
	// background sweeper. Default: a coarse clock, refreshed every 1ms by a
	// goroutine that New starts and Close stops, and that sleeps while
	// nothing reads it. Many limiters can share one Clock of the caller's:
	// one that calls time.Now runs no goroutine.
	//
	// Eviction compares a key's state with a time, so all times a Limiter
	// sees must be on one timeline: the times passed to the At methods must
	// be the Clock's (time.Now with the default), or the sweeper, judging by
	// the Clock, may forget keys that are live on the caller's timeline and
	// let them start afresh. Callers passing times of their own (simulations,
	// replays) set NoBackgroundSweep and call SweepAt with their time.
	Clock Clock
	// SweepInterval is how often a background goroutine evicts the keys
	// whose state is back to the initial state. Default 1m. Keys are also
	// evicted as new keys arrive, judged at the new request's time: when a
	// shard's table is about to grow or is full.
	SweepInterval time.Duration
	// NoBackgroundSweep turns the sweeping goroutine off; call SweepAt to
	// free idle keys. Default false.
	NoBackgroundSweep bool
}

// withDefaults returns c with each zero field that has a default set to
// it. Clock stays nil: New starts one.
func (c Config) withDefaults() Config {
	if c.Shards == 0 {
		c.Shards = defaultShards
	}
	if c.MaxKeys == 0 {
		c.MaxKeys = defaultMaxKeys
	}
	if c.SweepInterval == 0 {
		c.SweepInterval = defaultSweepInterval
	}
	return c
}

// validate reports c's first bad field, c having its defaults, in an error
// wrapping ErrInvalidConfig that names it. It builds nothing.
func (c Config) validate() error {
	switch {
	case c.Shards < 1 || c.Shards > maxShards || c.Shards&(c.Shards-1) != 0:
		return configError("Shards", c.Shards, fmt.Sprintf("must be a power of two from 1 to %d", maxShards))
	case c.MaxKeys < 1:
		return configError("MaxKeys", c.MaxKeys, "must be positive")
	case c.Overflow > OverflowShared:
		return configError("Overflow", uint8(c.Overflow), "unknown policy")
	case c.SweepInterval < 0:
		return configError("SweepInterval", c.SweepInterval, "must be positive")
	}
	return nil
}

// configError is the error of a bad Config field.
func configError(field string, value any, reason string) error {
	return config.Invalid(ErrInvalidConfig, field, value, reason)
}
