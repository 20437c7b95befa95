package local

import "time"

// Bounds and defaults, for the tests of package local_test.
const (
	MaxLogLimit       = maxLogLimit
	MaxWindow         = maxWindow
	MaxSubWindows     = maxSubWindows
	DefaultSubWindows = defaultSubWindows
)

// mustCompile is compile for a limit the test knows to be valid.
func mustCompile(p Limit) compiled {
	c, err := compile(p)
	if err != nil {
		panic(err)
	}
	return c
}

// allAlgorithms lists every algorithm, for the in-package tests (which
// cannot import internal/localx).
var allAlgorithms = []Algorithm{FixedWindow, SlidingWindowLog, SlidingWindowCounter, TokenBucket, LeakyBucket, GCRA, SubWindowCounter}

// CancelAt gives r back as Cancel does, at now: for the tests, whose
// times are their own.
func CancelAt(r *Reservation, now time.Time) { r.cancelAt(now) }
