// Package synchook carries what package syncer does for the module's other
// packages but does not export: the hybrid mode's syncer, central decisions
// at a given time and over several rules, and the names of keys. Package
// syncer sets the variables when it loads, each to a function of its own
// types; package internal/syncx, which imports syncer, asserts their types
// once and offers them typed. This package cannot import syncer: the types
// that name syncer's take it as a type parameter (R is *syncer.Rule).
package synchook

import (
	"time"
)

// RoundStats are one sync round's figures: what package hybrid takes into
// its metrics and traces, and what the module's tests and benchmarks read.
type RoundStats struct {
	Keys     int           // keys looked after (holding a lease or usage)
	Synced   int           // keys exchanged with Redis
	Failed   int           // keys whose exchange failed
	Took     time.Duration // the round's duration
	Err      error         // the round's error, wrapping syncer.ErrUnavailable or syncer.ErrRedis; nil if none
	Pipeline int           // pipelined exchanges
	// Carried is how many keys were due but left for the next round, the
	// round having run Timeout.
	Carried int
	// First reports a first-lease round, which looks only at the keys that
	// asked for one.
	First bool
	// Registered reports that the round registered the node as live (one
	// more script, every DemandTTL ÷ 2).
	Registered bool
}

// Observer receives what a syncer does. Its methods are called from the
// sync loop, one at a time, and must not block.
type Observer interface {
	// Round reports a sync round.
	Round(RoundStats)
}
