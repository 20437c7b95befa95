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
	// Decision is the outcome of one request, returned by value
	// (local.Decision). Its Capacity method is the most a single request may
	// cost under the rule: Limit.Quota for the window algorithms, the
	// burst for the buckets; in hybrid mode always the rule's, never a
	// lease's. Its Reason is a local.Reason: Allowed, RetryAfter and
	// Degraded are what a caller usually needs.
	Decision = local.Decision
	// Keyspace names the Redis keys (syncer.Keyspace), for Config.Keyspace.
	Keyspace = syncer.Keyspace
)

// The algorithms; see local.Algorithm for each one's semantics.
const (
	FixedWindow          = local.FixedWindow          // counts per window aligned to the clock
	SlidingWindowLog     = local.SlidingWindowLog     // exact, a log of requests; a Hybrid rule of it runs Central
	SlidingWindowCounter = local.SlidingWindowCounter // weights the previous window's count
	TokenBucket          = local.TokenBucket          // refills Quota per Window up to Burst
	LeakyBucket          = local.LeakyBucket          // drains Quota per Window from a bucket of Burst
	GCRA                 = local.GCRA                 // a theoretical arrival time, within Burst intervals
	SubWindowCounter     = local.SubWindowCounter     // a count per sub-window, the last SubWindows within Quota
)
