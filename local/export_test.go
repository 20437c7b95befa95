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

// CheckMultiAt and AllowMultiIfAt are the multi-rule decisions package
// hybrid reaches through internal/localx, called directly here so that the
// allocation tests see through them.
func CheckMultiAt(now time.Time, reqs []Request, out []Decision) bool {
	return checkMultiAt(now, reqs, out)
}

func AllowMultiIfAt(now time.Time, reqs []Request, out []Decision, commit func() bool) bool {
	return allowMultiIfAt(now, reqs, out, commit)
}
