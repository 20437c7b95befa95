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
	"github.com/hybridlimit/hybridlimit/internal/config"
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
	clk := newFakeClock(epoch2030.Add(100 * time.Millisecond))
	wid := clk.window(W)
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
						if err != nil {
							t.Errorf("AllowMulti: %v", err)
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
				if _, err := l.SyncAt(context.Background(), clk.Now()); err != nil {
					t.Errorf("SyncAt: %v", err)
				}
			}()
		}
		wg.Wait()
		clk.Add(10 * time.Millisecond)
	}
	if clk.window(W) != wid {
		t.Fatal("the test left its window")
	}
	if n := inconsistent.Load(); n > 0 {
		t.Logf("%d refused multi-rule decisions had a Decision with Allowed true (see TestAllowMultiRefusedDecisions)", n)
	}
	for _, l := range nodes {
		if err := l.Shutdown(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	s1 := readWindow(t, client, ks, "r1", "k", W, wid)
	s2 := readWindow(t, client, ks, "r2", "k", W, wid)
	total := admitted[0].Load() + admitted[1].Load()
	t.Logf("admitted a %d, b %d (offered %d); Redis r1 u %v g %v; r2 u %v g %v", admitted[0].Load(), admitted[1].Load(),
		2*goroutines*perStep*steps, s1.u, s1.g, s2.u, s2.g)
	// Over-admission: none but the cold-start allowance of the tighter rule.
	allowance := int64(float64(L2)*config.Epsilon/2) + 1
	if total > L2+2*allowance {
		t.Errorf("admitted %d multi-rule requests, the tighter limit is %d (+ allowance %d per node)", total, L2, allowance)
	}
	if total < L2/2 {
		t.Errorf("admitted only %d at 20× the limit %d", total, L2)
	}
	for i, id := range ids {
		n := admitted[i].Load()
		if s1.u[id] != n || s2.u[id] != n {
			t.Errorf("node %s admitted %d multi-rule requests; Redis charged r1 %d, r2 %d", id, n, s1.u[id], s2.u[id])
		}
		if s1.g[id] > s1.u[id] || s2.g[id] > s2.u[id] {
			t.Errorf("node %s: grants left after Shutdown: r1 g %d u %d, r2 g %d u %d", id, s1.g[id], s1.u[id], s2.g[id], s2.u[id])
		}
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
	clk := newFakeClock(epoch2030.Add(100 * time.Millisecond))
	wid := clk.window(W)
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
		if err != nil {
			t.Fatal(err)
		}
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
							if err != nil {
								t.Errorf("AllowMulti: %v", err)
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
					n.l.SyncAt(ctx, clk.Now())
				}()
			}
			wg.Wait()
			clk.Add(10 * time.Millisecond)
		}
		got := admitted.Load()
		if got > LC || got == 0 {
			t.Errorf("admitted %d multi-rule requests, central limit %d", got, LC)
		}
		if left := centralLeft(nodes[0], "k"); left != LC-got {
			t.Errorf("central rule: %d left after %d admitted, want %d: a refused request stayed charged", left, got, LC-got)
		}
		for _, n := range nodes {
			if err := n.l.Shutdown(ctx); err != nil {
				t.Fatal(err)
			}
		}
		if st := readWindow(t, redistest.Client(t, redistest.Addr(t)), ks, "big", "k", W, wid); st.sumU() != got {
			t.Errorf("hybrid rule charged %d (%v), %d admitted", st.sumU(), st.u, got)
		}
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
		if ok || err != nil || out[0].Allowed() || out[1].Allowed() {
			t.Fatalf("AllowMulti: %v, %v, %+v", ok, err, out[:2])
		}
		if left := centralLeft(n, "x"); left != before {
			t.Errorf("central rule charged: %d left, %d before", left, before)
		}
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
		if n.hook.armed.Load() || taken == 0 {
			t.Fatalf("the hook did not run (taken %d)", taken)
		}
		if ok || out[0].Allowed() || out[1].Allowed() {
			t.Fatalf("AllowMulti admitted after the hybrid room was taken: %v, %v, %+v", ok, err, out[:2])
		}
		if err != nil {
			t.Errorf("AllowMulti: %v", err)
		}
		if left := centralLeft(n, key); left != before {
			t.Errorf("central charge not refunded: %d left, %d before", left, before)
		}
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
		if ok, err := n.l.AllowMulti(ctx, nil, nil); !ok || err != nil {
			t.Errorf("no requests: %v, %v; want true, nil", ok, err)
		}
		// The same hybrid key twice counts twice; over MaxCost together it is
		// refused as too costly, charging nothing.
		ok, err := n.l.AllowMulti(ctx, []hybrid.Request{{Rule: n.hyb2, Key: "e", N: LH/2 + 1}, {Rule: n.hyb2, Key: "e", N: LH / 2}}, out)
		if ok || err != nil || out[0].Reason() != local.ReasonCostTooHigh {
			t.Errorf("the same key twice past the limit: %v, %v, %+v", ok, err, out[:2])
		}
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("AllowMulti with out shorter than reqs did not panic")
				}
			}()
			n.l.AllowMulti(ctx, []hybrid.Request{{Rule: n.hyb, Key: "p", N: 1}, {Rule: n.hyb2, Key: "p", N: 1}}, out[:1])
		}()
	})
}

// TestAllowMultiRefusedDecisions: a refused multi-rule decision reports
// every request not allowed, the rules with room as ReasonOK (as
// local.AllowMultiAt does), in every mode combination.
func TestAllowMultiRefusedDecisions(t *testing.T) {
	ctx := context.Background()
	client := redistest.Client(t, redistest.Addr(t))
	clk := newFakeClock(epoch2030.Add(100 * time.Millisecond))
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
		if ok || err != nil {
			t.Fatalf("%s: %v, %v", name, ok, err)
		}
		if out[0].Allowed() || out[1].Allowed() {
			t.Errorf("bug: %s: refused, yet %+v", name, out)
		}
		if out[0].Reason() != local.ReasonOK || out[1].Allowed() || out[1].Reason() == local.ReasonOK {
			t.Errorf("%s: reasons %v, %v; want ok (had room), then why the other refused", name, out[0].Reason(), out[1].Reason())
		}
	}
}
