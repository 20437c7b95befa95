// Package simhook carries a hybrid.Limiter's simulation controls (rounds
// run by the caller, Redis's scripts on the Limiter's clock) to the
// module's tests and benchmarks, which reach them through package
// internal/hybridsim. Package hybrid sets the functions when it loads:
// they are not part of its public API, and this package cannot import it.
package simhook

import (
	"context"
	"time"

	"github.com/hybridlimit/hybridlimit/internal/synchook"
)

// The controls, set by package hybrid; l is a *hybrid.Limiter and cfg a
// hybrid.Config.
var (
	// Configure returns cfg with the syncer's rounds left to the caller
	// (manual) and Redis's scripts taking the Limiter's clock (virtual).
	Configure func(cfg any, manual, virtual bool) any
	// Simulated reports cfg's two settings of Configure.
	Simulated func(cfg any) (manual, virtual bool)
	// SyncAt runs one sync round at the Limiter's clock time now.
	SyncAt func(ctx context.Context, l any, now time.Time) (synchook.RoundStats, error)
	// SyncFirstAt runs one first-lease round at the Limiter's clock time now.
	SyncFirstAt func(ctx context.Context, l any, now time.Time) (synchook.RoundStats, error)
	// SyncWanted reports, and clears, whether a key asked for an early round.
	SyncWanted func(l any) bool
	// SyncFirstWanted reports, and clears, whether a key asked for a
	// first-lease round.
	SyncFirstWanted func(l any) bool
	// NodeID returns the node's name in Redis, "" without Redis.
	NodeID func(l any) string
)
