package syncer_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/internal/clocktest"
	"github.com/hybridlimit/hybridlimit/internal/keyed"
	"github.com/hybridlimit/hybridlimit/internal/lease"
	"github.com/hybridlimit/hybridlimit/internal/redistest"
	"github.com/hybridlimit/hybridlimit/internal/synchook"
	"github.com/hybridlimit/hybridlimit/local"
	"github.com/hybridlimit/hybridlimit/syncer"
)

// newClock returns a fake clock for a Syncer run with PassTime, at a fixed
// start.
func newClock() *clocktest.Clock {
	return clocktest.New(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
}

// TestRegistry: each Syncer registers as live at its rounds: every
// DemandTTL ÷ 2 while it looks after keys, and every idleRegister intervals
// (2s) while it has none, scored ahead so that it stays live until its next;
// Nodes counts the live ones, never fewer than SyncConfig.Nodes; a node that
// shuts down leaves at once, and one that stops syncing drops out DemandTTL
// after the time its last registration counted it to.
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
	a, b, d := newSyncer("a", 0), newSyncer("b", 0), newSyncer("d", 5)
	// a looks after a key: it decides one at each of its rounds.
	decide := holdKey(t, a, clk)
	round := func(s *syncer.Syncer) synchook.RoundStats {
		t.Helper()
		if s == a {
			decide()
		}
		st, err := s.SyncAt(ctx, clk.Micros())
		require.NoError(t, err)
		return st
	}
	assert.Zero(t, a.Nodes(), "before any round: Nodes, want 0 (unknown)")
	assert.Equal(t, int64(5), d.Nodes(), "before any round, SyncConfig.Nodes 5: Nodes")
	st := round(a)
	assert.True(t, st.Registered, "first round: %+v, want Registered", st)
	assert.Equal(t, int64(1), a.Nodes(), "a alone: Nodes")
	st = round(b)
	assert.True(t, st.Registered, "b's first round: %+v, want Registered", st)
	assert.Equal(t, int64(2), b.Nodes(), "a and b: b's count")
	// a registers again only DemandTTL ÷ 2 (250ms) after its last time.
	clk.Add(100 * time.Millisecond)
	st = round(a)
	assert.False(t, st.Registered, "a round 100ms after registering registered again: %+v", st)
	clk.Add(200 * time.Millisecond)
	st = round(a)
	assert.True(t, st.Registered, "a round 300ms after registering: %+v, want Registered", st)
	assert.Equal(t, int64(2), a.Nodes(), "a round 300ms after registering: Nodes")
	// b, with no key, registers again only 2s after its last time.
	st = round(b)
	assert.False(t, st.Registered, "an idle node's round 300ms after registering registered again: %+v", st)
	round(d) // at 300ms: counted until 2.3s, plus DemandTTL
	assert.Equal(t, int64(5), d.Nodes(), "3 live, SyncConfig.Nodes 5: Nodes")
	// b leaves at Shutdown; d stops syncing.
	require.NoError(t, b.Shutdown(ctx))
	clk.Add(300 * time.Millisecond)
	round(a)
	assert.Equal(t, int64(2), a.Nodes(), "after b left: a's count (a and d)")
	clk.Add(1900 * time.Millisecond) // 2.5s: d's next registration was due at 2.3s
	round(a)
	assert.Equal(t, int64(2), a.Nodes(), "d, idle, 200ms past its next registration: a's count")
	clk.Add(400 * time.Millisecond) // 2.9s: past 2.3s + DemandTTL
	round(a)
	assert.Equal(t, int64(1), a.Nodes(), "d stopped for 2.6s: a's count")
}

// holdKey returns a function that decides a request of a key under a rule
// of a fixed window of an hour on s, so that s looks after it.
func holdKey(t *testing.T, s *syncer.Syncer, clk *clocktest.Clock) func() {
	t.Helper()
	rule, err := syncer.NewRule("held", local.Limit{Algorithm: local.FixedWindow, Quota: 1000, Window: time.Hour})
	require.NoError(t, err)
	lr, err := s.LeaseRule(rule)
	require.NoError(t, err)
	store, err := keyed.New(keyed.Config{}, func(*lease.Lease, int64) bool { return false }, nil)
	require.NoError(t, err)
	return func() {
		now := clk.Micros()
		e := store.Get("k", now)
		e.Lock()
		if _, signal := e.Value.Decide(lr, now, 1); signal.Sync() {
			lr.Notify(e)
		}
		e.Unlock()
	}
}
