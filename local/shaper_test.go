package local_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/internal/clocktest"
	"github.com/hybridlimit/hybridlimit/local"
)

func TestReserveSpacesRequests(t *testing.T) {
	// A shaper: 10 per second (100ms apart), burst 2, queue of up to 1s.
	lim := local.Limit{Algorithm: local.LeakyBucket, Quota: 10, Window: time.Second, Burst: 2}
	l := newLimiter(t, lim, local.Config{})
	var delays []time.Duration
	for {
		r, err := l.ReserveAt(t0, "k", 1, time.Second)
		require.NoError(t, err)
		if !r.OK {
			require.Equal(t, local.ReasonLimited, r.Reason, "refused with %+v", r)
			require.Greater(t, r.Delay, time.Second, "refused with %+v", r)
			break
		}
		require.WithinDuration(t, t0.Add(r.Delay), r.TimeToAct, 0, "time to act, delay %v", r.Delay)
		delays = append(delays, r.Delay)
	}
	// Two at once (the burst), then one every 100ms up to 1s: 12 in all.
	want := []time.Duration{0, 0}
	for i := range 10 {
		want = append(want, time.Duration(i+1)*100*time.Millisecond)
	}
	assert.Equal(t, want, delays, "delays")
	// The meter sees the queue as consumed.
	d := l.AllowNAt(t0, "k", 1)
	assert.False(t, d.Allowed(), "Allow admitted past a full queue: %+v", d)
	r, _ := l.ReserveAt(t0, "k", 3, time.Hour)
	assert.False(t, r.OK, "cost above burst: %+v", r)
	assert.Equal(t, local.ReasonCostTooHigh, r.Reason, "cost above burst: %+v", r)
	r, _ = l.ReserveAt(t0, "k", -1, time.Hour)
	assert.False(t, r.OK, "negative cost: %+v", r)
	assert.Equal(t, local.ReasonInvalidCost, r.Reason, "negative cost: %+v", r)
}

func TestReserveCancel(t *testing.T) {
	lim := local.Limit{Algorithm: local.GCRA, Quota: 1, Window: time.Second}
	l := newLimiter(t, lim, local.Config{})
	first, _ := l.ReserveAt(t0, "k", 1, time.Minute)
	second, _ := l.ReserveAt(t0, "k", 1, time.Minute)
	third, _ := l.ReserveAt(t0, "k", 1, time.Minute)
	require.Equal(t, 2*time.Second, third.Delay, "third %+v", third)
	// The last one is given back exactly: the next takes its slot.
	local.CancelAt(&third, t0)
	again, _ := l.ReserveAt(t0, "k", 1, time.Minute)
	assert.Equal(t, 2*time.Second, again.Delay, "after cancelling the last: %+v", again)
	// One with others behind it keeps its slot (reusing it would break the
	// spacing promised to the later ones).
	local.CancelAt(&second, t0)
	next, _ := l.ReserveAt(t0, "k", 1, time.Minute)
	assert.Equal(t, 3*time.Second, next.Delay, "after cancelling a middle one: %+v", next)
	// Past its time to act, a reservation is spent.
	local.CancelAt(&first, t0)
	d := l.AllowNAt(t0.Add(4*time.Second), "k", 1)
	assert.True(t, d.Allowed(), "4s on, after cancelling a spent one: %+v", d)
}

func TestReserveNeedsABucket(t *testing.T) {
	l := newLimiter(t, local.Limit{Algorithm: local.FixedWindow, Quota: 1, Window: time.Second}, local.Config{})
	_, err := l.ReserveAt(t0, "k", 1, time.Second)
	assert.ErrorIs(t, err, local.ErrInvalidConfig, "ReserveAt")
	assert.ErrorIs(t, l.Wait(context.Background(), "k", 1), local.ErrInvalidConfig, "Wait")
}

func TestWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		lim := local.Limit{Algorithm: local.LeakyBucket, Quota: 1, Window: time.Second}
		l, err := local.New(lim, local.Config{Clock: clocktest.Wall{}, NoBackgroundSweep: true})
		require.NoError(t, err)
		defer l.Close()
		ctx := context.Background()
		start := time.Now()
		for range 3 {
			require.NoError(t, l.Wait(ctx, "k", 1))
		}
		assert.Equal(t, 2*time.Second, time.Since(start), "the time three waits at 1/s took")

		// A deadline too near fails at once, consuming nothing.
		short, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
		defer cancel()
		before := time.Now()
		require.ErrorIs(t, l.Wait(short, "k", 1), local.ErrLimitExceeded, "a deadline too near")
		assert.Zero(t, time.Since(before), "Wait slept before failing on its deadline")

		// A cancelled wait gives its reservation back.
		cctx, cancelWait := context.WithCancel(ctx)
		done := make(chan error)
		go func() { done <- l.Wait(cctx, "k", 1) }()
		synctest.Wait()
		cancelWait()
		require.ErrorIs(t, <-done, context.Canceled, "a cancelled wait")
		assert.Equal(t, time.Second, l.AllowN("k", 0).ResetAfter(), "reset after: a cancelled reservation kept")
		assert.ErrorIs(t, l.Wait(ctx, "k", 2), local.ErrLimitExceeded, "cost above burst")
		cancelled, c := context.WithCancel(ctx)
		c()
		assert.ErrorIs(t, l.Wait(cancelled, "k", 1), context.Canceled, "done context")
	})
}
