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
	"github.com/hybridlimit/hybridlimit/internal/clocktest"
	"github.com/hybridlimit/hybridlimit/internal/config"
	"github.com/hybridlimit/hybridlimit/internal/hybridsim"
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
// and scripts on clk (hybridsim.Virtual): the test moves time, the loop's rounds
// and their round trips are real.
func liveNode(t testing.TB, c redis.UniversalClient, prefix string, clk local.Clock, id string, nodes int) *hybrid.Limiter {
	t.Helper()
	return newNode(t, hybridsim.Config(hybrid.Config{
		Redis: c, Keyspace: syncer.Keyspace{Prefix: prefix}, Clock: clk, Logger: quiet,
		Sync: hybrid.SyncConfig{Interval: testInterval, NodeID: id, Nodes: nodes},
	}, false, true))
}

// elapse moves clk on by d, in sync intervals, each followed by a round
// on every node, as their loops would run on a clock that moves on its
// own.
func elapse(t testing.TB, clk *clocktest.Clock, d time.Duration, nodes ...*hybrid.Limiter) {
	t.Helper()
	for end := clk.Now().Add(d); clk.Now().Before(end); {
		clk.Add(testInterval)
		for _, l := range nodes {
			syncOK(t, l, clk)
		}
	}
}

// exact replays requests on one local.Limiter of lim: what an exact
// limiter admits.
type exact struct{ l *local.Limiter }

func newExact(t testing.TB, lim hybrid.Limit) *exact {
	t.Helper()
	l, err := local.New(lim, local.Config{Clock: clocktest.Wall{}, NoBackgroundSweep: true})
	require.NoError(t, err)
	t.Cleanup(func() { l.Close() })
	return &exact{l}
}

func (e *exact) allow(at time.Time, key string) bool { return e.l.AllowNAt(at, key, 1).Allowed() }

// TestFirstRequestsInARow: five requests in a row on a new key, under a
// GCRA of 100/s with a burst of 20 (the README's quick start): an exact
// limiter admits all five.
func TestFirstRequestsInARow(t *testing.T) {
	for _, lim := range []hybrid.Limit{
		local.Limit{Algorithm: local.GCRA, Quota: 100, Window: time.Second, Burst: 20},
		local.Limit{Algorithm: local.TokenBucket, Quota: 100, Window: time.Second, Burst: 20},
		fixed(20, 10*time.Second),
	} {
		t.Run(lim.Algorithm.String(), func(t *testing.T) {
			client := redistest.Client(t, redistest.Addr(t))
			clk := clocktest.New(epoch2030.Add(time.Second))
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
	clk := clocktest.New(epoch2030.Add(time.Second))
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
			clk := clocktest.New(epoch2030)
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

// TestTwoRulesWhileRedisDown: with Redis down, two rules on one request
// admit what each rule alone would under the same policies: at 2 requests
// per second under both limits, one node, every request under FailLocal
// and FailOpen; none when one of the rules is FailClosed.
func TestTwoRulesWhileRedisDown(t *testing.T) {
	for _, c := range []struct {
		policy hybrid.Policy
		want   int
	}{{hybrid.FailLocal, 16}, {hybrid.FailOpen, 16}, {hybrid.FailClosed, 0}} {
		t.Run(c.policy.String(), func(t *testing.T) {
			srv := redistest.Start(t)
			W := 4 * time.Second
			clk := clocktest.New(epoch2030)
			l := newNode(t, nodeConfig(redistest.Client(t, srv.Addr), redistest.Prefix(t), clk, "a", 1))
			ip := mustRegister(t, l, hybrid.Rule{Name: "ip", Limit: fixed(20, W)}, hybrid.Hybrid)
			key := mustRegister(t, l, hybrid.Rule{Name: "key", Limit: fixed(10, W), Policy: c.policy}, hybrid.Hybrid)
			alone := mustRegister(t, l, hybrid.Rule{Name: "alone", Limit: fixed(10, W), Policy: c.policy}, hybrid.Hybrid)
			srv.Kill()
			markUnavailable(t, l, ip, clk)
			out := make([]hybrid.Decision, 2)
			both, one := 0, 0
			for range 16 {
				ok, err := l.AllowMulti(context.Background(), []hybrid.Request{{Rule: ip, Key: "198.51.100.1", N: 1}, {Rule: key, Key: "k1", N: 1}}, out)
				require.NoError(t, err)
				if ok {
					both++
				}
				d, err := l.Allow(context.Background(), alone, "k1")
				require.NoError(t, err)
				if d.Allowed() {
					one++
				}
				clk.Add(500 * time.Millisecond)
			}
			assert.Equal(t, c.want, one, "one rule alone")
			assert.Equal(t, one, both, "two rules as one")
		})
	}
}

// TestRetryAtRetryAfter: a key used up across two nodes is refused with
// RetryAfter at the window's end; a retry then, on either node, is
// admitted.
func TestRetryAtRetryAfter(t *testing.T) {
	client := redistest.Client(t, redistest.Addr(t))
	prefix := redistest.Prefix(t)
	W := 4 * time.Second
	clk := clocktest.New(epoch2030.Add(time.Second))
	a := liveNode(t, client, prefix, clk, "a", 2)
	b := liveNode(t, redistest.Client(t, redistest.Addr(t)), prefix, clk, "b", 2)
	ra := mustRegister(t, a, hybrid.Rule{Name: "r", Limit: fixed(10, W)}, hybrid.Hybrid)
	rb := mustRegister(t, b, hybrid.Rule{Name: "r", Limit: fixed(10, W)}, hybrid.Hybrid)
	ctx := context.Background()
	admitted := 0
	var last hybrid.Decision
	for i := range 14 {
		l, r := a, ra
		if i%2 == 1 {
			l, r = b, rb
		}
		d, err := l.Allow(ctx, r, "k")
		require.NoError(t, err)
		if d.Allowed() {
			admitted++
		} else {
			last = d
		}
		clk.Add(10 * time.Millisecond)
	}
	// No false refusal; past the limit, at most the cold-start allowance of
	// a node that admitted before it saw the other's requests.
	lim := 10.0
	allowance := int(lim*config.Epsilon/2) + 1
	require.GreaterOrEqual(t, admitted, 10, "the limit, across the two nodes")
	require.LessOrEqual(t, admitted, 10+allowance, "the limit and one node's cold-start allowance")
	require.Equal(t, local.ReasonLimited, last.Reason())
	// The window's end, as the nodes measure Redis's clock: within the
	// time the test moved the clock while an exchange was out.
	end := epoch2030.Add(W)
	assert.InDelta(t, end.Sub(clk.Now())+10*time.Millisecond, last.RetryAfter(), float64(50*time.Millisecond), "RetryAfter: the window's end")
	clk.Set(clk.Now().Add(last.RetryAfter() - 10*time.Millisecond))
	for i, n := range []*hybrid.Limiter{a, b} {
		r := []*hybrid.Rule{ra, rb}[i]
		d, err := n.Allow(ctx, r, "k")
		require.NoError(t, err)
		assert.True(t, d.Allowed(), "node %d: a retry at RetryAfter: %v", i, d)
	}
}

// TestRaiseLimit: a key used up on two nodes, its limit raised in the same
// window: the nodes admit at once what an exact limiter with the same
// change admits (for a fixed window of 8 raised to 16, 8 more; a bucket
// keeps its available tokens, and refills at the new rate).
func TestRaiseLimit(t *testing.T) {
	for _, lim := range []struct {
		old, new hybrid.Limit
	}{
		{fixed(8, time.Minute), fixed(16, time.Minute)},
		{local.Limit{Algorithm: local.GCRA, Quota: 8, Window: time.Minute, Burst: 8},
			local.Limit{Algorithm: local.GCRA, Quota: 60, Window: time.Minute, Burst: 16}},
	} {
		t.Run(lim.old.Algorithm.String(), func(t *testing.T) {
			client := redistest.Client(t, redistest.Addr(t))
			prefix := redistest.Prefix(t)
			clk := clocktest.New(epoch2030.Add(time.Second))
			a := liveNode(t, client, prefix, clk, "a", 2)
			b := liveNode(t, redistest.Client(t, redistest.Addr(t)), prefix, clk, "b", 2)
			ra := mustRegister(t, a, hybrid.Rule{Name: "r", Limit: lim.old}, hybrid.Hybrid)
			rb := mustRegister(t, b, hybrid.Rule{Name: "r", Limit: lim.old}, hybrid.Hybrid)
			ex := newExact(t, lim.old)
			ctx := context.Background()
			// Alternate requests on the two nodes, 1ms apart, as the exact
			// limiter sees them: how many each admits.
			run := func(n int) (got, want int) {
				for i := range n {
					l, r := a, ra
					if i%2 == 1 {
						l, r = b, rb
					}
					d, err := l.Allow(ctx, r, "k")
					require.NoError(t, err)
					if d.Allowed() {
						got++
					}
					if ex.allow(clk.Now(), "k") {
						want++
					}
					clk.Add(time.Millisecond)
				}
				return got, want
			}
			got, want := run(40)
			require.Equal(t, 8, want, "the old limit")
			require.LessOrEqual(t, got-want, 1, "a node's cold-start allowance at most")
			require.NoError(t, a.SetLimit(ra, lim.new))
			require.NoError(t, b.SetLimit(rb, lim.new))
			require.NoError(t, ex.l.SetLimit(lim.new))
			got2, want2 := run(40)
			assert.GreaterOrEqual(t, got+got2, want+want2, "admitted in all once the limit was raised: %d after", got2)
			elapse(t, clk, 10*time.Second, a, b)
			got3, want3 := run(40)
			// A bucket's shares refill apart, each up to its part of the
			// burst, until an idle one is given back (IdleRelease): a
			// token or two of the rate is lost where one bucket would
			// keep it.
			lost := 0
			if lim.new.Algorithm != local.FixedWindow {
				lost = 2
			}
			assert.GreaterOrEqual(t, got+got2+got3, want+want2+want3-lost, "admitted in all 10s after the limit was raised: %d after, %d exact", got3, want3)
		})
	}
}

// TestOneClientTwoNodes: a new key used by one client past its limit,
// through one of two nodes or both, with one rule or two as one: the nodes
// admit the whole limit, as an exact limiter does, and their refusals say
// the window's end, not a retry in a few milliseconds.
func TestOneClientTwoNodes(t *testing.T) {
	for _, c := range []struct {
		name       string
		both, pair bool
	}{{"one node", false, false}, {"both nodes", true, false}, {"two rules", true, true}} {
		t.Run(c.name, func(t *testing.T) {
			client := redistest.Client(t, redistest.Addr(t))
			prefix := redistest.Prefix(t)
			W := 10 * time.Second
			clk := clocktest.New(epoch2030.Add(time.Second))
			nodes := []*hybrid.Limiter{
				liveNode(t, client, prefix, clk, "a", 2),
				liveNode(t, redistest.Client(t, redistest.Addr(t)), prefix, clk, "b", 2),
			}
			var ip, user []*hybrid.Rule
			for _, l := range nodes {
				ip = append(ip, mustRegister(t, l, hybrid.Rule{Name: "ip", Limit: fixed(20, W)}, hybrid.Hybrid))
				user = append(user, mustRegister(t, l, hybrid.Rule{Name: "user", Limit: fixed(100, W)}, hybrid.Hybrid))
			}
			elapse(t, clk, 300*time.Millisecond, nodes...) // both nodes registered: two live
			admitted := 0
			var refusals []hybrid.Decision
			out := make([]hybrid.Decision, 2)
			for i := range 40 {
				n := 0
				if c.both {
					n = i % 2
				}
				var d hybrid.Decision
				if c.pair {
					_, err := nodes[n].AllowMulti(context.Background(), []hybrid.Request{{Rule: ip[n], Key: "203.0.113.9", N: 1}, {Rule: user[n], Key: "u1", N: 1}}, out)
					require.NoError(t, err)
					d = out[0]
				} else {
					var err error
					d, err = nodes[n].Allow(context.Background(), ip[n], "203.0.113.9")
					require.NoError(t, err)
				}
				if d.Allowed() {
					admitted++
				} else {
					refusals = append(refusals, d)
				}
				clk.Add(50 * time.Millisecond)
			}
			// The limit; and a node's first request on the key, decided
			// within its cold-start allowance, may come on top of it.
			assert.GreaterOrEqual(t, admitted, 20, "no false refusal")
			assert.LessOrEqual(t, admitted, 22, "the limit and the nodes' allowances")
			for _, d := range refusals {
				assert.Greater(t, d.RetryAfter(), time.Second, "a refusal in a window used up: %v", d)
			}
		})
	}
}
