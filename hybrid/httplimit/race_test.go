//go:build race

package httplimit_test

// raceEnabled reports a build with the race detector, whose allocations
// spoil the figures some tests hold.
const raceEnabled = true
