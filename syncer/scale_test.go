package syncer_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
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

// manyKeys is a Syncer on a stepped clock with a fixed window rule and no
// cold-start allowance (a key admits only once its lease came), and n keys,
// each decided once, a microsecond apart, in order.
type manyKeys struct {
	s     *syncer.Syncer
	clk   *clocktest.Clock
	lr    *lease.Rule
	store *keyed.Store[lease.Lease]
	keys  []*keyed.Entry[lease.Lease]
}

func newManyKeys(t *testing.T, client redis.UniversalClient, n int, cfg syncer.SyncConfig) *manyKeys {
	t.Helper()
	m := &manyKeys{clk: newClock()}
	cfg.Client, cfg.Keyspace = client, syncer.Keyspace{Prefix: redistest.Prefix(t)}
	cfg.NodeID, cfg.Nodes, cfg.Clock, cfg.PassTime, cfg.NoColdStart = "a", 1, m.clk, true, true
	var err error
	m.s, err = syncer.NewSyncer(cfg)
	require.NoError(t, err)
	t.Cleanup(func() { m.s.Close() })
	rule, err := syncer.NewRule("many", local.Limit{Algorithm: local.FixedWindow, Quota: 1000, Window: time.Hour})
	require.NoError(t, err)
	m.lr, err = m.s.LeaseRule(rule)
	require.NoError(t, err)
	m.store, err = keyed.New(keyed.Config{}, func(*lease.Lease, int64) bool { return false }, nil)
	require.NoError(t, err)
	for i := range n {
		m.clk.Add(time.Microsecond)
		now := m.clk.Micros()
		e := m.store.Get(fmt.Sprintf("u%d", i), now)
		e.Lock()
		if _, signal := e.Value.Decide(m.lr, now, 1); signal.Sync() {
			m.lr.Notify(e)
		}
		e.Unlock()
		m.keys = append(m.keys, e)
	}
	m.clk.Add(syncer.WithDefaults(cfg).MinGap)
	return m
}

// leased reports whether key i holds a lease (admits a request), and
// whether a request is out for it.
func (m *manyKeys) leased(i int) (leased, inFlight bool) {
	e := m.keys[i]
	e.Lock()
	defer e.Unlock()
	k := e.Value // a copy: the peek changes nothing
	v, _ := k.Redecide(m.lr, m.clk.Micros(), 1, false)
	return v.Reason == local.ReasonOK, e.Value.InFlight()
}

// TestRoundManyKeys: a round bounded in time (as the loop's are, by
// Timeout) exchanges what it can, the keys longest unsynced first, and
// leaves the rest untouched for the next round; the rounds together give
// every one of 20,000 keys its lease, each key exchanged once, none left
// in flight after a round.
func TestRoundManyKeys(t *testing.T) {
	const n, batch = 20000, 256
	// Timeout, each pipeline's bound, is long enough under -race.
	m := newManyKeys(t, redistest.Client(t, redistest.Addr(t)), n, syncer.SyncConfig{Tuning: syncer.Tuning{Batch: batch, Timeout: 10 * time.Second}})
	ctx := context.Background()
	synced, rounds := 0, 0
	for synced < n {
		require.Less(t, rounds, 2*n/batch, "rounds to serve %d keys, %d served", n, synced)
		// A budget that has run out when the first pipeline returns: each
		// round sends one pipeline.
		st, err := syncer.SyncWithin(m.s, ctx, m.clk.Micros(), time.Nanosecond)
		require.NoError(t, err)
		rounds++
		assert.Equal(t, 1, st.Pipeline, "round %d: pipelines", rounds)
		assert.Zero(t, st.Failed, "round %d: failed", rounds)
		assert.Equal(t, n-synced-st.Synced, st.Carried, "round %d: keys carried", rounds)
		assert.LessOrEqual(t, st.Synced, batch, "round %d: keys exchanged", rounds)
		if rounds == 1 {
			// The registration came first, then the oldest keys; the
			// others are as they were.
			assert.True(t, st.Registered, "the first round registered the node")
			assert.Equal(t, batch-1, st.Synced)
			for i := range n {
				leased, inFlight := m.leased(i)
				assert.False(t, inFlight, "key %d in flight after a round", i)
				if !assert.Equal(t, i < st.Synced, leased, "key %d leased after the first round (%d keys exchanged, the oldest first)", i, st.Synced) {
					break
				}
			}
		}
		synced += st.Synced
		// Past MinGap in all, but not Interval: a key served is not due again.
		m.clk.Add(500 * time.Microsecond)
	}
	assert.Equal(t, n, synced, "keys exchanged over %d rounds: each once", rounds)
	for i := range n {
		leased, inFlight := m.leased(i)
		if !assert.True(t, leased && !inFlight, "key %d: leased %v, in flight %v", i, leased, inFlight) {
			break
		}
	}
	// Served, the keys are not exchanged again until due.
	st, err := syncer.SyncWithin(m.s, ctx, m.clk.Micros(), time.Nanosecond)
	require.NoError(t, err)
	assert.Zero(t, st.Synced+st.Carried, "keys exchanged or carried once all are served")
}

// TestRoundFailedPipeline: a pipeline that runs past Timeout fails its own
// keys only; the pipelines after it, each with its own deadline, go on, and
// the next round serves the failed keys.
func TestRoundFailedPipeline(t *testing.T) {
	const n, batch = 200, 20
	timeout := 300 * time.Millisecond
	h := &hookClient{UniversalClient: redistest.Client(t, redistest.Addr(t))}
	m := newManyKeys(t, h, n, syncer.SyncConfig{Tuning: syncer.Tuning{Batch: batch, Timeout: timeout}})
	h.before = func(p int64) {
		if p == 2 {
			// Exec then starts with the pipeline's deadline passed.
			time.Sleep(timeout + 10*time.Millisecond)
		}
	}
	ctx := context.Background()
	st, err := m.s.SyncAt(ctx, m.clk.Micros())
	require.Error(t, err)
	assert.ErrorIs(t, err, context.DeadlineExceeded, "round error: want the deadline")
	assert.Equal(t, n/batch+1, st.Pipeline, "pipelines (the registration takes a place in the first)")
	// The delayed pipeline's keys fail (all but those whose reply the
	// client read before noticing the deadline); the others do not.
	require.Equal(t, n, st.Synced+st.Failed, "keys exchanged or failed")
	assert.Positive(t, st.Failed, "keys failed")
	assert.LessOrEqual(t, st.Failed, batch, "keys failed: the second pipeline's at most")
	leasedKeys := 0
	for i := range n {
		leased, inFlight := m.leased(i)
		assert.False(t, inFlight, "key %d in flight", i)
		if leased {
			leasedKeys++
		}
	}
	assert.Equal(t, st.Synced, leasedKeys, "keys leased")
	// Redis answered the other pipelines: it was up and lost nothing, so
	// no hand-back (which would give the keys to the failure policy).
	assert.Zero(t, syncer.OutageNoted(m.s), "a round Redis answered in part noted an outage")
	failed := st.Failed
	h.before = nil
	// Past MinGap, the failed keys are due again; the others not before Interval.
	m.clk.Add(20 * time.Millisecond)
	st, err = m.s.SyncAt(ctx, m.clk.Micros())
	require.NoError(t, err)
	assert.Equal(t, failed, st.Synced, "the next round exchanges the failed keys")
	for i := range n {
		if leased, _ := m.leased(i); !assert.True(t, leased, "key %d leased after the next round", i) {
			break
		}
	}
}

// TestEarlyRound: an early round looks only at the keys that asked for it
// (urgent), not at every key of the set; a regular round looks at every
// key; both send the keys a budget left before, in turn, without looking
// at them again.
func TestEarlyRound(t *testing.T) {
	const n, batch = 100, 32
	m := newManyKeys(t, redistest.Client(t, redistest.Addr(t)), n, syncer.SyncConfig{Tuning: syncer.Tuning{Batch: batch, Timeout: 10 * time.Second}})
	looked := 0
	m.lr.SetOutage(func(*lease.Lease, int64, int64, int64) { looked++ }, false)
	ctx := context.Background()
	round := func(sync func() (synchook.RoundStats, error)) (synchook.RoundStats, int) {
		t.Helper()
		looked = 0
		st, err := sync()
		require.NoError(t, err)
		m.clk.Add(syncer.WithDefaults(syncer.SyncConfig{}).MinGap)
		return st, looked
	}
	now := func() int64 { return m.clk.Micros() }

	// The first round, on a budget, leaves keys; early rounds serve them.
	st, seen := round(func() (synchook.RoundStats, error) { return syncer.SyncWithin(m.s, ctx, now(), time.Nanosecond) })
	assert.Equal(t, n, seen, "a regular round looks at every key")
	assert.Equal(t, n-(batch-1), st.Carried, "keys left by the budget (the registration came first)")
	st, seen = round(func() (synchook.RoundStats, error) { return syncer.SyncEarly(m.s, ctx, now(), time.Nanosecond) })
	assert.Zero(t, seen, "the keys left are sent in turn, not looked at again")
	assert.Equal(t, batch, st.Synced)
	st, seen = round(func() (synchook.RoundStats, error) { return syncer.SyncWithin(m.s, ctx, now(), time.Nanosecond) })
	assert.Equal(t, n-(n-(batch-1)-batch), seen, "a regular round looks at every key but those left")
	assert.Equal(t, batch, st.Synced, "the next of those left")
	st, seen = round(func() (synchook.RoundStats, error) { return syncer.SyncEarly(m.s, ctx, now(), 0) })
	assert.Zero(t, seen)
	assert.Equal(t, n-(batch-1)-2*batch, st.Synced, "the rest")
	st, seen = round(func() (synchook.RoundStats, error) { return syncer.SyncEarly(m.s, ctx, now(), 0) })
	assert.Zero(t, seen, "nothing asked, nothing left: an early round looks at no key")
	assert.Zero(t, st.Synced)

	// Key 0 spends its lease: it asks for an early round, alone.
	e := m.keys[0]
	e.Lock()
	for range 10_000 {
		v, signal := e.Value.Decide(m.lr, now(), 1)
		if signal.Sync() {
			m.lr.Notify(e)
		}
		if v.Reason != local.ReasonOK {
			break
		}
	}
	e.Unlock()
	st, seen = round(func() (synchook.RoundStats, error) { return syncer.SyncEarly(m.s, ctx, now(), 0) })
	assert.Equal(t, 1, seen, "the urgent key alone")
	assert.Equal(t, 1, st.Synced, "its exchange")
	_, seen = round(func() (synchook.RoundStats, error) { return m.s.SyncAt(ctx, now()) })
	assert.Equal(t, n, seen, "a regular round looks at every key again")
}
