// Package syncx offers, typed, what package syncer does for the module's
// other packages but does not export: the hybrid mode's syncer, central
// decisions at a given time and over several rules, and the names of keys. Package syncer sets internal/synchook's variables when it
// loads; this package, which imports syncer, asserts their types once, so
// that a call costs what a call through a function value does.
package syncx

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hybridlimit/hybridlimit/internal/localx"
	"github.com/hybridlimit/hybridlimit/internal/synchook"
	"github.com/hybridlimit/hybridlimit/local"
	"github.com/hybridlimit/hybridlimit/syncer"
)

type (
	// Syncer is the hybrid mode's syncer, which exchanges leases with
	// Redis; see synchook.Syncer.
	Syncer = synchook.Syncer[*syncer.Rule]
	// Request is one rule of a central multi-rule decision.
	Request = synchook.Request[*syncer.Rule]
	// Charge is what a central multi-rule decision charged, for a refund.
	Charge = synchook.Charge
)

// Config configures a Syncer.
type Config struct {
	// Tuning is hybrid.SyncConfig's: the sync interval, the leases' sizing,
	// the cold-start allowance; its zero fields take their defaults.
	synchook.Tuning
	// Client reaches Redis, as syncer.CentralConfig.Client. Required.
	Client redis.UniversalClient
	// Keyspace names the keys; every node must use the same one.
	Keyspace syncer.Keyspace
	// Clock is the node's clock. Default: a coarse clock of 1ms resolution
	// that NewSyncer starts and Close stops.
	Clock local.Clock
	// Observer receives each round's figures. Optional.
	Observer synchook.Observer
	// PassTime makes the scripts take the node's clock instead of Redis's:
	// for simulations on a virtual clock.
	PassTime bool
	// Global is the exchange of the rules of global reach; nil: none.
	Global *synchook.Global
}

// The functions of package syncer, typed once.
var (
	newSyncer     = synchook.NewSyncer.(func(synchook.Tuning, redis.UniversalClient, syncer.Keyspace, local.Clock, synchook.Observer, bool, *synchook.Global) (Syncer, error))
	validRuleName = synchook.ValidRuleName.(func(string) error)
	digest        = synchook.Digest.(func(*syncer.Keyspace, string) string)
	keys          = synchook.Keys.(func(*syncer.Keyspace, *syncer.Rule, string) (string, string))
	newRule       = synchook.NewRule.(func(string, localx.Limit) (*syncer.Rule, error))
	allowNAt      = synchook.AllowNAt.(func(*syncer.Central, context.Context, time.Time, *syncer.Rule, string, int64) (local.Decision, error))
	allowMulti    = synchook.AllowMulti.(func(*syncer.Central, context.Context, time.Time, []Request, []local.Decision) (bool, error))
	allowCharge   = synchook.AllowMultiCharge.(func(*syncer.Central, context.Context, time.Time, []Request, []local.Decision) (Charge, bool, error))
	preload       = synchook.Preload.(func(*syncer.Central, context.Context) error)
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
	return newSyncer(c.Tuning, c.Client, c.Keyspace, c.Clock, c.Observer, c.PassTime, c.Global)
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

// NewRule is syncer.NewRule for a limit already validated, as package
// hybrid holds it.
func NewRule(name string, lim localx.Limit) (*syncer.Rule, error) { return newRule(name, lim) }

// AllowNAt is c.AllowN with the time now passed to the script instead of
// read from Redis's clock, for simulations on a virtual clock. The state
// clamps it as package local does: a time earlier than one the key has
// stored counts as that time.
func AllowNAt(ctx context.Context, c *syncer.Central, now time.Time, rule *syncer.Rule, key string, n int64) (local.Decision, error) {
	return allowNAt(c, ctx, now, rule, key, n)
}

// AllowMulti decides several requests as one in c's Redis, at the time now,
// or Redis's for the zero Time: all are admitted and charged, or none is
// charged. It writes one Decision per request into out (at least as long
// as reqs) and reports whether all were admitted; the Decisions follow
// local.AllowMultiAt's conventions.
//
// When every key lives in one slot (one Redis server, or a Cluster with
// Keyspace.SharedKeyTag and one user key) it is a single script and exact.
// Otherwise each rule is reserved by its own script, in one pipelined
// exchange per node, and the reservations are refunded if any rule refused:
// never more admitted than the limits allow, but a concurrent request may
// be refused because of a reservation about to be refunded.
func AllowMulti(ctx context.Context, c *syncer.Central, now time.Time, reqs []Request, out []local.Decision) (bool, error) {
	return allowMulti(c, ctx, now, reqs, out)
}

// AllowMultiCharge is AllowMulti that also returns what it charged when it
// admitted, and nil otherwise: its Refund gives it back.
func AllowMultiCharge(ctx context.Context, c *syncer.Central, now time.Time, reqs []Request, out []local.Decision) (Charge, bool, error) {
	return allowCharge(c, ctx, now, reqs, out)
}

// Preload loads every script into c's Redis (every master, on a Cluster),
// so the first decisions run by SHA. It is optional: a node without a
// script gets it on first use.
func Preload(ctx context.Context, c *syncer.Central) error { return preload(c, ctx) }
