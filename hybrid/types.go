package hybrid

import (
	"github.com/hybridlimit/hybridlimit/local"
	"github.com/hybridlimit/hybridlimit/syncer"
)

// The names a user of the Limiter needs, so that the common case imports
// hybrid alone. Package local (the algorithms, a Limiter without Redis) and
// package syncer (central decisions without a Limiter) stay usable directly.
type (
	// Limit is a rule's limit (local.Limit): Quota requests per Window by
	// an Algorithm, and for the bucket algorithms a Burst. Register and
	// SetLimit validate it.
	Limit = local.Limit
	// Algorithm is a Limit's algorithm (local.Algorithm).
	Algorithm = local.Algorithm
	// Decision is the outcome of one request, returned by value
	// (local.Decision). Its Capacity method is the most a single request may
	// cost under the rule: Limit.Quota for the window algorithms, the
	// burst for the buckets; in hybrid mode always the rule's, never a
	// lease's.
	Decision = local.Decision
	// Reason tells why a request was decided as it was (local.Reason).
	Reason = local.Reason
	// Clock tells the time (local.Clock), for Config.Clock.
	Clock = local.Clock
	// Keyspace names the Redis keys (syncer.Keyspace), for Config.Keyspace.
	Keyspace = syncer.Keyspace
)

// The algorithms; see local.Algorithm for each one's semantics.
const (
	FixedWindow          = local.FixedWindow          // counts per window aligned to the clock
	SlidingWindowLog     = local.SlidingWindowLog     // exact, a log of requests; a Hybrid rule of it runs Central
	SlidingWindowCounter = local.SlidingWindowCounter // weights the previous window's count
	TokenBucket          = local.TokenBucket          // refills Limit per Window up to Burst
	LeakyBucket          = local.LeakyBucket          // drains Limit per Window from a bucket of Burst
	GCRA                 = local.GCRA                 // a theoretical arrival time, within Burst intervals
	SubWindowCounter     = local.SubWindowCounter     // a count per sub-window, the last SubWindows within Limit
)

// The reasons of a Decision; see local.Reason for each one.
const (
	ReasonOK          = local.ReasonOK          // admitted
	ReasonLimited     = local.ReasonLimited     // the limit is reached; retry after RetryAfter
	ReasonCostTooHigh = local.ReasonCostTooHigh // the cost is above what the rule can ever admit
	ReasonInvalidCost = local.ReasonInvalidCost // the cost is negative
	ReasonOverflow    = local.ReasonOverflow    // a new key, and the key table is full
	ReasonNoLease     = local.ReasonNoLease     // hybrid: the request waited for its key's lease (Rule.Wait), and its context ended first
	ReasonUnavailable = local.ReasonUnavailable // Redis could not decide; the failure policy did
)
