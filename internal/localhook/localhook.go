// Package localhook carries what package local computes for the module's
// other packages but does not export: a limit's derived constants. Package
// local sets Derive when it loads, to a function of its own types; package
// internal/localx, which imports local, asserts its type once and offers it
// typed. This package cannot import local.
package localhook

// Derived is what a valid limit's decisions use beyond its fields, as
// package local computes it.
type Derived struct {
	// Burst and SubWindows are the limit's, defaults filled in.
	Burst, SubWindows int64
	// MaxCost is the most a single request may cost: the quota for the
	// window algorithms, the burst for the bucket algorithms.
	MaxCost int64
	// Step and Steps are the sliding window counter's weighting step in µs
	// and steps per window, or the sub-window counter's sub-window in µs
	// and SubWindows; zero for the other algorithms.
	Step, Steps int64
	// Per, Interval and Tolerance are the bucket algorithms' rate reduced to
	// lowest terms (one request per Interval/Per µs) and Burst × Interval;
	// zero for the window algorithms.
	Per, Interval, Tolerance int64
}

// Derive validates a local.Limit and returns what it derives: a
// func(local.Limit) (Derived, error), set by package local (see
// internal/localx).
var Derive any
