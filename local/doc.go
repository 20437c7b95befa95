// Package local limits requests per key in one process, without Redis: six
// rate limiting algorithms and a sub-window counter, over a sharded table of
// keys that decides in nanoseconds without allocating. For one limit shared
// by a cluster of processes, use package hybrid, which runs these same
// algorithms locally and in Redis.
//
// # Limits and algorithms
//
// A Limit is an algorithm and its parameters, validated by New and
// SetLimit (or beforehand by Limit.Validate):
//
//	FixedWindow           Quota per Window, windows aligned to the epoch
//	SlidingWindowLog      at most Quota in any (t − Window, t]
//	SlidingWindowCounter  previous window weighted in, estimate + n ≤ Quota
//	TokenBucket           Quota per Window refill, Burst capacity
//	LeakyBucket           the same as a meter; Reserve and Wait shape with it
//	GCRA                  theoretical arrival time, Burst tolerance
//	SubWindowCounter      a count per sub-window, the last SubWindows within Quota
//
// Limit.Anchored starts a fixed window's or a sub-window counter's windows
// at each key's first request rather than on the clock.
//
// Every algorithm is a pure transition (state, now, cost) → (state',
// decision) over integers, time in microseconds, with comparisons
// cross-multiplied; the Redis implementation in package syncer reproduces it
// exactly. docs/algorithms.md gives each one's guarantees and error at window
// boundaries.
//
// # Limiter
//
// A Limiter applies one Limit per key. Methods come in pairs: AllowN reads
// the Limiter's Clock, AllowNAt takes the time, for tests and for callers
// that already have it. Decisions are values; a rejected request consumes
// nothing, and Decision.RetryAfter is honest: the same request at now +
// RetryAfter is admitted if nothing else consumes in between.
//
// AllowMultiAt decides several rules as one, all admitted or none charged.
//
// The table evicts keys once their state is back to the initial state and
// holds at most Config.MaxKeys; Config.Overflow says what happens beyond.
// Close stops the Limiter's goroutines.
//
// # What it does not export
//
// Package hybrid decides from the same algorithms and the same key table,
// and needs more of them than a user does: a limit's derived constants, the
// decision's word, multi-rule decisions that charge only when another
// condition holds. The module reaches those through its internal packages;
// this package exports only what a program limiting in one process uses.
package local
