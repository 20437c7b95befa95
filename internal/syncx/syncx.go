// Package syncx offers, typed, what package syncer does for the module's
// other packages but does not export: the hybrid mode's syncer, and the
// names of keys. Package syncer sets internal/synchook's variables when it
// loads; this package, which imports syncer, asserts their types once, so
// that a call costs what a call through a function value does.
package syncx

import (
	"github.com/redis/go-redis/v9"

	"github.com/hybridlimit/hybridlimit/internal/synchook"
	"github.com/hybridlimit/hybridlimit/local"
	"github.com/hybridlimit/hybridlimit/syncer"
)

// Syncer is the hybrid mode's syncer, which exchanges leases with Redis;
// see synchook.Syncer.
type Syncer = synchook.Syncer[*syncer.Rule]

// Config configures a Syncer.
type Config struct {
	// Tuning is hybrid.SyncConfig's: the sync interval, the leases' sizing,
	// the cold-start allowance; its zero fields take their defaults.
	synchook.Tuning
	// Client reaches Redis, as syncer.CentralConfig.Client. Required.
	Client redis.UniversalClient
	// Keyspace names the keys; every node must use the same one.
	Keyspace syncer.Keyspace
	// Clock is the node's clock. Default: a CoarseClock of 1ms resolution
	// that NewSyncer starts and Close stops.
	Clock local.Clock
	// Observer receives each round's figures. Optional.
	Observer synchook.Observer
	// PassTime makes the scripts take the node's clock instead of Redis's:
	// for simulations on a virtual clock.
	PassTime bool
}

// The functions of package syncer, typed once.
var (
	newSyncer     = synchook.NewSyncer.(func(synchook.Tuning, redis.UniversalClient, syncer.Keyspace, local.Clock, synchook.Observer, bool) (Syncer, error))
	validRuleName = synchook.ValidRuleName.(func(string) error)
	digest        = synchook.Digest.(func(*syncer.Keyspace, string) string)
	keys          = synchook.Keys.(func(*syncer.Keyspace, *syncer.Rule, string) (string, string))
)

// ErrNotLeasable is wrapped by the error of Syncer.LeaseRule for a limit
// that cannot be split into leases: the sliding window log, and buckets
// past the exact range of the scripts' arithmetic. It wraps
// syncer.ErrInvalidRule.
var ErrNotLeasable = synchook.ErrNotLeasable

// NewSyncer returns a Syncer for c, not yet running. It works on a copy of
// c with its zero fields set to their defaults, and reports a bad field
// with an error wrapping syncer.ErrInvalidConfig.
func NewSyncer(c Config) (Syncer, error) {
	return newSyncer(c.Tuning, c.Client, c.Keyspace, c.Clock, c.Observer, c.PassTime)
}

// ValidRuleName reports, as an error wrapping syncer.ErrInvalidRule,
// whether name cannot name a rule: it must be 1 to 128 bytes of letters,
// digits and -_.:/.
func ValidRuleName(name string) error { return validRuleName(name) }

// Digest returns the digest of a user key that names it in Redis under ks,
// as key names hold it.
func Digest(ks *syncer.Keyspace, key string) string { return digest(ks, key) }

// Keys returns the Redis names, under ks, of rule and key's state and of
// its log list (which only the sliding window log uses).
func Keys(ks *syncer.Keyspace, rule *syncer.Rule, key string) (state, log string) {
	return keys(ks, rule, key)
}
