package local_test

import (
	"errors"
	"fmt"
	"time"

	"github.com/hybridlimit/hybridlimit/local"
)

// The examples pass every time in (AllowNAt, ReserveAt,
// AllowMultiAt), so their output is fixed. A Limiter driven only by given
// times needs no clock goroutine and no background sweeper (which would sweep
// at the real time); this Config turns both off.
var exampleConfig = local.Config{Clock: wallClock{}, NoBackgroundSweep: true}

// wallClock is a Clock that calls time.Now: unlike a Limiter's default
// clock, it runs no goroutine.
type wallClock struct{}

func (wallClock) Now() time.Time { return time.Now() }

// A Limit is validated where it is used (New, SetLimit) or beforehand by
// Validate; its String fills in the defaults.
func ExampleLimit() {
	lim := local.Limit{
		Algorithm: local.TokenBucket,
		Quota:     100, // tokens refilled per Window
		Window:    time.Minute,
		Burst:     20, // bucket capacity
	}
	fmt.Println(lim, lim.Validate())
	fmt.Println(local.Limit{Algorithm: local.GCRA, Quota: 5, Window: 2 * time.Second})
	// Output:
	// token_bucket 100/1m burst 20 <nil>
	// gcra 5/2s burst 5
}

func ExampleLimit_Validate() {
	err := local.Limit{
		Algorithm: local.FixedWindow,
		Quota:     10,
		Window:    time.Second,
		Burst:     5, // only the bucket algorithms take a burst
	}.Validate()
	fmt.Println(err)
	fmt.Println(errors.Is(err, local.ErrInvalidConfig))
	// Output:
	// local: invalid config: Burst 5: only the bucket algorithms take a burst
	// true
}

// A token bucket admits a burst at once, then the refill rate. A rejected
// request consumes nothing, and RetryAfter says when the same request will
// be admitted.
func ExampleLimiter_AllowNAt() {
	lim := local.Limit{Algorithm: local.TokenBucket, Quota: 10, Window: time.Second, Burst: 10}
	l, err := local.New(lim, exampleConfig)
	if err != nil {
		panic(err)
	}
	defer l.Close()

	now := time.Date(2023, time.November, 15, 0, 0, 0, 0, time.UTC)
	for i := range 3 {
		d := l.AllowNAt(now, "upload:alice", 4) // each request costs 4 tokens
		fmt.Printf("request %d: allowed %t, remaining %d, retry after %v\n", i+1, d.Allowed(), d.Remaining(), d.RetryAfter())
	}
	d := l.AllowNAt(now.Add(200*time.Millisecond), "upload:alice", 4)
	fmt.Printf("200ms later: allowed %t, remaining %d\n", d.Allowed(), d.Remaining())
	// Output:
	// request 1: allowed true, remaining 6, retry after 0s
	// request 2: allowed true, remaining 2, retry after 0s
	// request 3: allowed false, remaining 2, retry after 200ms
	// 200ms later: allowed true, remaining 0
}

// The sliding window log at 3 requests per minute: a request is admitted
// while the admitted requests in the last minute, (t − 1m, t], number fewer
// than 3.
func ExampleLimiter_AllowNAt_slidingWindowLog() {
	lim := local.Limit{Algorithm: local.SlidingWindowLog, Quota: 3, Window: time.Minute}
	l, err := local.New(lim, exampleConfig)
	if err != nil {
		panic(err)
	}
	defer l.Close()

	start := time.Date(2023, time.November, 15, 0, 0, 0, 0, time.UTC)
	for _, s := range []int{1, 2, 3, 60, 61} {
		d := l.AllowNAt(start.Add(time.Duration(s)*time.Second), "alice", 1)
		if d.Allowed() {
			fmt.Printf("at %2ds: allowed, remaining %d\n", s, d.Remaining())
		} else {
			fmt.Printf("at %2ds: %s, retry after %v\n", s, d.Reason(), d.RetryAfter())
		}
	}
	// Output:
	// at  1s: allowed, remaining 2
	// at  2s: allowed, remaining 1
	// at  3s: allowed, remaining 0
	// at 60s: limited, retry after 1s
	// at 61s: allowed, remaining 0
}

// A user is held to 2 requests per second and 3 per minute at once. A request
// refused by either rule charges neither.
func ExampleAllowMultiAt() {
	perSecond, err := local.New(local.Limit{Algorithm: local.SlidingWindowLog, Quota: 2, Window: time.Second}, exampleConfig)
	if err != nil {
		panic(err)
	}
	defer perSecond.Close()
	perMinute, err := local.New(local.Limit{Algorithm: local.FixedWindow, Quota: 3, Window: time.Minute}, exampleConfig)
	if err != nil {
		panic(err)
	}
	defer perMinute.Close()

	reqs := []local.Request{
		{Limiter: perSecond, Key: "alice", N: 1},
		{Limiter: perMinute, Key: "alice", N: 1},
	}
	out := make([]local.Decision, len(reqs)) // reuse it: AllowMultiAt does not allocate
	start := time.Date(2023, time.November, 15, 0, 0, 0, 0, time.UTC)
	for _, ms := range []int{0, 100, 200, 1000, 2000} {
		ok := local.AllowMultiAt(start.Add(time.Duration(ms)*time.Millisecond), reqs, out)
		fmt.Printf("at %4dms: allowed %-5t per second: %-7s per minute: %s\n", ms, ok, out[0].Reason(), out[1].Reason())
	}
	// Output:
	// at    0ms: allowed true  per second: ok      per minute: ok
	// at  100ms: allowed true  per second: ok      per minute: ok
	// at  200ms: allowed false per second: limited per minute: ok
	// at 1000ms: allowed true  per second: ok      per minute: ok
	// at 2000ms: allowed false per second: ok      per minute: limited
}

// Reserve uses a bucket as a shaper: a request the bucket is short for is
// scheduled later, at the limit's rate, instead of rejected.
func ExampleLimiter_ReserveAt() {
	lim := local.Limit{Algorithm: local.LeakyBucket, Quota: 4, Window: time.Second, Burst: 1}
	l, err := local.New(lim, exampleConfig)
	if err != nil {
		panic(err)
	}
	defer l.Close()

	now := time.Date(2023, time.November, 15, 0, 0, 0, 0, time.UTC)
	for i := range 5 {
		r, err := l.ReserveAt(now, "job", 1, 600*time.Millisecond)
		if err != nil {
			panic(err)
		}
		if r.OK {
			fmt.Printf("request %d: act after %v\n", i+1, r.Delay)
		} else {
			fmt.Printf("request %d: %s, nothing consumed\n", i+1, r.Reason)
		}
	}
	// Output:
	// request 1: act after 0s
	// request 2: act after 250ms
	// request 3: act after 500ms
	// request 4: limited, nothing consumed
	// request 5: limited, nothing consumed
}

// SetLimit changes the limit of every key without forgetting what the keys
// have consumed.
func ExampleLimiter_SetLimit() {
	l, err := local.New(local.Limit{Algorithm: local.FixedWindow, Quota: 10, Window: time.Minute}, exampleConfig)
	if err != nil {
		panic(err)
	}
	defer l.Close()

	now := time.Date(2023, time.November, 15, 0, 0, 0, 0, time.UTC)
	d := l.AllowNAt(now, "alice", 6)
	fmt.Printf("10/min: remaining %d\n", d.Remaining())

	if err := l.SetLimit(local.Limit{Algorithm: local.FixedWindow, Quota: 8, Window: time.Minute}); err != nil {
		panic(err)
	}
	d = l.AllowNAt(now.Add(time.Second), "alice", 0) // cost 0 asks without consuming
	fmt.Printf("8/min: remaining %d\n", d.Remaining())
	// Output:
	// 10/min: remaining 4
	// 8/min: remaining 2
}

// MaxKeys caps the keys a Limiter holds; Overflow decides what happens to
// requests for new keys when every key held is still in use.
func ExampleConfig() {
	lim := local.Limit{Algorithm: local.FixedWindow, Quota: 1, Window: time.Minute}
	now := time.Date(2023, time.November, 15, 0, 0, 0, 0, time.UTC)
	for _, policy := range []struct {
		name string
		o    local.Overflow
	}{{"reject", local.OverflowReject}, {"allow", local.OverflowAllow}, {"shared", local.OverflowShared}} {
		l, err := local.New(lim, local.Config{
			Shards:            1,
			MaxKeys:           1,
			Overflow:          policy.o,
			Clock:             wallClock{},
			NoBackgroundSweep: true,
		})
		if err != nil {
			panic(err)
		}
		fmt.Printf("%-6s", policy.name)
		for _, key := range []string{"alice", "bob", "carol"} {
			d := l.AllowNAt(now, key, 1)
			fmt.Printf("  %s: %-5t %-8s", key, d.Allowed(), d.Reason())
		}
		fmt.Printf("  overflows: %d\n", l.Stats().Overflows)
		l.Close()
	}
	// Output:
	// reject  alice: true  ok        bob: false overflow  carol: false overflow  overflows: 2
	// allow   alice: true  ok        bob: true  overflow  carol: true  overflow  overflows: 2
	// shared  alice: true  ok        bob: true  overflow  carol: false overflow  overflows: 2
}
