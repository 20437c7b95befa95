package syncer_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/internal/clocktest"
	"github.com/hybridlimit/hybridlimit/internal/redistest"
	"github.com/hybridlimit/hybridlimit/internal/synchook"
	"github.com/hybridlimit/hybridlimit/syncer"
)

// newClock returns a fake clock for a Syncer run with PassTime, at a fixed
// start.
func newClock() *clocktest.Clock {
	return clocktest.New(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
}

// TestRegistry: each Syncer registers as live at its rounds (every
// DemandTTL ÷ 2); Nodes counts the live ones, never fewer than
// SyncConfig.Nodes; a node that shuts down leaves at once, and one that
// stops syncing drops out after DemandTTL.
func TestRegistry(t *testing.T) {
	ctx := context.Background()
	c := redistest.Client(t, redistest.Addr(t))
	prefix := redistest.Prefix(t)
	clk := newClock()
	newSyncer := func(id string, hint int) *syncer.Syncer {
		s, err := syncer.NewSyncer(syncer.SyncConfig{
			Client: c, Keyspace: syncer.Keyspace{Prefix: prefix}, Tuning: syncer.Tuning{NodeID: id, Nodes: hint},
			Clock: clk, PassTime: true,
		})
		require.NoError(t, err)
		t.Cleanup(func() { s.Close() })
		return s
	}
	round := func(s *syncer.Syncer) synchook.RoundStats {
		t.Helper()
		st, err := s.SyncAt(ctx, clk.Micros())
		require.NoError(t, err)
		return st
	}
	a, b, d := newSyncer("a", 0), newSyncer("b", 0), newSyncer("d", 5)
	assert.Zero(t, a.Nodes(), "before any round: Nodes, want 0 (unknown)")
	assert.Equal(t, int64(5), d.Nodes(), "before any round, SyncConfig.Nodes 5: Nodes")
	st := round(a)
	assert.True(t, st.Registered, "first round: %+v, want Registered", st)
	assert.Equal(t, int64(1), a.Nodes(), "a alone: Nodes")
	round(b)
	assert.Equal(t, int64(2), b.Nodes(), "a and b: b's count")
	// a registers again only DemandTTL ÷ 2 (250ms) after its last time.
	clk.Add(100 * time.Millisecond)
	st = round(a)
	assert.False(t, st.Registered, "a round 100ms after registering registered again: %+v", st)
	clk.Add(200 * time.Millisecond)
	st = round(a)
	assert.True(t, st.Registered, "a round 300ms after registering: %+v, want Registered", st)
	assert.Equal(t, int64(2), a.Nodes(), "a round 300ms after registering: Nodes")
	round(d)
	assert.Equal(t, int64(5), d.Nodes(), "3 live, SyncConfig.Nodes 5: Nodes")
	// b leaves at Shutdown; d stops syncing and drops out after DemandTTL.
	require.NoError(t, b.Shutdown(ctx))
	clk.Add(300 * time.Millisecond)
	round(a)
	assert.Equal(t, int64(2), a.Nodes(), "after b left: a's count (a and d)")
	clk.Add(300 * time.Millisecond)
	round(a)
	assert.Equal(t, int64(1), a.Nodes(), "after d stopped for 600ms: a's count")
}
