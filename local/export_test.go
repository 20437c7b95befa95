package local

// Bounds and defaults, for the tests of package local_test.
const (
	MaxLogLimit       = maxLogLimit
	MaxWindow         = maxWindow
	MaxSubWindows     = maxSubWindows
	DefaultSubWindows = defaultSubWindows
)
