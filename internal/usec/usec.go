// Package usec holds the integer helpers the limiters share for time kept
// in microseconds.
package usec

import "time"

// Duration returns us µs as a Duration.
func Duration(us int64) time.Duration { return time.Duration(us) * time.Microsecond }

// CeilDiv is ⌈a/b⌉ for a ≥ 0, b > 0. A bucket's rl is 1 for most rates (a
// whole number of µs per token), and a division is the slowest instruction
// on a decision's path: skip it.
func CeilDiv(a, b int64) int64 {
	if b == 1 {
		return a
	}
	return (a + b - 1) / b
}
