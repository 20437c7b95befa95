package lease

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/internal/keyed"
	"github.com/hybridlimit/hybridlimit/internal/localx"
	"github.com/hybridlimit/hybridlimit/local"
)

const t0 = int64(1_900_000_000_000_000) // node time (µs) the tests start at

// TestDueMinGapClockLag: the loop spaces its early rounds MinGap apart on
// its timers, while a key's gap since its last sync is read from the
// limiter's clock, which may lag them by a millisecond. A key that asked
// for an early sync is due a little under MinGap after its last one, not a
// round later; but not at half a MinGap.
func TestDueMinGapClockLag(t *testing.T) {
	lr := windowRule(local.FixedWindow)
	minGap := testParams.MinGap.Microseconds()
	for _, tc := range []struct {
		gap  int64
		want bool
	}{
		{minGap, true},
		{minGap / 2, false},
		{minGap - minGap/20, true}, // 9.5ms: the clock lagged
		{minGap - minGap/10, true}, // the least gap taken as MinGap
		{minGap - minGap/10 - 1, false},
	} {
		var k Lease
		k.flags = flagSynced | flagSent | flagUrgent
		k.lastSync, k.lastUse = t0, t0+tc.gap
		k.wid = t0 - t0%1e6
		assert.Equal(t, tc.want, k.Due(lr, t0+tc.gap), "urgent key, %dµs after its last sync", tc.gap)
		k.flags &^= flagUrgent
		assert.False(t, k.Due(lr, t0+tc.gap), "a key that did not ask, %dµs after its last sync", tc.gap)
	}
}

// TestNotifyFirst: a new key's first request asks for a first-lease round,
// not an early ordinary one, and is listed once however often it asks; a
// key handed over is queued for the next round once.
func TestNotifyFirst(t *testing.T) {
	lr := windowRule(local.FixedWindow)
	c := lr.cluster
	store, err := keyed.New(keyed.Config{}, func(*Lease, int64) bool { return false }, nil)
	require.NoError(t, err)
	decide := func(key string) {
		e := store.Get(key, t0)
		e.Lock()
		if _, signal := e.Value.Decide(lr, t0, 1); signal.Sync() {
			lr.Notify(e)
		}
		e.Unlock()
	}
	decide("a")
	assert.False(t, c.Wanted(), "an early round asked for")
	assert.True(t, c.WantedFirst(), "no first-lease round asked for")
	decide("a")
	decide("b")
	assert.Equal(t, 2, c.FirstPending())
	handed := 0
	c.TakeHanded(func(Handed) { handed++ })
	assert.Equal(t, 2, handed, "keys queued for the next round")
	assert.Len(t, c.TakeFirst(), 2)
	assert.Zero(t, c.FirstPending())
}

// TestRequestFirstDemand: a key's first exchange, sent sooner than MinGap
// after its first request, cannot measure its demand: a window key says it
// is unknown, and its lease is a guess; a bucket key seen once is taken as
// quiet. One sent MinGap or more later measures it.
func TestRequestFirstDemand(t *testing.T) {
	bucket := testRule(localx.MustLimit(local.Limit{Algorithm: local.TokenBucket, Quota: 1000, Window: time.Second, Burst: 100}))
	minGap := testParams.MinGap.Microseconds()
	for _, tc := range []struct {
		name   string
		rule   *Rule
		hits   int64
		after  int64
		demand int64
		guess  bool
	}{
		{"window, soon", windowRule(local.FixedWindow), 5, minGap / 2, DemandUnknown, true},
		{"bucket seen once, soon", bucket, 1, minGap / 2, 0, true},
		{"bucket seen twice, soon", bucket, 2, minGap / 2, DemandUnknown, true},
		{"window, after MinGap", windowRule(local.FixedWindow), 11, minGap, 1000, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var k Lease
			for range tc.hits {
				k.Decide(tc.rule, t0, 1)
			}
			q := k.Request(tc.rule, t0+tc.after, false)
			assert.Equal(t, tc.demand, q.Demand)
			assert.Equal(t, tc.guess, k.flags&flagGuess != 0, "the lease taken as a guess")
			assert.True(t, k.InFlight())
			assert.Equal(t, tc.rule.buckets, q.Bucket)
			k.Answered()
			assert.False(t, k.InFlight())
		})
	}
}
