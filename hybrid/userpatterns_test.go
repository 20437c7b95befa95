package hybrid_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/hybrid"
	"github.com/hybridlimit/hybridlimit/internal/redistest"
	"github.com/hybridlimit/hybridlimit/local"
	"github.com/hybridlimit/hybridlimit/syncer"
)

// The patterns an API meets first, through the public API with the sync
// loop running: a few requests in a row on a new key, a parallel burst,
// two rules on one request, a retry at RetryAfter, a limit raised. On a
// healthy Redis none of them may refuse what an exact limiter (one
// local.Limiter replaying the same requests) admits.

// liveNode returns a Limiter whose syncer runs its own loop, with decisions
// and scripts on clk (VirtualTime): the test moves time, the loop's rounds
// and their round trips are real.
func liveNode(t testing.TB, c redis.UniversalClient, prefix string, clk local.Clock, id string, nodes int) *hybrid.Limiter {
	t.Helper()
	return newNode(t, hybrid.Config{
		Redis: c, Keyspace: syncer.Keyspace{Prefix: prefix}, Clock: clk, VirtualTime: true, Logger: quiet,
		Sync: syncer.SyncConfig{Interval: testInterval, NodeID: id, Nodes: nodes},
	})
}

// exact replays requests on one local.Limiter of lim: what an exact
// limiter admits.
type exact struct{ l *local.Limiter }

func newExact(t testing.TB, lim local.Limit) *exact {
	t.Helper()
	l, err := local.New(lim, local.Config{Clock: local.SystemClock{}, NoBackgroundSweep: true})
	require.NoError(t, err)
	t.Cleanup(func() { l.Close() })
	return &exact{l}
}

func (e *exact) allow(at time.Time, key string) bool { return e.l.AllowNAt(at, key, 1).Allowed() }

// TestFirstRequestsInARow: five requests in a row on a new key, under a
// GCRA of 100/s with a burst of 20 (the README's quick start): an exact
// limiter admits all five.
func TestFirstRequestsInARow(t *testing.T) {
	for _, lim := range []local.Limit{
		local.MustLimit(local.Params{Algorithm: local.GCRA, Limit: 100, Window: time.Second, Burst: 20}),
		local.MustLimit(local.Params{Algorithm: local.TokenBucket, Limit: 100, Window: time.Second, Burst: 20}),
		fixed(20, 10*time.Second),
	} {
		t.Run(lim.Algorithm().String(), func(t *testing.T) {
			client := redistest.Client(t, redistest.Addr(t))
			clk := newFakeClock(epoch2030.Add(time.Second))
			l := liveNode(t, client, redistest.Prefix(t), clk, "a", 1)
			r := mustRegister(t, l, hybrid.Rule{Name: "api", Limit: lim}, hybrid.Hybrid)
			for i := range 5 {
				d, err := l.Allow(context.Background(), r, "user-42")
				require.NoError(t, err)
				assert.True(t, d.Allowed(), "request %d: %v", i, d)
			}
		})
	}
}

// TestParallelBurstNewKey: ten parallel requests on a new key, five on each
// of two nodes, under a fixed window of 20 per 10 s: all ten are admitted.
func TestParallelBurstNewKey(t *testing.T) {
	client := redistest.Client(t, redistest.Addr(t))
	prefix := redistest.Prefix(t)
	clk := newFakeClock(epoch2030.Add(time.Second))
	var nodes []*hybrid.Limiter
	var rules []*hybrid.Rule
	for _, id := range []string{"a", "b"} {
		l := liveNode(t, redistest.Client(t, redistest.Addr(t)), prefix, clk, id, 2)
		nodes = append(nodes, l)
		rules = append(rules, mustRegister(t, l, hybrid.Rule{Name: "ip", Limit: fixed(20, 10*time.Second)}, hybrid.Hybrid))
	}
	_ = client
	var wg sync.WaitGroup
	var mu sync.Mutex
	admitted := 0
	for i := range 10 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			d, err := nodes[i%2].Allow(context.Background(), rules[i%2], "192.0.2.7")
			assert.NoError(t, err)
			if d.Allowed() {
				mu.Lock()
				admitted++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	assert.Equal(t, 10, admitted)
}

// TestTwoRulesPerRequest: a per-IP rule of 20 and a per-key rule of 10 per
// 4 s, both hybrid, decided as one on one node at 5 requests per second:
// every window admits 10, as an exact limiter does; at 2 per second, under
// both limits, every request is admitted.
func TestTwoRulesPerRequest(t *testing.T) {
	for _, rate := range []int{5, 2} {
		t.Run("", func(t *testing.T) {
			client := redistest.Client(t, redistest.Addr(t))
			W := 4 * time.Second
			clk := newFakeClock(epoch2030)
			l := liveNode(t, client, redistest.Prefix(t), clk, "a", 1)
			ip := mustRegister(t, l, hybrid.Rule{Name: "ip", Limit: fixed(20, W)}, hybrid.Hybrid)
			key := mustRegister(t, l, hybrid.Rule{Name: "key", Limit: fixed(10, W)}, hybrid.Hybrid)
			exIP, exKey := newExact(t, fixed(20, W)), newExact(t, fixed(10, W))
			var got, want []int
			step := time.Second / time.Duration(rate)
			out := make([]hybrid.Decision, 2)
			for w := range 4 {
				got, want = append(got, 0), append(want, 0)
				for range rate * 4 {
					ok, err := l.AllowMulti(context.Background(), []hybrid.Request{{Rule: ip, Key: "198.51.100.1", N: 1}, {Rule: key, Key: "k1", N: 1}}, out)
					require.NoError(t, err)
					if ok {
						got[w]++
					}
					if exactMulti(clk.Now(), exIP, exKey) {
						want[w]++
					}
					clk.Add(step)
				}
			}
			assert.Equal(t, want, got, "admitted per window")
		})
	}
}

// exactMulti decides one request on each of a and b, as one: what an exact
// limiter of the two rules admits.
func exactMulti(at time.Time, a, b *exact) bool {
	out := make([]local.Decision, 2)
	return local.AllowMultiAt(at, []local.Request{{Limiter: a.l, Key: "a", N: 1}, {Limiter: b.l, Key: "b", N: 1}}, out)
}
