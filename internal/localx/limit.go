package localx

import (
	"time"

	"github.com/hybridlimit/hybridlimit/internal/localhook"
	"github.com/hybridlimit/hybridlimit/local"
)

// derive is package local's validation of a Limit, set when local loads.
var derive = localhook.Derive.(func(local.Limit) (localhook.Derived, error))

// Limit is a validated local.Limit with the constants its decisions use:
// what the leases, the Redis scripts and the policies take. The zero Limit
// is not valid.
type Limit struct {
	p local.Limit
	d localhook.Derived
}

// NewLimit validates p as package local does (the error wraps
// local.ErrInvalidConfig) and returns it compiled.
func NewLimit(p local.Limit) (Limit, error) {
	d, err := derive(p)
	if err != nil {
		return Limit{}, err
	}
	p.Burst, p.SubWindows = d.Burst, d.SubWindows
	return Limit{p: p, d: d}, nil
}

// MustLimit is like NewLimit but panics on an invalid p, for tests and
// constant limits.
func MustLimit(p local.Limit) Limit {
	l, err := NewLimit(p)
	if err != nil {
		panic(err)
	}
	return l
}

// Params returns the limit, with Burst and SubWindows' defaults filled in.
func (l Limit) Params() local.Limit { return l.p }

// Algorithm returns l's algorithm.
func (l Limit) Algorithm() local.Algorithm { return l.p.Algorithm }

// Quota returns the requests admitted per window (the rate, for the bucket
// algorithms).
func (l Limit) Quota() int64 { return l.p.Quota }

// Window returns the window, or the period of the rate.
func (l Limit) Window() time.Duration { return l.p.Window }

// Burst returns the bucket algorithms' capacity, 0 for the others.
func (l Limit) Burst() int64 { return l.p.Burst }

// SubWindows returns the sub-window counter's sub-windows, 0 for the others.
func (l Limit) SubWindows() int64 { return l.p.SubWindows }

// Anchored reports whether l's windows start at each key's first request.
func (l Limit) Anchored() bool { return l.p.Anchored }

// MaxCost returns the most a single request may cost: the quota for the
// window algorithms, the burst for the bucket algorithms.
func (l Limit) MaxCost() int64 { return l.d.MaxCost }

// Counter returns the sliding window counter's step in µs and steps per
// window, or the sub-window counter's sub-window in µs and SubWindows;
// zeros for the other algorithms.
func (l Limit) Counter() (stepMicros, steps int64) { return l.d.Step, l.d.Steps }

// Emission returns the bucket algorithms' rate reduced to lowest terms (one
// request per intervalMicros/per µs) and Burst × intervalMicros; zeros for
// the window algorithms.
func (l Limit) Emission() (per, intervalMicros, tolerance int64) {
	return l.d.Per, l.d.Interval, l.d.Tolerance
}

// Valid reports whether l was built by NewLimit.
func (l Limit) Valid() bool { return l.d.MaxCost > 0 }

// String describes l as local.Limit.String does.
func (l Limit) String() string { return l.p.String() }

// Algorithms lists every algorithm, in the order of their constants.
func Algorithms() []local.Algorithm {
	return []local.Algorithm{local.FixedWindow, local.SlidingWindowLog, local.SlidingWindowCounter,
		local.TokenBucket, local.LeakyBucket, local.GCRA, local.SubWindowCounter}
}
