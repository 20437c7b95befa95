package syncer_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/internal/keyed"
	"github.com/hybridlimit/hybridlimit/internal/lease"
	"github.com/hybridlimit/hybridlimit/internal/redistest"
	"github.com/hybridlimit/hybridlimit/local"
	"github.com/hybridlimit/hybridlimit/syncer"
)

// TestFirstLeaseRounds: a new key asks for a first-lease round, not an
// ordinary early one; SyncFirstAt exchanges only the keys that asked, and
// takes each once; an ordinary round serves the keys still waiting, so
// that the list does not grow while no first-lease round runs (Redis out).
func TestFirstLeaseRounds(t *testing.T) {
	ctx := context.Background()
	c := redistest.Client(t, redistest.Addr(t))
	clk := newClock()
	s, err := syncer.NewSyncer(syncer.SyncConfig{
		Client: c, Keyspace: syncer.Keyspace{Prefix: redistest.Prefix(t)}, Tuning: syncer.Tuning{NodeID: "a", Nodes: 1},
		Clock: clk, PassTime: true,
	})
	require.NoError(t, err)
	t.Cleanup(func() { s.Close() })
	rule, err := syncer.NewRule("first", local.Limit{Algorithm: local.FixedWindow, Quota: 1000, Window: time.Minute})
	require.NoError(t, err)
	lr, err := s.LeaseRule(rule)
	require.NoError(t, err)
	store, err := keyed.New(keyed.Config{}, func(*lease.Lease, int64) bool { return false }, nil)
	require.NoError(t, err)
	decide := func(key string) {
		now := clk.Micros()
		e := store.Get(key, now)
		e.Lock()
		if _, signal := e.Value.Decide(lr, now, 1); signal.Sync() {
			lr.Notify(e)
		}
		e.Unlock()
	}
	decide("a")
	require.False(t, s.Wanted(), "a new key: an early round asked for, want a first-lease round")
	require.True(t, s.WantedFirst(), "a new key: want a first-lease round asked for")
	decide("a") // asked already: listed once
	decide("b")
	require.Equal(t, 2, syncer.FirstPending(s), "keys waiting for the first-lease round")
	st, err := s.SyncFirstAt(ctx, clk.Micros())
	require.NoError(t, err)
	assert.True(t, st.First, "first-lease round: %+v, want First", st)
	assert.Equal(t, 2, st.Synced, "first-lease round: keys synced")
	st, _ = s.SyncFirstAt(ctx, clk.Micros())
	assert.Zero(t, st.Synced, "a second first-lease round: keys synced, want none asked")
	// Keys that wait while only ordinary rounds run are served by them.
	for i := range 50 {
		decide(fmt.Sprintf("k%d", i))
	}
	st, err = s.SyncAt(ctx, clk.Micros())
	require.NoError(t, err)
	assert.Zero(t, syncer.FirstPending(s), "after an ordinary round: keys still waiting for a first-lease round")
	assert.GreaterOrEqual(t, st.Synced, 50, "after an ordinary round: keys synced")
}
