package local_test

import (
	"context"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/internal/clocktest"
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
			lim := local.Limit{Algorithm: algo, Quota: 10, Window: time.Second, Burst: 2}
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
// queued past the burst consumed: they act at the times they were
// promised, and the new limit admits nothing that would act before the
// last of them.
func TestSetLimitKeepsQueuedDebt(t *testing.T) {
	ms := time.Millisecond
	cases := []struct {
		name     string
		from, to int64           // per second, burst 1
		queued   []time.Duration // the reservations' delays under from
		next     []time.Duration // the next ones' under to
	}{
		// Ten in [0, 300ms] without the debt, where 1 + 20 × 0.3 = 7 is
		// the bound.
		{"faster", 10, 20, []time.Duration{0, 100 * ms, 200 * ms, 300 * ms}, []time.Duration{350 * ms, 400 * ms, 450 * ms}},
		{"slower", 20, 10, []time.Duration{0, 50 * ms, 100 * ms, 150 * ms}, []time.Duration{250 * ms, 350 * ms, 450 * ms}},
	}
	for _, algo := range bucketAlgorithms {
		for _, c := range cases {
			t.Run(algo.String()+"/"+c.name, func(t *testing.T) {
				l := newLimiter(t, local.Limit{Algorithm: algo, Quota: c.from, Window: time.Second, Burst: 1}, local.Config{})
				require.Equal(t, c.queued, reserveOnes(t, l, len(c.queued)))
				require.NoError(t, l.SetLimit(local.Limit{Algorithm: algo, Quota: c.to, Window: time.Second, Burst: 1}))
				assert.Equal(t, c.next, reserveOnes(t, l, len(c.next)))
				assert.False(t, l.AllowNAt(t0.Add(c.queued[len(c.queued)-1]), "k", 1).Allowed(), "an admission alongside the last queued request")
			})
		}
	}
}

// reserveOnes makes k reservations of cost 1 for "k" at t0, each of which
// must be made, and returns their delays.
func reserveOnes(t *testing.T, l *local.Limiter, k int) []time.Duration {
	t.Helper()
	var delays []time.Duration
	for range k {
		r, err := l.ReserveAt(t0, "k", 1, time.Second)
		require.NoError(t, err)
		require.True(t, r.OK, "%+v", r)
		delays = append(delays, r.Delay)
	}
	return delays
}

// TestWaitBound holds Wait, in virtual time (synctest), to the shaper's
// bound: waiters arrive faster than the limit allows, some give up (a
// deadline too near, a context cancelled while they wait), and the limit
// changes while they queue; the waits that return nil, at the times they
// return, never pass burst + rate × length in any interval, with the
// largest burst and rate of the limits used.
func TestWaitBound(t *testing.T) {
	for _, algo := range bucketAlgorithms {
		t.Run(algo.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				limits := []local.Limit{
					local.Limit{Algorithm: algo, Quota: 10, Window: time.Second, Burst: 2},
					local.Limit{Algorithm: algo, Quota: 25, Window: time.Second, Burst: 1},
					local.Limit{Algorithm: algo, Quota: 4, Window: time.Second, Burst: 3},
				}
				const burst, rate = 3, 25 // the largest of the limits'
				l, err := local.New(limits[0], local.Config{Clock: clocktest.Wall{}, NoBackgroundSweep: true})
				require.NoError(t, err)
				defer l.Close()
				rng := rand.New(rand.NewPCG(uint64(algo), 7))
				type act struct {
					at time.Time
					n  int64
				}
				var (
					mu   sync.Mutex
					acts []act
					wg   sync.WaitGroup
				)
				for range 300 {
					n := int64(1 + rng.IntN(2))
					ctx, cancel := context.WithCancel(context.Background())
					switch rng.IntN(4) {
					case 0:
						ctx, cancel = context.WithTimeout(context.Background(), time.Duration(rng.IntN(2000))*time.Millisecond)
					case 1:
						time.AfterFunc(time.Duration(rng.IntN(2000))*time.Millisecond, cancel)
					}
					wg.Go(func() {
						defer cancel()
						if l.Wait(ctx, "k", n) == nil {
							mu.Lock()
							acts = append(acts, act{time.Now(), n})
							mu.Unlock()
						}
					})
					if rng.IntN(20) == 0 {
						require.NoError(t, l.SetLimit(limits[rng.IntN(len(limits))]))
					}
					time.Sleep(time.Duration(rng.IntN(60)) * time.Millisecond) // virtual time: the bubble's clock
				}
				wg.Wait()
				require.NotEmpty(t, acts)
				slices.SortFunc(acts, func(a, b act) int { return a.at.Compare(b.at) })
				for i := range acts {
					var sum int64
					for j := i; j < len(acts); j++ {
						sum += acts[j].n
						length := acts[j].at.Sub(acts[i].at)
						require.LessOrEqual(t, time.Duration(sum-burst)*time.Second, rate*length,
							"[%v, %v] admits %d", acts[i].at, acts[j].at, sum)
					}
				}
			})
		})
	}
}
