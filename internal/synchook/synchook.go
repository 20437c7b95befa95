// Package synchook carries what package syncer does for the module's other
// packages but does not export: the hybrid mode's syncer, central decisions
// at a given time and over several rules, and the names of keys. Package
// syncer sets the variables when it loads, each to a function of its own
// types; package internal/syncx, which imports syncer, asserts their types
// once and offers them typed. This package cannot import syncer: the types
// that name syncer's take it as a type parameter (R is *syncer.Rule).
package synchook

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hybridlimit/hybridlimit/internal/lease"
)

// Tuning tunes the hybrid mode's syncer: it has the fields of
// hybrid.SyncConfig, which converts to it, and which documents each field
// and its default. Package syncer fills the defaults in and checks it.
type Tuning struct {
	NodeID      string        // the node's name in Redis
	Interval    time.Duration // the regular sync period
	Horizon     time.Duration // how long a lease is sized to last
	MinGap      time.Duration // the least time between two early syncs of a key
	FirstGap    time.Duration // the least time between two first-lease rounds
	PaceGap     time.Duration // sizes the grants of a paced key
	LeaseTTL    time.Duration // how long a bucket share lives without renewal
	DemandTTL   time.Duration // how long a node's reported demand counts
	IdleRelease time.Duration // how long an idle key keeps its lease
	Safety      time.Duration // how long before its expiry a share is dropped
	Epsilon     float64       // the cold-start allowance, a fraction of the limit
	NoColdStart bool          // no cold-start allowance
	Nodes       int           // the nodes to assume, at least
	Batch       int           // scripts per pipeline
	Timeout     time.Duration // bounds each pipeline, and each round of the loop
}

// Global configures a syncer's exchanges of the rules of global reach with
// the global store: hybrid.Config's Global and Region, with the period and
// bound the syncer derives from its Tuning.
type Global struct {
	Client   redis.UniversalClient // the global store
	Region   string                // this region's name there
	Interval time.Duration         // the period of the region's exchanges
	Timeout  time.Duration         // bounds each exchange with the global store
}

// GlobalStats are a syncer's exchanges with the global store: the rounds
// it led for its region (its exchanger's), those that failed, the keys the
// last one carried, and the smoothed round trip to the store.
type GlobalStats struct {
	Rounds, Failed, Keys int64
	RTT                  time.Duration
}

// Syncer exchanges leases with Redis for the keys of a hybrid limiter: it
// reports what each node admitted and brings back new leases, driven by
// need. It runs in its own goroutines (Start), or round by round (SyncAt,
// SyncFirstAt) for tests and simulations. It is safe for concurrent use. R
// is *syncer.Rule.
type Syncer[R any] interface {
	// Start runs the sync loop in goroutines until Close or Shutdown.
	// Calling it again, or after Close, does nothing.
	Start()
	// Close stops the loop and the Syncer's own clock, and waits for them.
	// It does not report what is unreported: Shutdown does. Idempotent.
	Close() error
	// Shutdown stops the loop, then, in one last round within ctx, reports
	// every key's unreported usage and gives its leases back, and closes the
	// Syncer. Idempotent.
	Shutdown(ctx context.Context) error
	// NodeID returns the node's name in Redis.
	NodeID() string
	// NoteOutage records that Redis is out of reach at node time now (µs),
	// the failure policy deciding: for a while after the last one, replies
	// in a window it touched grant nothing on top of use.
	NoteOutage(now int64)
	// NotePartial records that a Cluster master is out of reach at node
	// time now (µs) while the others answer, the failure policy deciding
	// its keys: for a while after the last one, replies to keys whose
	// exchange failed grant nothing on top of use in a window it touched.
	NotePartial(now int64)
	// Nodes returns the number of live nodes Redis counted, and at least
	// Tuning.Nodes.
	Nodes() int64
	// LeaseRule returns the hybrid form of a rule, or an error wrapping
	// ErrNotLeasable when its limit cannot be split into leases.
	LeaseRule(r R) (*lease.Rule, error)
	// SyncAt runs one round at node time now (µs).
	SyncAt(ctx context.Context, now int64) (RoundStats, error)
	// SyncFirstAt runs a first-lease round at node time now (µs): only the
	// keys that asked for their first lease, or for the correction of a
	// lease granted on a guess.
	SyncFirstAt(ctx context.Context, now int64) (RoundStats, error)
	// Wanted reports, and clears, whether a key asked for an early round
	// since the last call.
	Wanted() bool
	// WantedFirst reports, and clears, whether a key asked for a
	// first-lease round since the last call.
	WantedFirst() bool
	// GlobalStats returns the figures of the node's exchanges with the
	// global store (rules of global reach); zero without one.
	GlobalStats() GlobalStats
}

// RoundStats are one sync round's figures: what package hybrid takes into
// its metrics and traces, and what the module's tests and benchmarks read.
type RoundStats struct {
	Keys     int           // keys looked after (holding a lease or usage)
	Synced   int           // keys exchanged with Redis
	Failed   int           // keys whose exchange failed
	Took     time.Duration // the round's duration
	Err      error         // the round's error, wrapping syncer.ErrUnavailable or syncer.ErrRedis; nil if none
	Pipeline int           // pipelined exchanges
	// Carried is how many keys were due but left for the next round, the
	// round having run Timeout.
	Carried int
	// First reports a first-lease round, which looks only at the keys that
	// asked for one.
	First bool
	// Registered reports that the round registered the node as live (one
	// more script, every DemandTTL ÷ 2).
	Registered bool
}

// Observer receives what a Syncer does. Its methods are called from the
// sync loop, one at a time, and must not block.
type Observer interface {
	// Round reports a sync round.
	Round(RoundStats)
}

// Request is one rule of a central multi-rule decision. R is *syncer.Rule.
type Request[R any] struct {
	Rule R
	Key  string
	N    int64
}

// Charge is what a central multi-rule decision charged in Redis, to be
// refunded if the caller's own decision over other rules refuses.
type Charge interface {
	// Refund gives back what the decision charged: each rule's cost where
	// it is still there, as a refused multi-rule decision does.
	Refund(ctx context.Context) error
}

// The functions package syncer sets; internal/syncx gives their types.
var (
	// NewSyncer returns a Syncer, not yet running.
	NewSyncer any
	// ValidRuleName reports whether a name cannot name a rule.
	ValidRuleName any
	// NewRule returns the Redis form of a limit already validated.
	NewRule any
	// Digest and Keys name a user key in Redis.
	Digest, Keys any
	// AllowNAt is a Central's AllowN at a time passed to the script.
	AllowNAt any
	// AllowMulti and AllowMultiCharge decide Requests as one in Redis;
	// AllowMultiCharge also returns what it charged, for a refund.
	AllowMulti, AllowMultiCharge any
	// Preload loads every script into Redis.
	Preload any
)

// ErrNotLeasable, set by package syncer, is wrapped by the error of
// Syncer.LeaseRule for a limit that cannot be split into leases. It wraps
// syncer.ErrInvalidRule.
var ErrNotLeasable error
