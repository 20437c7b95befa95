package hybrid

import (
	"context"
	"time"

	"github.com/hybridlimit/hybridlimit/internal/simhook"
	"github.com/hybridlimit/hybridlimit/internal/synchook"
)

// The simulation controls, for the module's tests and benchmarks through
// internal/hybridsim; not part of the API.
func init() {
	simhook.Configure = func(cfg any, manual, virtual bool) any {
		c := cfg.(Config)
		c.manualSync, c.virtualTime = manual, virtual
		return c
	}
	simhook.Simulated = func(cfg any) (bool, bool) {
		c := cfg.(Config)
		return c.manualSync, c.virtualTime
	}
	simhook.SyncAt = func(ctx context.Context, l any, now time.Time) (synchook.RoundStats, error) {
		return l.(*Limiter).syncAt(ctx, now)
	}
	simhook.SyncFirstAt = func(ctx context.Context, l any, now time.Time) (synchook.RoundStats, error) {
		return l.(*Limiter).syncFirstAt(ctx, now)
	}
	simhook.SyncWanted = func(l any) bool { return l.(*Limiter).syncWanted() }
	simhook.SyncFirstWanted = func(l any) bool { return l.(*Limiter).syncFirstWanted() }
	simhook.NodeID = func(l any) string { return l.(*Limiter).nodeID() }
}
