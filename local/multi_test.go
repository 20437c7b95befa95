package local_test

import (
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/local"
)

func TestAllowMultiAllOrNone(t *testing.T) {
	perSecond := newLimiter(t, local.Limit{Algorithm: local.TokenBucket, Quota: 10, Window: time.Second, Burst: 2}, local.Config{})
	perMinute := newLimiter(t, local.Limit{Algorithm: local.FixedWindow, Quota: 3, Window: time.Minute}, local.Config{})
	reqs := []local.Request{{perSecond, "u1", 1}, {perMinute, "u1", 1}}
	out := make([]local.Decision, 2)

	require.True(t, local.AllowMultiAt(t0, reqs, out), "first: %+v", out)
	assert.True(t, out[0].Allowed(), "first, bucket: %+v", out[0])
	assert.True(t, out[1].Allowed(), "first, window: %+v", out[1])
	assert.Equal(t, int64(1), out[0].Remaining(), "first, bucket: remaining")
	assert.Equal(t, int64(2), out[1].Remaining(), "first, window: remaining")
	require.True(t, local.AllowMultiAt(t0, reqs, out), "second: %+v", out)
	// The per-second bucket is empty: nothing is charged, the per-minute
	// window keeps its last unit.
	require.False(t, local.AllowMultiAt(t0, reqs, out), "third admitted")
	assert.False(t, out[0].Allowed(), "third, bucket: %+v", out[0])
	assert.Equal(t, local.ReasonLimited, out[0].Reason(), "third, bucket: %+v", out[0])
	assert.Equal(t, 100*time.Millisecond, out[0].RetryAfter(), "third, bucket: %+v", out[0])
	assert.False(t, out[1].Allowed(), "third, window (had room, not charged): %+v", out[1])
	assert.Equal(t, local.ReasonOK, out[1].Reason(), "third, window (had room, not charged): %+v", out[1])
	assert.Equal(t, int64(1), out[1].Remaining(), "third, window (had room, not charged): %+v", out[1])
	assert.Equal(t, int64(1), perMinute.AllowNAt(t0, "u1", 0).Remaining(), "window's remaining: charged by a refused multi")
	later := t0.Add(100 * time.Millisecond)
	require.True(t, local.AllowMultiAt(later, reqs, out), "after retry-after: %+v", out)
	assert.Equal(t, int64(0), out[1].Remaining(), "after retry-after, window: %+v", out[1])
}

func TestAllowMultiSameKeyTwice(t *testing.T) {
	l := newLimiter(t, local.Limit{Algorithm: local.FixedWindow, Quota: 5, Window: time.Minute}, local.Config{})
	out := make([]local.Decision, 2)
	reqs := []local.Request{{l, "k", 2}, {l, "k", 3}}
	require.True(t, local.AllowMultiAt(t0, reqs, out), "2 + 3 of 5: %+v", out)
	assert.Equal(t, []int64{0, 0}, []int64{out[0].Remaining(), out[1].Remaining()}, "2 + 3 of 5: remaining")
	assert.False(t, local.AllowMultiAt(t0, []local.Request{{l, "j", 3}, {l, "j", 3}}, out), "3 + 3 of 5 admitted")
	assert.Equal(t, int64(5), l.AllowNAt(t0, "j", 0).Remaining(), "remaining: a refused multi charged")
}

func TestAllowMultiBadCostChargesNothing(t *testing.T) {
	a := newLimiter(t, local.Limit{Algorithm: local.FixedWindow, Quota: 5, Window: time.Minute}, local.Config{})
	out := make([]local.Decision, 3)
	require.False(t, local.AllowMultiAt(t0, []local.Request{{a, "k", 1}, {a, "x", 6}, {a, "y", -1}}, out), "admitted")
	assert.Equal(t, []local.Reason{local.ReasonOK, local.ReasonCostTooHigh, local.ReasonInvalidCost},
		[]local.Reason{out[0].Reason(), out[1].Reason(), out[2].Reason()}, "reasons: %+v", out)
	assert.False(t, out[0].Allowed(), "the good request, refused with the others: %+v", out[0])
	assert.Equal(t, int64(5), a.AllowNAt(t0, "k", 0).Remaining(), "remaining: charged")
	assert.True(t, local.AllowMultiAt(t0, nil, nil), "no requests must be admitted")
	assert.True(t, local.AllowMultiAt(t0, nil, nil), "no requests must be admitted")
	assert.Panics(t, func() { local.AllowMultiAt(t0, []local.Request{{a, "k", 1}}, nil) }, "short out did not panic")
}

func TestAllowMultiManyRules(t *testing.T) {
	var reqs []local.Request
	for i := range 20 {
		l := newLimiter(t, local.Limit{Algorithm: local.GCRA, Quota: int64(i + 1), Window: time.Second}, local.Config{})
		reqs = append(reqs, local.Request{l, "k", 1})
	}
	out := make([]local.Decision, len(reqs))
	require.True(t, local.AllowMultiAt(t0, reqs, out), "first: %+v", out)
	require.False(t, local.AllowMultiAt(t0, reqs, out), "second admitted: %+v", out) // the first rule allows one per second
	assert.Equal(t, local.ReasonLimited, out[0].Reason(), "second, first rule: %+v", out[0])
	assert.Equal(t, local.ReasonOK, out[1].Reason(), "second, second rule: %+v", out[1])
}

// TestAllowMultiConcurrentNoDeadlockNoPartialCharge: goroutines take the same
// two keys in opposite orders. Nothing deadlocks, and both keys end charged
// exactly the same: no multi ever charged one rule without the other.
func TestAllowMultiConcurrentNoDeadlockNoPartialCharge(t *testing.T) {
	a := newLimiter(t, local.Limit{Algorithm: local.FixedWindow, Quota: 1000, Window: time.Minute}, local.Config{})
	b := newLimiter(t, local.Limit{Algorithm: local.SlidingWindowLog, Quota: 700, Window: time.Minute}, local.Config{})
	var wg sync.WaitGroup
	var mu sync.Mutex
	admitted := 0
	for g := range 8 {
		wg.Go(func() {
			reqs := []local.Request{{a, "k", 1}, {b, "k", 1}}
			if g%2 == 1 {
				reqs[0], reqs[1] = reqs[1], reqs[0]
			}
			out := make([]local.Decision, 2)
			n := 0
			for range 200 {
				if local.AllowMultiAt(t0, reqs, out) {
					n++
				}
			}
			mu.Lock()
			admitted += n
			mu.Unlock()
		})
	}
	wg.Wait()
	assert.Equal(t, 700, admitted, "admitted of 1600")
	assert.Equal(t, int64(300), a.AllowNAt(t0, "k", 0).Remaining(), "a's remaining")
	assert.Equal(t, int64(0), b.AllowNAt(t0, "k", 0).Remaining(), "b's remaining")
}
