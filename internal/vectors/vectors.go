// Package vectors holds the decision vectors every implementation of an
// algorithm must reproduce exactly: the Go one in package local and the Lua
// one in package syncer. Each case is a limit and a sequence of requests on
// one key starting from the initial state; each step lists the decision
// expected. The figures were worked out by hand from the algorithms'
// definitions (docs/algorithms.md), worked examples included.
package vectors

import (
	"math"
	"time"

	"github.com/hybridlimit/hybridlimit/internal/localx"
	"github.com/hybridlimit/hybridlimit/internal/usec"
	"github.com/hybridlimit/hybridlimit/local"
)

// Base is the time, in µs since the Unix epoch, that step times count from:
// 2023-11-15T00:00:00Z, a multiple of every window the cases use, so window
// boundaries fall on round offsets.
const Base int64 = 1_700_006_400_000_000

// Case is one limit and the requests made under it, on a single key.
type Case struct {
	Name   string
	Params local.Limit
	Steps  []Step
}

// Step is one request: its time (µs after Base), cost, and the decision
// expected.
type Step struct {
	At   int64
	N    int64
	Want local.Decision
}

// S converts seconds to µs.
func S(sec float64) int64 { return int64(math.Round(sec * 1e6)) }

func d(sec float64) time.Duration { return time.Duration(math.Round(sec * 1e9)) }

// ok is an admission.
func ok(limit, remaining int64, reset time.Duration) local.Decision {
	return localx.Outcome{Allowed: true, Capacity: limit, Remaining: remaining, ResetAfter: reset}.Decision()
}

// no is a rejection for the limit.
func no(limit, remaining int64, reset, retry time.Duration) local.Decision {
	return localx.Outcome{Reason: local.ReasonLimited, Capacity: limit, Remaining: remaining, ResetAfter: reset, RetryAfter: retry}.Decision()
}

// tooHigh is a rejection of a cost above what the limit ever admits.
func tooHigh(limit int64) local.Decision {
	return localx.Outcome{Reason: local.ReasonCostTooHigh, Capacity: limit}.Decision()
}

// Cases are the vectors.
var Cases = []Case{
	{
		// 000: "rate limit = 3 request / minute. 3 requests come in the first
		// minute at 0.4, 0.7, 0.8, 3 more in the second at 1.4, 1.5, 1.6" —
		// all six are admitted, five of them within [0.7, 1.7) minutes.
		Name:   "fixed window: boundary burst of the 000 article",
		Params: local.Limit{Algorithm: local.FixedWindow, Quota: 3, Window: time.Minute},
		Steps: []Step{
			{S(24), 1, ok(3, 2, d(36))},
			{S(42), 1, ok(3, 1, d(18))},
			{S(48), 1, ok(3, 0, d(12))},
			{S(50), 1, no(3, 0, d(10), d(10))},
			{S(84), 1, ok(3, 2, d(36))},
			{S(90), 1, ok(3, 1, d(30))},
			{S(96), 1, ok(3, 0, d(24))},
			{S(96), 0, ok(3, 0, d(24))}, // cost 0 asks without consuming
			{S(100), 4, tooHigh(3)},
			{S(120) - 1, 1, no(3, 0, usec.Duration(1), usec.Duration(1))}, // 1µs before the edge
			{S(120), 1, ok(3, 2, d(60))},                                  // exactly at the edge
			{S(100), 1, ok(3, 1, d(60))},                                  // time backwards: clamped to the window start
			{S(120), 3, no(3, 1, d(60), d(60))},
			{S(120), 1, ok(3, 0, d(60))}, // cost equal to the remaining
		},
	},
	{
		// 004: "5 requests at 11:00:59 and 5 more at 11:01:00 ... 10 requests
		// in less than one minute".
		Name:   "fixed window: twice the limit across a boundary (004 article)",
		Params: local.Limit{Algorithm: local.FixedWindow, Quota: 5, Window: time.Minute},
		Steps: []Step{
			{S(59), 5, ok(5, 0, d(1))},
			{S(60), 5, ok(5, 0, d(60))},
			{S(60.5), 1, no(5, 0, d(59.5), d(59.5))},
		},
	},
	{
		// 000: 3 per minute; "request #5 [at 61] is rejected, even if in
		// interval [2,61], there are only 2 accepted requests" — rejected
		// requests are not logged here, so it is admitted.
		Name:   "sliding window log: the 000 article at 3 per minute",
		Params: local.Limit{Algorithm: local.SlidingWindowLog, Quota: 3, Window: time.Minute},
		Steps: []Step{
			{S(1), 1, ok(3, 2, d(60))},
			{S(2), 1, ok(3, 1, d(60))},
			{S(3), 1, ok(3, 0, d(60))},
			{S(60), 1, no(3, 0, d(3), d(1))}, // (0, 60] holds 1, 2, 3; 1 leaves at 61
			{S(61), 1, ok(3, 0, d(60))},      // (1, 61] holds 2, 3
			{S(63), 1, ok(3, 1, d(60))},      // (3, 63] holds 61
			{S(63), 2, no(3, 1, d(60), d(58))},
			{S(121), 2, ok(3, 0, d(60))},        // (61, 121] holds 63
			{S(123), 1, ok(3, 0, d(60))},        // 63 is out exactly at 123: (63, 123]
			{S(100), 1, no(3, 0, d(60), d(58))}, // time backwards: clamped to 123
			{S(123), 4, tooHigh(3)},
		},
	},
	{
		// 000: "9 requests in [00:00, 00:01) and 5 in [00:01, 00:02) so far.
		// For a request at 00:01:15: 9 × (60−15)/60 + 5 = 11.75."
		Name:   "sliding window counter: 9 × 45/60 + 5 = 11.75 (000 article)",
		Params: local.Limit{Algorithm: local.SlidingWindowCounter, Quota: 20, Window: time.Minute},
		Steps: []Step{
			{S(10), 9, ok(20, 11, d(110))},
			{S(60), 5, ok(20, 6, d(120))},       // edge: 9 × 60/60 + 5 = 14
			{S(75), 0, ok(20, 8, d(105))},       // 11.75: 8.25 left
			{S(75), 9, no(20, 8, d(105), d(5))}, // 11.75 + 9 > 20; at 80s 9 × 40/60 + 5 + 9 = 20
			{S(80), 9, ok(20, 0, d(100))},
			{S(119.99), 1, ok(20, 4, d(60.01))}, // 9 × 1/6000 + 15 = 15.0015
			{S(120), 1, ok(20, 4, d(120))},      // edge: 15 × 60/60 + 1
			{S(100), 1, ok(20, 3, d(120))},      // time backwards: clamped to 120
			{S(130), 17, no(20, 5, d(110), d(46))},
			{S(130), 19, no(20, 5, d(110), d(80))}, // cur + n > limit: wait for the next window
			{S(130), 21, tooHigh(20)},
		},
	},
	{
		// 003: "Previous minute had 70 requests, current minute has 20 so
		// far, 30% into the current minute: 20 + 70 × 0.70 = 69."
		Name:   "sliding window counter: 20 + 70 × 0.7 = 69 (003 article)",
		Params: local.Limit{Algorithm: local.SlidingWindowCounter, Quota: 100, Window: time.Minute},
		Steps: []Step{
			{S(30), 70, ok(100, 30, d(90))},
			{S(60), 20, ok(100, 10, d(120))},
			{S(78), 0, ok(100, 31, d(102))},         // 69
			{S(78), 31, ok(100, 0, d(102))},         // 69 + 31 = 100
			{S(78), 1, no(100, 0, d(102), d(0.86))}, // 70 × 4114/6000 + 52 ≤ 100 from step 1886
		},
	},
	{
		// 003: the window cut into sub-windows, each with its own counter;
		// admitted while the last six counters plus n stay within the limit.
		Name:   "sub-window counter: 10 per minute in 6 sub-windows of 10s",
		Params: local.Limit{Algorithm: local.SubWindowCounter, Quota: 10, Window: time.Minute, SubWindows: 6},
		Steps: []Step{
			{S(5), 4, ok(10, 6, d(55))},
			{S(15), 3, ok(10, 3, d(55))},
			{S(25), 4, no(10, 3, d(45), d(35))}, // [0, 10) counts 4 until 60
			{S(25), 3, ok(10, 0, d(55))},
			{S(60) - 1, 1, no(10, 0, d(20)+usec.Duration(1), usec.Duration(1))},
			{S(60), 1, ok(10, 3, d(60))}, // [0, 10) left at 60: 3 + 3 + 1
			{S(60), 0, ok(10, 3, d(60))},
			{S(50), 1, ok(10, 2, d(60))}, // time backwards: clamped to the newest sub-window, 60
			{S(60), 11, tooHigh(10)},
			{S(200), 10, ok(10, 0, d(60))},
		},
	},
	{
		// One sub-window is the fixed window (004 above).
		Name:   "sub-window counter: one sub-window is the fixed window",
		Params: local.Limit{Algorithm: local.SubWindowCounter, Quota: 5, Window: time.Minute, SubWindows: 1},
		Steps: []Step{
			{S(59), 5, ok(5, 0, d(1))},
			{S(60), 5, ok(5, 0, d(60))},
			{S(60.5), 1, no(5, 0, d(59.5), d(59.5))},
		},
	},
	{
		// 000's counter with a timestamp: a window starts at the first
		// request after the last one ended.
		Name:   "fixed window anchored at the first request",
		Params: local.Limit{Algorithm: local.FixedWindow, Quota: 3, Window: time.Minute, Anchored: true},
		Steps: []Step{
			{S(10), 0, ok(3, 3, 0)}, // asking starts no window
			{S(24), 1, ok(3, 2, d(60))},
			{S(42), 2, ok(3, 0, d(42))},
			{S(60), 1, no(3, 0, d(24), d(24))}, // the window is [24, 84)
			{S(84) - 1, 1, no(3, 0, usec.Duration(1), usec.Duration(1))},
			{S(84), 1, ok(3, 2, d(60))},
			{S(100), 0, ok(3, 2, d(44))},
			{S(80), 1, ok(3, 1, d(60))}, // time backwards: clamped to the window start, 84
			{S(300), 3, ok(3, 0, d(60))},
			{S(300), 4, tooHigh(3)},
		},
	},
	{
		// Sub-windows of 20s on a grid anchored at 7s, then at 130s.
		Name:   "sub-window counter anchored at the first request",
		Params: local.Limit{Algorithm: local.SubWindowCounter, Quota: 4, Window: time.Minute, SubWindows: 3, Anchored: true},
		Steps: []Step{
			{S(7), 2, ok(4, 2, d(60))},
			{S(30), 1, ok(4, 1, d(57))},       // in [27, 47)
			{S(66), 2, no(4, 1, d(21), d(1))}, // in [47, 67): [7, 27) counts 2 until 67
			{S(67), 2, ok(4, 1, d(60))},       // in [67, 87)
			{S(127), 0, ok(4, 4, 0)},          // the window is empty
			{S(130), 1, ok(4, 3, d(60))},      // a new grid, from 130
			{S(150) - 1, 3, ok(4, 0, d(40)+usec.Duration(1))},
			{S(150), 1, no(4, 0, d(40), d(40))},
		},
	},
	{
		// 002: "a capacity of 10 and a refill rate of 2/second allows a burst
		// of 10 requests followed by a sustained rate of 2 requests/second."
		Name:   "token bucket: capacity 10 refilled at 2 per second (002 article)",
		Params: local.Limit{Algorithm: local.TokenBucket, Quota: 2, Window: time.Second, Burst: 10},
		Steps: []Step{
			{0, 1, ok(10, 9, d(0.5))},
			{0, 1, ok(10, 8, d(1))},
			{0, 1, ok(10, 7, d(1.5))},
			{0, 1, ok(10, 6, d(2))},
			{0, 1, ok(10, 5, d(2.5))},
			{0, 1, ok(10, 4, d(3))},
			{0, 1, ok(10, 3, d(3.5))},
			{0, 1, ok(10, 2, d(4))},
			{0, 1, ok(10, 1, d(4.5))},
			{0, 1, ok(10, 0, d(5))},
			{0, 1, no(10, 0, d(5), d(0.5))},
			{S(0.5), 1, ok(10, 0, d(5))},
			{S(0.75), 1, no(10, 0, d(4.75), d(0.25))},
			{S(3), 5, ok(10, 0, d(5))},
			{S(100), 10, ok(10, 0, d(5))},
			{S(100), 11, tooHigh(10)},
			{S(99), 1, no(10, 0, d(5), d(0.5))}, // time backwards: clamped to TAT − τ = 100s
		},
	},
	{
		Name:   "leaky bucket (meter): capacity 4 draining 1 per second",
		Params: local.Limit{Algorithm: local.LeakyBucket, Quota: 1, Window: time.Second, Burst: 4},
		Steps: []Step{
			{0, 3, ok(4, 1, d(3))},
			{0, 2, no(4, 1, d(3), d(1))},
			{S(1), 2, ok(4, 0, d(4))}, // cost equal to the room left
			{S(1.5), 1, no(4, 0, d(3.5), d(0.5))},
			{S(2), 1, ok(4, 0, d(4))},
			{S(10), 0, ok(4, 4, 0)}, // drained: back to the initial state
		},
	},
	{
		// 001, L = 1: "if t − s < P the request must be limited".
		Name:   "GCRA: L = 1, P = 1s (001 article)",
		Params: local.Limit{Algorithm: local.GCRA, Quota: 1, Window: time.Second},
		Steps: []Step{
			{0, 1, ok(1, 0, d(1))},
			{S(0.5), 1, no(1, 0, d(0.5), d(0.5))},
			{S(1), 1, ok(1, 0, d(1))},
			{S(2) - 1, 1, no(1, 0, usec.Duration(1), usec.Duration(1))},
			{S(2), 1, ok(1, 0, d(1))},
		},
	},
	{
		// 001, L > 1: TAT' = max(TAT, t) + P/L; limited iff TAT' − t > P.
		Name:   "GCRA: L = 3, P = 3s (001 article)",
		Params: local.Limit{Algorithm: local.GCRA, Quota: 3, Window: 3 * time.Second},
		Steps: []Step{
			{0, 1, ok(3, 2, d(1))},
			{0, 1, ok(3, 1, d(2))},
			{0, 1, ok(3, 0, d(3))},
			{0, 1, no(3, 0, d(3), d(1))},  // TAT' = 4 > 0 + 3
			{S(1.5), 1, ok(3, 0, d(2.5))}, // TAT' = max(3, 1.5) + 1 = 4; 4 − 1.5 ≤ 3
			{S(10), 3, ok(3, 0, d(3))},
		},
	},
	{
		// An emission interval that is not a whole number of µs: 1/3 s.
		Name:   "GCRA: 3 per second, interval 333333⅓ µs",
		Params: local.Limit{Algorithm: local.GCRA, Quota: 3, Window: time.Second},
		Steps: []Step{
			{0, 1, ok(3, 2, usec.Duration(333334))},
			{0, 1, ok(3, 1, usec.Duration(666667))},
			{0, 1, ok(3, 0, d(1))},
			{0, 1, no(3, 0, d(1), usec.Duration(333334))},
			{333333, 1, no(3, 0, usec.Duration(666667), usec.Duration(1))},
			{333334, 1, ok(3, 0, d(1))},
		},
	},
}
