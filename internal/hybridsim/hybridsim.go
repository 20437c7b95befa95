// Package hybridsim drives a hybrid.Limiter by hand, for the module's
// tests and benchmarks: the syncer's rounds run when the caller says, on
// the Limiter's clock, and Redis's scripts read that clock too, so a test
// moves time and the whole cluster follows, deterministically.
package hybridsim

import (
	"context"
	"time"

	"github.com/hybridlimit/hybridlimit/hybrid"
	"github.com/hybridlimit/hybridlimit/internal/simhook"
	"github.com/hybridlimit/hybridlimit/internal/synchook"
)

// Config returns cfg with the syncer's rounds left to the caller (manual:
// SyncAt when SyncWanted, SyncFirstAt when SyncFirstWanted, SyncAt every
// Interval; no goroutine runs them) and, with virtual, Redis's scripts
// taking the Limiter's Clock instead of Redis's own.
func Config(cfg hybrid.Config, manual, virtual bool) hybrid.Config {
	return simhook.Configure(cfg, manual, virtual).(hybrid.Config)
}

// Manual is Config(cfg, true, false).
func Manual(cfg hybrid.Config) hybrid.Config { return Config(cfg, true, false) }

// Virtual is Config(cfg, true, true): rounds by hand, on the Limiter's clock.
func Virtual(cfg hybrid.Config) hybrid.Config { return Config(cfg, true, true) }

// Simulated reports cfg's settings of Config.
func Simulated(cfg hybrid.Config) (manual, virtual bool) { return simhook.Simulated(cfg) }

// SyncAt runs one round of l's syncer at its clock's time now and returns
// the round's figures.
func SyncAt(ctx context.Context, l *hybrid.Limiter, now time.Time) (synchook.RoundStats, error) {
	return simhook.SyncAt(ctx, l, now)
}

// SyncFirstAt runs a first-lease round of l's syncer at its clock's time
// now: only the keys that asked for their first lease, or for the
// correction of a lease granted on a guess.
func SyncFirstAt(ctx context.Context, l *hybrid.Limiter, now time.Time) (synchook.RoundStats, error) {
	return simhook.SyncFirstAt(ctx, l, now)
}

// SyncWanted reports, and clears, whether a key of l asked for an early
// round since the last call; the caller runs one (SyncAt) soon after, as
// the loop would, MinGap later.
func SyncWanted(l *hybrid.Limiter) bool { return simhook.SyncWanted(l) }

// SyncFirstWanted reports, and clears, whether a key of l asked for a
// first-lease round since the last call; the caller runs one (SyncFirstAt).
func SyncFirstWanted(l *hybrid.Limiter) bool { return simhook.SyncFirstWanted(l) }

// NodeID returns l's name in Redis, "" without Redis.
func NodeID(l *hybrid.Limiter) string { return simhook.NodeID(l) }
