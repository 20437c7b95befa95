package local_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/local"
)

var bucketAlgorithms = []local.Algorithm{local.TokenBucket, local.LeakyBucket, local.GCRA}

// TestQueuedFigures holds the figures of decisions on a key whose
// reservations queue past the burst: they are measured from the time
// given, not from the earliest time a meter could have stored the state.
func TestQueuedFigures(t *testing.T) {
	ms := time.Millisecond
	for _, algo := range bucketAlgorithms {
		t.Run(algo.String(), func(t *testing.T) {
			// 10 per second, burst 2: two reservations of 2 at t0 act at 0
			// and 200ms, and the key is full again at 400ms.
			lim := local.MustLimit(local.Params{Algorithm: algo, Limit: 10, Window: time.Second, Burst: 2})
			l := newLimiter(t, lim, local.Config{})
			for _, want := range []time.Duration{0, 200 * ms} {
				r, err := l.ReserveAt(t0, "k", 2, time.Second)
				require.NoError(t, err)
				require.True(t, r.OK)
				require.Equal(t, want, r.Delay)
			}

			peek := l.AllowNAt(t0.Add(100*ms), "k", 0)
			assert.False(t, peek.Allowed(), "a peek while the queue is past the burst: %v", peek)
			assert.Equal(t, int64(0), peek.Remaining())
			assert.Equal(t, 300*ms, peek.ResetAfter(), "peek: full again at 400ms")
			assert.Equal(t, 100*ms, peek.RetryAfter(), "peek: the queue is within the burst at 200ms")

			r, err := l.ReserveAt(t0.Add(100*ms), "k", 1, 0)
			require.NoError(t, err)
			assert.False(t, r.OK)
			assert.Equal(t, 200*ms, r.Delay, "a refused reservation reports the delay it needed")

			d := l.AllowNAt(t0.Add(100*ms), "k", 1)
			assert.False(t, d.Allowed())
			assert.Equal(t, 200*ms, d.RetryAfter(), "one token is free at 300ms")
			assert.Equal(t, 300*ms, d.ResetAfter(), "full again at 400ms")

			// The client that retries after RetryAfter is admitted.
			assert.False(t, l.AllowNAt(t0.Add(299*ms), "k", 1).Allowed())
			d = l.AllowNAt(t0.Add(300*ms), "k", 1)
			assert.True(t, d.Allowed(), "%v", d)
			assert.Equal(t, 200*ms, d.ResetAfter())
		})
	}
}

// TestSetLimitKeepsQueuedDebt holds SetLimit to keep what reservations
// queued past the burst consumed: their debt is repaid at the new rate
// before the new limit admits anything.
func TestSetLimitKeepsQueuedDebt(t *testing.T) {
	ms := time.Millisecond
	for _, algo := range bucketAlgorithms {
		t.Run(algo.String(), func(t *testing.T) {
			l := newLimiter(t, local.MustLimit(local.Params{Algorithm: algo, Limit: 10, Window: time.Second, Burst: 1}), local.Config{})
			var acts []time.Duration
			for range 4 {
				r, err := l.ReserveAt(t0, "k", 1, time.Second)
				require.NoError(t, err)
				require.True(t, r.OK)
				acts = append(acts, r.Delay)
			}
			require.Equal(t, []time.Duration{0, 100 * ms, 200 * ms, 300 * ms}, acts)

			require.NoError(t, l.SetLimit(local.MustLimit(local.Params{Algorithm: algo, Limit: 20, Window: time.Second, Burst: 1})))
			var later []time.Duration
			for {
				r, err := l.ReserveAt(t0, "k", 1, 300*ms)
				require.NoError(t, err)
				if !r.OK {
					break
				}
				later = append(later, r.Delay)
			}
			// Three tokens of debt at 50ms each: the new limit's first
			// request acts at 200ms.
			assert.Equal(t, []time.Duration{200 * ms, 250 * ms, 300 * ms}, later)
			acts = append(acts, later...)
			assert.LessOrEqual(t, len(acts), 1+20*3/10, "acts in [0, 300ms]: %v", acts)
		})
	}
}
