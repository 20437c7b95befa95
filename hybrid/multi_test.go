package hybrid_test

import (
	"context"
	"sync"
	"sync/atomic"
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

// TestAllowMultiHybrid: two hybrid rules on one key, decided as one from
// many goroutines on two nodes while their rounds run: never past the
// tighter limit, and each rule charged exactly the admitted requests on
// each node (no partial charge), as Redis holds it once both nodes flushed.
func TestAllowMultiHybrid(t *testing.T) {
	client := redistest.Client(t, redistest.Addr(t))
	prefix := redistest.Prefix(t)
	ks := syncer.Keyspace{Prefix: prefix}
	const L1, L2 = 1000, 600
	W := time.Second
	clk := clocktest.New(epoch2030.Add(100 * time.Millisecond))
	wid := windowStart(clk, W)
	ids := []string{"a", "b"}
	nodes := make([]*hybrid.Limiter, 2)
	reqs := make([][]hybrid.Request, 2)
	for i, id := range ids {
		nodes[i] = newNode(t, nodeConfig(client, prefix, clk, id, 2))
		r1 := mustRegister(t, nodes[i], hybrid.Rule{Name: "r1", Limit: fixed(L1, W)}, hybrid.Hybrid)
		r2 := mustRegister(t, nodes[i], hybrid.Rule{Name: "r2", Limit: fixed(L2, W)}, hybrid.Hybrid)
		reqs[i] = []hybrid.Request{{Rule: r1, Key: "k", N: 1}, {Rule: r2, Key: "k", N: 1}}
	}
	var admitted [2]atomic.Int64
	var inconsistent atomic.Int64
	const goroutines, perStep, steps = 6, 10, 50
	for range steps {
		var wg sync.WaitGroup
		for i, l := range nodes {
			for range goroutines {
				wg.Add(1)
				go func() {
					defer wg.Done()
					out := make([]local.Decision, 2)
					for range perStep {
						ok, err := l.AllowMulti(context.Background(), reqs[i], out)
						if !assert.NoError(t, err, "AllowMulti") {
							return
						}
						if ok != (out[0].Allowed() && out[1].Allowed()) || !ok && (out[0].Allowed() || out[1].Allowed()) {
							inconsistent.Add(1) // TestAllowMultiRefusedDecisions checks them
						}
						if ok {
							admitted[i].Add(1)
						}
					}
				}()
			}
			// The node's round runs while its requests are decided.
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, err := hybridsim.SyncAt(context.Background(), l, clk.Now())
				assert.NoError(t, err, "SyncAt")
			}()
		}
		wg.Wait()
		clk.Add(10 * time.Millisecond)
	}
	require.Equal(t, wid, windowStart(clk, W), "the test left its window")
	if n := inconsistent.Load(); n > 0 {
		t.Logf("%d refused multi-rule decisions had a Decision with Allowed true (see TestAllowMultiRefusedDecisions)", n)
	}
	for _, l := range nodes {
		require.NoError(t, l.Shutdown(context.Background()), "Shutdown")
	}
	s1 := readWindow(t, client, ks, "r1", "k", W, wid)
	s2 := readWindow(t, client, ks, "r2", "k", W, wid)
	total := admitted[0].Load() + admitted[1].Load()
	t.Logf("admitted a %d, b %d (offered %d); Redis r1 u %v g %v; r2 u %v g %v", admitted[0].Load(), admitted[1].Load(),
		2*goroutines*perStep*steps, s1.u, s1.g, s2.u, s2.g)
	// Over-admission: none but the cold-start allowance of the tighter rule.
	allowance := int64(float64(L2)*config.Epsilon/2) + 1
	assert.LessOrEqual(t, total, L2+2*allowance, "multi-rule requests admitted: the tighter limit is %d (+ allowance %d per node)", L2, allowance)
	assert.GreaterOrEqual(t, total, int64(L2/2), "multi-rule requests admitted at 20× the limit %d", L2)
	for i, id := range ids {
		n := admitted[i].Load()
		assert.Equal(t, n, s1.u[id], "node %s: Redis charged r1 the multi-rule requests it admitted", id)
		assert.Equal(t, n, s2.u[id], "node %s: Redis charged r2 the multi-rule requests it admitted", id)
		assert.LessOrEqual(t, s1.g[id], s1.u[id], "node %s: r1 grants left after Shutdown", id)
		assert.LessOrEqual(t, s2.g[id], s2.u[id], "node %s: r2 grants left after Shutdown", id)
	}
}

// armedHook runs f once, after the next pipeline it sees once armed.
type armedHook struct {
	armed atomic.Bool
	f     func()
}

func (h *armedHook) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (h *armedHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (h *armedHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		if h.armed.Swap(false) {
			h.f()
		}
		return err
	}
}

// TestAllowMultiMixed: a central rule (a limit too small to lease) and a
// hybrid rule decided as one: never past either limit, the central charge
// refunded when the hybrid rule refuses (also when it refuses between the
// central charge and its own), and local rules combined with both.
func TestAllowMultiMixed(t *testing.T) {
	ctx := context.Background()
	prefix := redistest.Prefix(t)
	ks := syncer.Keyspace{Prefix: prefix}
	W := time.Second
	clk := clocktest.New(epoch2030.Add(100 * time.Millisecond))
	wid := windowStart(clk, W)
	type node struct {
		l              *hybrid.Limiter
		cen, hyb, hyb2 *hybrid.Rule
		hook           *armedHook
	}
	const LC, LH = 8, 1000
	nodes := make([]node, 2)
	for i, id := range []string{"a", "b"} {
		c := redistest.Client(t, redistest.Addr(t))
		hook := &armedHook{}
		c.AddHook(hook)
		l := newNode(t, nodeConfig(c, prefix, clk, id, 2))
		nodes[i] = node{
			l:    l,
			cen:  mustRegister(t, l, hybrid.Rule{Name: "small", Mode: hybrid.Central, Limit: fixed(LC, W)}, hybrid.Central),
			hyb:  mustRegister(t, l, hybrid.Rule{Name: "big", Limit: fixed(LH, W)}, hybrid.Hybrid),
			hyb2: mustRegister(t, l, hybrid.Rule{Name: "big2", Limit: fixed(LH, W)}, hybrid.Hybrid),
			hook: hook,
		}
	}
	centralLeft := func(n node, key string) int64 {
		t.Helper()
		d, err := n.l.AllowN(ctx, n.cen, key, 0)
		require.NoError(t, err)
		return d.Remaining()
	}

	t.Run("concurrent", func(t *testing.T) {
		var admitted atomic.Int64
		for range 5 {
			var wg sync.WaitGroup
			for _, n := range nodes {
				for range 4 {
					wg.Add(1)
					go func() {
						defer wg.Done()
						out := make([]local.Decision, 2)
						for range 5 {
							ok, err := n.l.AllowMulti(ctx, []hybrid.Request{{Rule: n.cen, Key: "k", N: 1}, {Rule: n.hyb, Key: "k", N: 1}}, out)
							if !assert.NoError(t, err, "AllowMulti") {
								return
							}
							if ok {
								admitted.Add(1)
							}
						}
					}()
				}
				wg.Add(1)
				go func() {
					defer wg.Done()
					hybridsim.SyncAt(ctx, n.l, clk.Now())
				}()
			}
			wg.Wait()
			clk.Add(10 * time.Millisecond)
		}
		got := admitted.Load()
		assert.Positive(t, got, "multi-rule requests admitted")
		assert.LessOrEqual(t, got, int64(LC), "multi-rule requests admitted: at most the central limit")
		assert.Equal(t, LC-got, centralLeft(nodes[0], "k"), "central rule's room left after %d admitted: a refused request stays uncharged", got)
		for _, n := range nodes {
			require.NoError(t, n.l.Shutdown(ctx), "Shutdown")
		}
		st := readWindow(t, redistest.Client(t, redistest.Addr(t)), ks, "big", "k", W, wid)
		assert.Equal(t, got, st.sumU(), "hybrid rule charged (%v) what was admitted", st.u)
	})

	// Fresh nodes for the deterministic cases.
	for i, id := range []string{"c", "d"} {
		c := redistest.Client(t, redistest.Addr(t))
		hook := &armedHook{}
		c.AddHook(hook)
		l := newNode(t, nodeConfig(c, prefix, clk, id, 2))
		nodes[i] = node{
			l:    l,
			cen:  mustRegister(t, l, hybrid.Rule{Name: "small", Mode: hybrid.Central, Limit: fixed(LC, W)}, hybrid.Central),
			hyb:  mustRegister(t, l, hybrid.Rule{Name: "big", Limit: fixed(LH, W)}, hybrid.Hybrid),
			hyb2: mustRegister(t, l, hybrid.Rule{Name: "big2", Limit: fixed(LH, W)}, hybrid.Hybrid),
			hook: hook,
		}
	}
	n := nodes[0]
	out := make([]local.Decision, 3)

	t.Run("hybrid refuses first", func(t *testing.T) {
		// Exhaust the hybrid rule's key on this node (no lease, no room).
		exhaust(t, n.l, n.hyb, "x", 10*LH)
		before := centralLeft(n, "x")
		ok, err := n.l.AllowMulti(ctx, []hybrid.Request{{Rule: n.cen, Key: "x", N: 1}, {Rule: n.hyb, Key: "x", N: 1}}, out)
		require.NoError(t, err, "AllowMulti")
		require.False(t, ok, "AllowMulti: %+v", out[:2])
		require.False(t, out[0].Allowed() || out[1].Allowed(), "AllowMulti refused, its decisions: %+v", out[:2])
		assert.Equal(t, before, centralLeft(n, "x"), "central rule's room left: not charged")
	})

	t.Run("hybrid refuses after the central charge", func(t *testing.T) {
		// Between the central charge and the hybrid commit, another request
		// takes the hybrid key's last room.
		key := "y"
		// A hybrid lease for the key, then all of it but one used.
		n.l.Allow(ctx, n.hyb, key)
		clk.Add(10 * time.Millisecond)
		syncOK(t, n.l, clk)
		var taken int
		n.hook.f = func() {
			for {
				d, _ := n.l.Allow(ctx, n.hyb, key)
				if !d.Allowed() {
					return
				}
				taken++
			}
		}
		before := centralLeft(n, key)
		n.hook.armed.Store(true)
		ok, err := n.l.AllowMulti(ctx, []hybrid.Request{{Rule: n.cen, Key: key, N: 1}, {Rule: n.hyb, Key: key, N: 1}}, out)
		require.False(t, n.hook.armed.Load(), "the hook did not run")
		require.NotZero(t, taken, "the hook took the hybrid room")
		require.False(t, ok || out[0].Allowed() || out[1].Allowed(), "AllowMulti admitted after the hybrid room was taken: %v, %v, %+v", ok, err, out[:2])
		assert.NoError(t, err, "AllowMulti")
		assert.Equal(t, before, centralLeft(n, key), "central rule's room left: the charge refunded")
	})

	t.Run("local rules combine", func(t *testing.T) {
		// Local rules decide with central and hybrid ones, each charged.
		loc := mustRegister(t, n.l, hybrid.Rule{Name: "loc", Limit: fixed(10, W), Mode: hybrid.Local}, hybrid.Local)
		for i, reqs := range [][]hybrid.Request{
			{{Rule: loc, Key: "m", N: 1}, {Rule: n.hyb, Key: "m", N: 1}},
			{{Rule: n.cen, Key: "m", N: 1}, {Rule: loc, Key: "m", N: 1}},
		} {
			ok, err := n.l.AllowMulti(ctx, reqs, out)
			require.NoError(t, err)
			assert.True(t, ok, "%v: %v", reqs, out[:2])
			d, err := n.l.AllowN(ctx, loc, "m", 0)
			require.NoError(t, err)
			assert.Equal(t, int64(10-i-1), d.Remaining(), "local rule after %d admitted", i+1)
		}
		assert.Equal(t, int64(LC-1), centralLeft(n, "m"), "central rule")
	})

	t.Run("edges", func(t *testing.T) {
		ok, err := n.l.AllowMulti(ctx, nil, nil)
		assert.NoError(t, err, "no requests")
		assert.True(t, ok, "no requests")
		// The same hybrid key twice counts twice; over MaxCost together it is
		// refused as too costly, charging nothing.
		ok, err = n.l.AllowMulti(ctx, []hybrid.Request{{Rule: n.hyb2, Key: "e", N: LH/2 + 1}, {Rule: n.hyb2, Key: "e", N: LH / 2}}, out)
		assert.NoError(t, err, "the same key twice past the limit")
		assert.False(t, ok, "the same key twice past the limit: %+v", out[:2])
		assert.Equal(t, local.ReasonCostTooHigh, out[0].Reason(), "the same key twice past the limit: %+v", out[:2])
		assert.Panics(t, func() {
			n.l.AllowMulti(ctx, []hybrid.Request{{Rule: n.hyb, Key: "p", N: 1}, {Rule: n.hyb2, Key: "p", N: 1}}, out[:1])
		}, "AllowMulti with out shorter than reqs")
	})
}

// TestAllowMultiRefusedDecisions: a refused multi-rule decision reports
// every request not allowed, the rules with room as ReasonOK (as
// local.AllowMultiAt does), in every mode combination.
func TestAllowMultiRefusedDecisions(t *testing.T) {
	ctx := context.Background()
	client := redistest.Client(t, redistest.Addr(t))
	clk := clocktest.New(epoch2030.Add(100 * time.Millisecond))
	l := newNode(t, nodeConfig(client, redistest.Prefix(t), clk, "a", 1))
	wide := mustRegister(t, l, hybrid.Rule{Name: "wide", Limit: fixed(1000, time.Second)}, hybrid.Hybrid)
	tight := mustRegister(t, l, hybrid.Rule{Name: "tight", Limit: fixed(200, time.Second)}, hybrid.Hybrid)
	cen := mustRegister(t, l, hybrid.Rule{Name: "cen", Limit: fixed(1000, time.Second), Mode: hybrid.Central}, hybrid.Central)
	loc1 := mustRegister(t, l, hybrid.Rule{Name: "loc1", Limit: fixed(1000, time.Second), Mode: hybrid.Local}, hybrid.Local)
	loc2 := mustRegister(t, l, hybrid.Rule{Name: "loc2", Limit: fixed(1, time.Second), Mode: hybrid.Local}, hybrid.Local)
	l.Allow(ctx, wide, "k")
	syncOK(t, l, clk)
	exhaust(t, l, tight, "k", 1000)
	l.Allow(ctx, loc2, "k")
	for name, reqs := range map[string][]hybrid.Request{
		"hybrid":         {{Rule: wide, Key: "k", N: 1}, {Rule: tight, Key: "k", N: 1}},
		"central+hybrid": {{Rule: cen, Key: "k", N: 1}, {Rule: tight, Key: "k", N: 1}},
		"local":          {{Rule: loc1, Key: "k", N: 1}, {Rule: loc2, Key: "k", N: 1}},
		"hybrid+local":   {{Rule: wide, Key: "k", N: 1}, {Rule: loc2, Key: "k", N: 1}},
		"local+hybrid":   {{Rule: loc1, Key: "k", N: 1}, {Rule: tight, Key: "k", N: 1}},
		"central+local":  {{Rule: cen, Key: "k", N: 1}, {Rule: loc2, Key: "k", N: 1}},
	} {
		out := make([]local.Decision, 2)
		ok, err := l.AllowMulti(ctx, reqs, out)
		require.NoError(t, err, name)
		require.False(t, ok, name)
		assert.False(t, out[0].Allowed() || out[1].Allowed(), "bug: %s: refused, yet %+v", name, out)
		assert.Equal(t, local.ReasonOK, out[0].Reason(), "%s: the first request's reason: it had room", name)
		assert.NotEqual(t, local.ReasonOK, out[1].Reason(), "%s: the second request's reason: why it refused", name)
	}
}
