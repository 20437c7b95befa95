//go:build !race

package hybrid_test

const raceEnabled = false
