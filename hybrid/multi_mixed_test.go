package hybrid_test

import (
	"context"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"testing"
	"time"

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

// mixedRules are a node's rules of each mode, by mode's name.
type mixedRules map[string]*hybrid.Rule

// registerMixed registers on l a fixed-window rule of each mode, of the
// limits given by mode's name, named after the mode.
func registerMixed(t testing.TB, l *hybrid.Limiter, w time.Duration, limits map[string]int64, policy hybrid.Policy) mixedRules {
	t.Helper()
	rs := mixedRules{}
	for _, m := range []hybrid.Mode{hybrid.Local, hybrid.Hybrid, hybrid.Central} {
		rs[m.String()] = mustRegister(t, l, hybrid.Rule{Name: m.String(), Limit: fixed(limits[m.String()], w), Mode: m, Policy: policy}, m)
	}
	return rs
}

// left returns what r has left for key on l, charging nothing.
func left(t testing.TB, l *hybrid.Limiter, r *hybrid.Rule, key string) int64 {
	t.Helper()
	d, err := l.AllowN(context.Background(), r, key, 0)
	require.NoError(t, err)
	return d.Remaining()
}

// mixedRequests returns a request of cost 1 for key per rule named.
func mixedRequests(rs mixedRules, key string, names []string) []hybrid.Request {
	reqs := make([]hybrid.Request, len(names))
	for i, n := range names {
		reqs[i] = hybrid.Request{Rule: rs[n], Key: key, N: 1}
	}
	return reqs
}

// mixedCombos are the combinations of Local rules with distributed ones,
// in both orders.
var mixedCombos = [][]string{
	{"local", "hybrid"},
	{"local", "central"},
	{"central", "local"},
	{"local", "hybrid", "central"},
	{"hybrid", "central", "local"},
}

// TestAllowMultiMixedModes: Local rules decided as one with Hybrid and
// Central ones, on one node: admitted, and charged to every rule, only
// when every rule has room; refused by any one rule, charged to none.
func TestAllowMultiMixedModes(t *testing.T) {
	ctx := context.Background()
	clk := clocktest.New(epoch2030.Add(100 * time.Millisecond))
	l := newNode(t, nodeConfig(redistest.Client(t, redistest.Addr(t)), redistest.Prefix(t), clk, "a", 1))
	limits := map[string]int64{"local": 5, "hybrid": 50, "central": 5}
	rs := registerMixed(t, l, time.Minute, limits, hybrid.Policy(0))

	// fresh returns a new key whose hybrid lease is held.
	var keys int
	fresh := func(t *testing.T) string {
		keys++
		key := fmt.Sprintf("k%d", keys)
		d, err := l.Allow(ctx, rs["hybrid"], key)
		require.NoError(t, err)
		require.True(t, d.Allowed(), "the hybrid key's first request: %v", d)
		syncOK(t, l, clk)
		return key
	}
	// lefts returns what each rule named has left for key.
	lefts := func(t *testing.T, key string, names []string) map[string]int64 {
		m := map[string]int64{}
		for _, n := range names {
			m[n] = left(t, l, rs[n], key)
		}
		return m
	}

	for _, combo := range mixedCombos {
		name := fmt.Sprint(combo)
		t.Run(name+"/admitted", func(t *testing.T) {
			key := fresh(t)
			before := lefts(t, key, combo)
			out := make([]hybrid.Decision, len(combo))
			ok, err := l.AllowMulti(ctx, mixedRequests(rs, key, combo), out)
			require.NoError(t, err)
			require.True(t, ok, "every rule has room: %v", out)
			after := lefts(t, key, combo)
			for i, n := range combo {
				assert.True(t, out[i].Allowed(), "%s: %v", n, out[i])
				assert.Equal(t, before[n]-1, after[n], "%s: charged %d", n, before[n]-after[n])
				assert.Equal(t, before[n]-1, out[i].Remaining(), "%s's Decision", n)
			}
		})
		for _, refusing := range combo {
			t.Run(name+"/refused by "+refusing, func(t *testing.T) {
				key := fresh(t)
				if refusing == "hybrid" {
					exhaust(t, l, rs[refusing], key, 1000)
				} else {
					d, err := l.AllowN(ctx, rs[refusing], key, left(t, l, rs[refusing], key))
					require.NoError(t, err)
					require.True(t, d.Allowed(), "spending %s: %v", refusing, d)
				}
				before := lefts(t, key, combo)
				out := make([]hybrid.Decision, len(combo))
				ok, err := l.AllowMulti(ctx, mixedRequests(rs, key, combo), out)
				require.NoError(t, err)
				assert.False(t, ok, "%s has no room: %v", refusing, out)
				assert.Equal(t, before, lefts(t, key, combo), "a refused request was charged")
				for i, n := range combo {
					assert.False(t, out[i].Allowed(), "%s: %v", n, out[i])
					if n == refusing {
						assert.Equal(t, local.ReasonLimited, out[i].Reason(), "%s refused", n)
					} else {
						assert.Equal(t, local.ReasonOK, out[i].Reason(), "%s had room", n)
						if n != "hybrid" { // a hybrid rule's counts the request
							assert.Equal(t, before[n], out[i].Remaining(), "%s's Decision", n)
						}
					}
				}
			})
		}
	}
}

// TestAllowMultiMixedConcurrent: two nodes decide the same key under a
// Local, a Hybrid and a Central rule as one, from many goroutines, while
// their rounds run; each case makes one rule the tight one. Never past any
// limit (the Local one is per node), and every rule charged exactly the
// requests admitted: no partial charge, every central refund made.
func TestAllowMultiMixedConcurrent(t *testing.T) {
	const wide = 100000
	for _, tight := range []string{"local", "hybrid", "central"} {
		t.Run(tight, func(t *testing.T) {
			ctx := context.Background()
			client := redistest.Client(t, redistest.Addr(t))
			prefix := redistest.Prefix(t)
			W := time.Second
			clk := clocktest.New(epoch2030.Add(100 * time.Millisecond))
			wid := windowStart(clk, W)
			limits := map[string]int64{"local": wide, "hybrid": wide, "central": wide}
			limits[tight] = 20
			ids := []string{"a", "b"}
			nodes := make([]*hybrid.Limiter, len(ids))
			rules := make([]mixedRules, len(ids))
			for i, id := range ids {
				nodes[i] = newNode(t, nodeConfig(client, prefix, clk, id, len(ids)))
				rules[i] = registerMixed(t, nodes[i], W, limits, hybrid.Policy(0))
			}
			names := []string{"hybrid", "local", "central"}
			var admitted [2]atomic.Int64
			var inconsistent atomic.Int64
			const goroutines, perStep, steps = 3, 4, 10
			for range steps {
				var wg sync.WaitGroup
				for i, l := range nodes {
					for range goroutines {
						wg.Go(func() {
							out := make([]hybrid.Decision, len(names))
							reqs := mixedRequests(rules[i], "k", names)
							for range perStep {
								ok, err := l.AllowMulti(ctx, reqs, out)
								if !assert.NoError(t, err) {
									return
								}
								for _, d := range out {
									if d.Allowed() != ok {
										inconsistent.Add(1)
									}
								}
								if ok {
									admitted[i].Add(1)
								}
							}
						})
					}
					wg.Go(func() {
						_, err := hybridsim.SyncAt(ctx, l, clk.Now())
						assert.NoError(t, err)
					})
				}
				wg.Wait()
				clk.Add(10 * time.Millisecond)
			}
			require.Equal(t, wid, windowStart(clk, W), "the test left its window")
			total := admitted[0].Load() + admitted[1].Load()
			t.Logf("admitted a %d, b %d of %d offered", admitted[0].Load(), admitted[1].Load(), 2*goroutines*perStep*steps)
			assert.Zero(t, inconsistent.Load(), "Decisions whose Allowed disagrees with the result")
			assert.Positive(t, total)

			// Past no limit.
			for i := range nodes {
				assert.LessOrEqual(t, admitted[i].Load(), limits["local"], "node %s past its local limit", ids[i])
			}
			assert.LessOrEqual(t, total, limits["central"], "past the central limit")
			allowance := max(1, int64(math.Ceil(config.Epsilon*float64(limits["hybrid"])/float64(len(ids)))))
			assert.LessOrEqual(t, total, limits["hybrid"]+int64(len(ids))*allowance, "past the hybrid limit and the cold-start allowances")
			if tight == "local" {
				assert.Equal(t, 2*limits["local"], total, "the local limit was not reached on both nodes")
			}

			// Charged exactly what was admitted, to every rule.
			for i := range nodes {
				assert.Equal(t, limits["local"]-admitted[i].Load(), left(t, nodes[i], rules[i]["local"], "k"), "node %s's local rule", ids[i])
			}
			assert.Equal(t, limits["central"]-total, left(t, nodes[0], rules[0]["central"], "k"), "central rule: a refused request stayed charged")
			for _, l := range nodes {
				require.NoError(t, l.Shutdown(ctx))
			}
			st := readWindow(t, client, syncer.Keyspace{Prefix: prefix}, "hybrid", "k", W, wid)
			for i, id := range ids {
				assert.Equal(t, admitted[i].Load(), st.u[id], "node %s: hybrid rule charged %d, %d admitted", id, st.u[id], admitted[i].Load())
			}
		})
	}
}

// TestAllowMultiMixedDegraded: with Redis killed and the circuit breaker
// open, the central rules of a mixed decision are decided by their failure
// policies, without error, and the local and hybrid rules are charged only
// when the whole is admitted.
func TestAllowMultiMixedDegraded(t *testing.T) {
	ctx := context.Background()
	srv := redistest.Start(t)
	clk := clocktest.New(epoch2030.Add(100 * time.Millisecond))
	cfg := nodeConfig(redistest.Client(t, srv.Addr), redistest.Prefix(t), clk, "a", 1)
	cfg.Timeout = 200 * time.Millisecond
	l := newNode(t, cfg)
	limits := map[string]int64{"local": 10, "hybrid": 100, "central": 2}
	rs := registerMixed(t, l, time.Minute, limits, hybrid.FailLocal)
	for _, p := range []hybrid.Policy{hybrid.FailOpen, hybrid.FailClosed} {
		rs[p.String()] = mustRegister(t, l, hybrid.Rule{Name: p.String(), Limit: fixed(limits["central"], time.Minute), Mode: hybrid.Central, Policy: p}, hybrid.Central)
	}
	// The hybrid key's lease, held through the outage.
	d, err := l.Allow(ctx, rs["hybrid"], "k")
	require.NoError(t, err)
	require.True(t, d.Allowed())
	syncOK(t, l, clk)

	srv.Kill()
	d, err = l.Allow(ctx, rs["central"], "opener")
	require.NoError(t, err)
	require.True(t, d.Degraded(), "the breaker's opening decision: %v", d)

	for _, tc := range []struct {
		central string // the central rule: its policy's name, or "central" for FailLocal
		admits  []bool // one per request, in turn
	}{
		{hybrid.FailOpen.String(), []bool{true, true, true}},
		{hybrid.FailClosed.String(), []bool{false, false}},
		{"central", []bool{true, true, false, false}}, // FailLocal: the limit on this one node
	} {
		t.Run(tc.central, func(t *testing.T) {
			key := "k"
			names := []string{"local", "hybrid", tc.central}
			out := make([]hybrid.Decision, len(names))
			for i, want := range tc.admits {
				loc, hyb := left(t, l, rs["local"], key), left(t, l, rs["hybrid"], key)
				ok, err := l.AllowMulti(ctx, mixedRequests(rs, key, names), out)
				require.NoError(t, err, "request %d", i)
				require.Equal(t, want, ok, "request %d: %v", i, out)
				assert.True(t, out[2].Degraded(), "request %d: the central rule's Decision: %v", i, out[2])
				charged := int64(0)
				if want {
					charged = 1
				} else {
					assert.Equal(t, local.ReasonOK, out[0].Reason(), "request %d: the local rule had room", i)
					assert.NotEqual(t, local.ReasonOK, out[2].Reason(), "request %d: the central rule refused", i)
				}
				assert.Equal(t, loc-charged, left(t, l, rs["local"], key), "request %d: local rule", i)
				assert.Equal(t, hyb-charged, left(t, l, rs["hybrid"], key), "request %d: hybrid rule", i)
			}
		})
	}
}

// TestAllowMultiMixedTakenInBetween: a local rule's last room taken by
// another request between the central charge and the local one: refused,
// the central charge refunded, the hybrid rule not charged.
func TestAllowMultiMixedTakenInBetween(t *testing.T) {
	ctx := context.Background()
	clk := clocktest.New(epoch2030.Add(100 * time.Millisecond))
	c := redistest.Client(t, redistest.Addr(t))
	hook := &armedHook{}
	c.AddHook(hook)
	l := newNode(t, nodeConfig(c, redistest.Prefix(t), clk, "a", 1))
	rs := registerMixed(t, l, time.Minute, map[string]int64{"local": 5, "hybrid": 50, "central": 5}, hybrid.Policy(0))
	for _, combo := range [][]string{{"local", "central"}, {"central", "hybrid", "local"}} {
		t.Run(fmt.Sprint(combo), func(t *testing.T) {
			key := fmt.Sprint(combo)
			_, err := l.Allow(ctx, rs["hybrid"], key)
			require.NoError(t, err)
			syncOK(t, l, clk) // the hybrid key's lease
			d, err := l.AllowN(ctx, rs["local"], key, 4)
			require.NoError(t, err)
			require.True(t, d.Allowed())
			taken := 0
			hook.f = func() {
				if d, _ := l.Allow(ctx, rs["local"], key); d.Allowed() {
					taken++
				}
			}
			cen, hyb := left(t, l, rs["central"], key), left(t, l, rs["hybrid"], key)
			hook.armed.Store(true)
			out := make([]hybrid.Decision, len(combo))
			ok, err := l.AllowMulti(ctx, mixedRequests(rs, key, combo), out)
			require.NoError(t, err)
			require.False(t, hook.armed.Load(), "the hook did not run")
			require.Equal(t, 1, taken, "the hook did not take the local rule's last unit")
			assert.False(t, ok, "admitted after the local room was taken: %v", out)
			for i, n := range combo {
				assert.False(t, out[i].Allowed(), "%s: %v", n, out[i])
			}
			assert.Equal(t, cen, left(t, l, rs["central"], key), "central charge not refunded")
			assert.Equal(t, hyb, left(t, l, rs["hybrid"], key), "hybrid rule charged")
			assert.Zero(t, left(t, l, rs["local"], key))
		})
	}
}
