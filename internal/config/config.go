// Package config holds the defaults and the bounds of validation that more
// than one package of the module uses. Each package names its own
// unexported constant after one of these, and docs/operating.md's Defaults
// table quotes that constant: the values live here once.
package config

import (
	"fmt"
	"time"
)

// Defaults.
const (
	// ClockResolution is the resolution of the coarse clock a local or
	// hybrid Limiter, or a Syncer, starts when given no Clock.
	ClockResolution = time.Millisecond
	// SweepInterval is how often a Limiter forgets the keys back in their
	// initial state.
	SweepInterval = time.Minute
	// KeyPrefix starts every Redis key when a Keyspace's Prefix is empty.
	KeyPrefix = "hl"
	// Timeout bounds a call to Redis: a central decision, a Ping.
	Timeout = 250 * time.Millisecond
	// Epsilon is the cold-start allowance of a hybrid key: ε × limit ÷
	// nodes per node.
	Epsilon = 0.05
)

// Bounds of validation.
const (
	// MaxProduct bounds the products of a limit's parameters (Limit ×
	// window steps, Burst × emission interval), so that sums of two, and
	// the quotients the algorithms take of them, are exact in the doubles
	// Redis's Lua computes in (exact below 2^53).
	MaxProduct = 1 << 51
	// MaxWindow is the longest window a limit takes: 366 days.
	MaxWindow = 366 * 24 * time.Hour
	// MaxRuleName is the longest rule name, in bytes.
	MaxRuleName = 128
)

// Invalid returns the error of a bad Config field in the form every
// package's takes, "<pkg>: invalid config: <Field> <value>: <reason>",
// wrapping the package's sentinel (its ErrInvalidConfig). It is a
// *FieldError, for the packages that report the field in their own terms.
func Invalid(sentinel error, field string, value any, reason string) error {
	return &FieldError{Sentinel: sentinel, Field: field, Value: value, Reason: reason}
}

// FieldError is a bad field of a configuration or a limit.
type FieldError struct {
	Sentinel error  // the package's ErrInvalidConfig
	Field    string // the field's name, as the package's type spells it
	Value    any    // the value refused
	Reason   string // why, for example "must be positive"
}

func (e *FieldError) Error() string {
	return fmt.Sprintf("%v: %s %v: %s", e.Sentinel, e.Field, e.Value, e.Reason)
}

// Unwrap returns the sentinel, for errors.Is.
func (e *FieldError) Unwrap() error { return e.Sentinel }
