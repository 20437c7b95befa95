package hybrid_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/hybrid"
	"github.com/hybridlimit/hybridlimit/internal/clocktest"
	"github.com/hybridlimit/hybridlimit/internal/hybridsim"
	"github.com/hybridlimit/hybridlimit/internal/leakcheck"
	"github.com/hybridlimit/hybridlimit/internal/redistest"
	"github.com/hybridlimit/hybridlimit/local"
	"github.com/hybridlimit/hybridlimit/syncer"
)

// policyRules are one rule per failure policy, registered on each node.
var policyRules = []struct {
	name   string
	policy hybrid.Policy
}{{"open", hybrid.FailOpen}, {"closed", hybrid.FailClosed}, {"flocal", hybrid.FailLocal}}

// checkPolicy checks a decision a failure policy made: an ordinary one,
// without error, marked Degraded.
func checkPolicy(t *testing.T, p hybrid.Policy, d local.Decision, err error) {
	t.Helper()
	require.NoError(t, err, "%v decision: a policy's decision is an ordinary one, without error", p)
	require.True(t, d.Degraded(), "%v decision %v is Degraded", p, d)
	switch p {
	case hybrid.FailOpen:
		require.True(t, d.Allowed(), "FailOpen decided %+v, want admitted", d)
		require.Equal(t, local.ReasonUnavailable, d.Reason(), "FailOpen's reason")
	case hybrid.FailClosed:
		require.False(t, d.Allowed(), "FailClosed decided %+v, want refused", d)
		require.Equal(t, local.ReasonUnavailable, d.Reason(), "FailClosed's reason")
	case hybrid.FailLocal:
		if !d.Allowed() {
			require.Equal(t, local.ReasonLimited, d.Reason(), "FailLocal's reason to refuse: its part of the limit")
		}
	}
}

// markUnavailable has l notice that Redis is down, as its loop would: a
// key that wants a lease (a new one) and rounds that fail, three in a row
// (one failed round alone may be a busy machine, not Redis gone).
func markUnavailable(t *testing.T, l *hybrid.Limiter, r *hybrid.Rule, clk *clocktest.Clock) {
	t.Helper()
	l.Allow(context.Background(), r, "probe")
	for range 3 {
		clk.Add(10 * time.Millisecond)
		ctx, cancel := context.WithTimeout(context.Background(), 150*time.Millisecond)
		_, err := hybridsim.SyncAt(ctx, l, clk.Now())
		cancel()
		require.ErrorIs(t, err, hybrid.ErrUnavailable, "SyncAt with Redis down")
	}
}

// TestHotPathNeverWaits: with the real sync loop and Redis paused (or
// killed), hybrid decisions keep coming in microseconds: from the leases
// held, then by each rule's failure policy once they run out; when Redis
// is back, decisions are hybrid again. A rule that waits for its keys'
// exchanges (WaitInFlight, the default) waits no longer than
// Config.Timeout, and not once the breaker is open.
func TestHotPathNeverWaits(t *testing.T) {
	if testing.Short() {
		t.Skip("real time")
	}
	for _, c := range []struct {
		outage string
		wait   hybrid.Wait
		bound  time.Duration
	}{
		{"paused", hybrid.WaitNever, 50 * time.Millisecond},
		{"killed", hybrid.WaitNever, 50 * time.Millisecond},
		{"paused", hybrid.WaitInFlight, hybrid.DefaultTimeout + 100*time.Millisecond},
		{"killed", hybrid.WaitInFlight, hybrid.DefaultTimeout + 100*time.Millisecond},
	} {
		outage := c.outage
		t.Run(outage+"/"+c.wait.String(), func(t *testing.T) {
			leakcheck.Check(t)
			ctx := context.Background()
			srv := redistest.Start(t)
			prefix := redistest.Prefix(t)
			// L per hour, drained by requests of cost L/1000: a lease runs out
			// within 1,000 calls, and no window ends during the test.
			const L = 100_000_000
			const cost = L / 1000
			lim := fixed(L, time.Hour)
			nodes := make([]*hybrid.Limiter, 2)
			rules := make([]map[string]*hybrid.Rule, 2)
			for i := range nodes {
				nodes[i] = newNode(t, hybrid.Config{
					Redis: redistest.Client(t, srv.Addr), Keyspace: syncer.Keyspace{Prefix: prefix}, Logger: quiet,
					Sync: hybrid.SyncConfig{Interval: 50 * time.Millisecond, NodeID: fmt.Sprint("n", i), Nodes: 2},
				})
				rules[i] = map[string]*hybrid.Rule{}
				for _, p := range policyRules {
					rules[i][p.name] = mustRegister(t, nodes[i], hybrid.Rule{Name: p.name, Limit: lim, Policy: p.policy, Wait: c.wait}, hybrid.Hybrid)
				}
			}
			// Warm up: node b asks first, once, so both nodes are live; then
			// node a, at a high rate, takes a large lease. (Node b must not
			// ask twice: a second round soon after the first extrapolates its
			// demand to the whole hour's budget, which it would then keep
			// while idle; see TestIdleReleaseWindows.)
			for _, p := range policyRules {
				nodes[1].AllowN(ctx, rules[1][p.name], "k", 1000)
			}
			time.Sleep(150 * time.Millisecond)
			for range 20 {
				for _, p := range policyRules {
					// A FailClosed rule has no cold-start allowance: under
					// WaitNever its first request is refused until the
					// lease it asked for comes.
					d, err := nodes[0].AllowN(ctx, rules[0][p.name], "k", 1000)
					for i := 0; err == nil && d.Reason() == local.ReasonNoLease && i < 50; i++ {
						time.Sleep(max(d.RetryAfter(), 20*time.Millisecond))
						d, err = nodes[0].AllowN(ctx, rules[0][p.name], "k", 1000)
					}
					require.NoError(t, err, "warm-up of %s", p.name)
					if !d.Allowed() {
						now := time.Now().UnixMicro()
						require.FailNow(t, "warm-up refused", "%s: %+v; Redis: %+v", p.name, d, readWindow(t, redistest.Client(t, srv.Addr), syncer.Keyspace{Prefix: prefix}, p.name, "k", time.Hour, now-now%time.Hour.Microseconds()))
					}
				}
				time.Sleep(10 * time.Millisecond)
			}
			time.Sleep(200 * time.Millisecond)
			// What node a holds unused of each rule's lease, as Redis last
			// heard: what it admits, at most, with Redis gone.
			held := map[string]int64{}
			for _, p := range policyRules {
				now := time.Now().UnixMicro()
				w := readWindow(t, redistest.Client(t, srv.Addr), syncer.Keyspace{Prefix: prefix}, p.name, "k", time.Hour, now-now%time.Hour.Microseconds())
				held[p.name] = w.g["n0"] - w.u["n0"]
				require.Positive(t, held[p.name], "%s: node a holds a lease: %+v", p.name, w)
			}

			a, ra := nodes[0], rules[0]
			slowest := time.Duration(0)
			timed := func(r *hybrid.Rule, n int64) (local.Decision, error) {
				start := time.Now()
				d, err := a.AllowN(ctx, r, "k", n)
				el := time.Since(start)
				slowest = max(slowest, el)
				require.LessOrEqual(t, el, c.bound, "a decision's time with Redis %s", outage)
				return d, err
			}
			if outage == "paused" {
				srv.Pause()
				defer srv.Resume()
			} else {
				srv.Kill()
			}
			// The leases held go on admitting.
			for _, p := range policyRules {
				for i := range min(held[p.name], 1000) {
					d, err := timed(ra[p.name], 1)
					require.NoError(t, err, "%s: call %d with a lease held", p.name, i)
					require.True(t, d.Allowed(), "%s: call %d with a lease held: %+v", p.name, i, d)
				}
			}
			// Drain the leases: no call waits; once the loop has seen Redis
			// fail, the policies decide.
			type seen struct{ policy, admitted, refused, leased int }
			got := map[string]*seen{}
			deadline := time.Now().Add(10 * time.Second)
			for done := false; !done; {
				if time.Now().After(deadline) {
					require.FailNow(t, "no policy decisions after 10s", "%+v %+v %+v", *got["open"], *got["closed"], *got["flocal"])
				}
				done = true
				for _, p := range policyRules {
					s := got[p.name]
					if s == nil {
						s = &seen{}
						got[p.name] = s
					}
					d, err := timed(ra[p.name], cost)
					require.NoError(t, err, "%s: %+v while Redis is %s: decisions return no error", p.name, d, outage)
					switch {
					case d.Degraded():
						checkPolicy(t, p.policy, d, err)
						s.policy++
						if d.Allowed() {
							s.admitted++
						} else {
							s.refused++
						}
					case s.policy > 0:
						require.FailNow(t, "a decision not Degraded after policy decisions", "%s: %+v, Redis still %s", p.name, d, outage)
					case d.Allowed():
						s.leased++
					default: // no lease yet: limited, or no_lease without an allowance (FailClosed)
						require.Contains(t, []local.Reason{local.ReasonOK, local.ReasonLimited, local.ReasonNoLease}, d.Reason(), "%s: %+v before the policy decided", p.name, d)
					}
					enough := s.policy >= 100
					if p.policy == hybrid.FailLocal {
						enough = s.refused >= 10
					}
					done = done && enough
				}
				time.Sleep(100 * time.Microsecond)
			}
			// FailLocal: the limit divided by the two nodes last seen, per
			// window (one hour), counting what the node admitted from its
			// lease there: the warm-up, the 1,000 calls of cost 1, and the
			// drain's calls before the policy decided.
			if fl := got["flocal"]; assert.NotZero(t, fl.admitted, "FailLocal admitted nothing during the outage") {
				used := 20*1000 + 1000 + int64(fl.leased+fl.admitted)*cost
				assert.LessOrEqual(t, used, int64(L/2), "node a's admissions in the window by the end of the outage (%d by FailLocal): L/2 to within a cost of %d", int64(fl.admitted)*cost, cost)
				assert.Greater(t, used, int64(L/2-cost), "node a's admissions in the window by the end of the outage (%d by FailLocal): L/2 to within a cost of %d", int64(fl.admitted)*cost, cost)
			}
			t.Logf("slowest decision while Redis was %s: %v; policy decisions: open %+v closed %+v local %+v", outage, slowest, *got["open"], *got["closed"], *got["flocal"])

			// Back: decisions are hybrid again, without error.
			if outage == "paused" {
				srv.Resume()
			} else {
				srv.Restart()
			}
			deadline = time.Now().Add(10 * time.Second)
			for _, p := range policyRules {
				for {
					d, err := timed(ra[p.name], 1)
					if err == nil && !d.Degraded() {
						break
					}
					require.True(t, time.Now().Before(deadline), "%s: still %+v, %v 10s after Redis came back", p.name, d, err)
					time.Sleep(5 * time.Millisecond)
				}
			}
		})
	}
}

// TestPolicies: the failure policies, decision by decision, on a virtual
// clock: a lease held is used to its end, then the policy decides; FailLocal
// admits the limit divided by the nodes last seen, per window; when Redis
// answers again, decisions are hybrid.
func TestPolicies(t *testing.T) {
	ctx := context.Background()
	srv := redistest.Start(t)
	prefix := redistest.Prefix(t)
	const L = 1000
	W := time.Second
	clk := clocktest.New(epoch2030.Add(100 * time.Millisecond))
	a := newNode(t, nodeConfig(redistest.Client(t, srv.Addr), prefix, clk, "a", 2))
	b := newNode(t, nodeConfig(redistest.Client(t, srv.Addr), prefix, clk, "b", 2))
	ra, rb := map[string]*hybrid.Rule{}, map[string]*hybrid.Rule{}
	for _, p := range policyRules {
		ra[p.name] = mustRegister(t, a, hybrid.Rule{Name: p.name, Limit: fixed(L, W), Policy: p.policy}, hybrid.Hybrid)
		rb[p.name] = mustRegister(t, b, hybrid.Rule{Name: p.name, Limit: fixed(L, W), Policy: p.policy}, hybrid.Hybrid)
	}
	// Both nodes take leases.
	before := map[string]int{} // admitted on node a in the window
	for range 3 {
		for _, p := range policyRules {
			for range 10 {
				if d, _ := a.Allow(ctx, ra[p.name], "k"); d.Allowed() {
					before[p.name]++
				}
				b.Allow(ctx, rb[p.name], "k")
			}
		}
		syncOK(t, a, clk)
		syncOK(t, b, clk)
		clk.Add(10 * time.Millisecond)
	}
	srv.Pause()
	defer srv.Resume()
	markUnavailable(t, a, ra["open"], clk)
	for _, p := range policyRules {
		t.Run(p.name, func(t *testing.T) {
			// The lease and the allowance first, without error; then the
			// policy.
			var leased, policy, admitted int
			for i := 0; i < 3*L; i++ {
				d, err := a.Allow(ctx, ra[p.name], "k")
				if err == nil && !d.Degraded() {
					require.Zero(t, policy, "call %d: %+v not Degraded after policy decisions", i, d)
					require.True(t, d.Allowed(), "call %d: refused %+v, not Degraded, while Redis is down", i, d)
					leased++
					continue
				}
				checkPolicy(t, p.policy, d, err)
				policy++
				if d.Allowed() {
					admitted++
				}
			}
			t.Logf("%s: %d admitted on the lease held, then %d policy decisions, %d admitted", p.name, leased, policy, admitted)
			require.NotZero(t, leased, "decisions on the lease held")
			require.NotZero(t, policy, "decisions by the policy")
			if p.policy == hybrid.FailLocal {
				// The limit over the 2 nodes last seen, per window, counting
				// what the node admitted there on its lease: FailLocal makes
				// up the difference, if any.
				assert.Equal(t, max(L/2-before[p.name]-leased, 0), admitted,
					"FailLocal's admissions in a window where the node had admitted %d on its lease: the limit over the 2 nodes last seen, less that", before[p.name]+leased)
				// The next window: L/2 again, the allowance of a key without
				// a lease included.
				at := clk.Now()
				clk.Set(time.UnixMicro(windowStart(clk, W)).Add(W + 10*time.Millisecond))
				var again int
				for range L {
					if d, _ := a.Allow(ctx, ra[p.name], "k"); d.Allowed() {
						again++
					}
				}
				clk.Set(at)
				assert.Equal(t, L/2, again, "FailLocal's and the allowance's admissions in the next window")
			}
		})
	}
	srv.Resume()
	syncUntilOK(t, a, clk, 10*time.Millisecond)
	for _, p := range policyRules {
		d, err := a.Allow(ctx, ra[p.name], "k2")
		assert.NoError(t, err, "%s after Redis is back", p.name)
		assert.False(t, d.Degraded(), "%s after Redis is back: %+v", p.name, d)
		assert.NotEqual(t, local.ReasonUnavailable, d.Reason(), "%s after Redis is back", p.name)
	}
}

// TestOutageAdmissionsReconciled: what a node admits by FailLocal while
// Redis is down counts when Redis is back ("reconciled without double
// counting and without losing the hits admitted during the outage",
// DESIGN.md): the window they were admitted in does not grant the whole
// limit again.
func TestOutageAdmissionsReconciled(t *testing.T) {
	ctx := context.Background()
	srv := redistest.Start(t)
	prefix := redistest.Prefix(t)
	const L = 1000
	W := time.Second
	clk := clocktest.New(epoch2030.Add(100 * time.Millisecond))
	wid := windowStart(clk, W)
	nodes, rules := twoNodes(t, srv.Addr, prefix, clk, fixed(L, W), hybrid.FailLocal)
	var tl tally
	allow := func(i int) bool { return tl.allow(t, nodes[i], rules[i]) }
	for range 10 {
		allow(0)
		allow(1)
	}
	syncOK(t, nodes[0], clk)
	syncOK(t, nodes[1], clk)
	clk.Add(10 * time.Millisecond)
	allow(0)
	syncOK(t, nodes[0], clk) // node a has seen both nodes
	// The next window, where neither node holds a grant yet.
	clk.Set(time.UnixMicro(wid).Add(W + 10*time.Millisecond))
	wid = windowStart(clk, W)
	tl = tally{}
	// Outage: node a admits what FailLocal lets it.
	srv.Pause()
	markUnavailable(t, nodes[0], rules[0], clk)
	for range 2 * L {
		allow(0)
	}
	outage := tl.total
	srv.Resume()
	clk.Add(10 * time.Millisecond)
	syncUntilOK(t, nodes[0], clk, 10*time.Millisecond)
	// Both nodes ask for all they can get for the rest of the window.
	for windowStart(clk, W) == wid && clk.Now().Sub(time.UnixMicro(wid)) < 800*time.Millisecond {
		for i := range nodes {
			for allow(i) {
			}
			hybridsim.SyncAt(ctx, nodes[i], clk.Now())
		}
		clk.Add(10 * time.Millisecond)
	}
	a := int64(float64(L) * 0.05 / 2)
	t.Logf("admitted in the window: %d (%d by the end of the outage, %d of them by FailLocal); Redis R = %d", tl.total, outage, tl.byPolicy, readWindow(t, redistest.Client(t, srv.Addr), syncer.Keyspace{Prefix: prefix}, "r", "k", W, wid).R)
	require.NotZero(t, tl.byPolicy, "FailLocal admitted nothing during the outage")
	assert.LessOrEqual(t, tl.total, L+2*(a+1), "bug: the window's admissions, the limit is %d (+ allowance %d): the %d FailLocal admitted during the outage were not counted when Redis came back", L, 2*(a+1), tl.byPolicy)
}

// TestCentralUnavailable: central rules decide by their failure policy
// when Redis does not answer, without error.
func TestCentralUnavailable(t *testing.T) {
	ctx := context.Background()
	// FailLocal divides the limit by the nodes: for a central rule the
	// Limiter knows them only from Config.Sync.Nodes.
	t.Run("FailLocal divides by the nodes", func(t *testing.T) {
		srv := redistest.Start(t)
		l := newNode(t, hybridsim.Manual(hybrid.Config{
			Redis: redistest.Client(t, srv.Addr), Keyspace: syncer.Keyspace{Prefix: redistest.Prefix(t)},
			Mode: hybrid.Central, Logger: quiet, Timeout: 20 * time.Millisecond,
			Sync: hybrid.SyncConfig{Nodes: 4},
		}))
		r := mustRegister(t, l, hybrid.Rule{Name: "r", Mode: hybrid.Central, Limit: fixed(100, time.Hour), Policy: hybrid.FailLocal}, hybrid.Central)
		srv.Kill()
		var admitted int
		for range 60 {
			d, err := l.Allow(ctx, r, "k")
			checkPolicy(t, hybrid.FailLocal, d, err)
			if d.Allowed() {
				admitted++
			}
		}
		assert.LessOrEqual(t, admitted, 100/4, "bug: FailLocal's admissions on one of 4 nodes (Config.Sync.Nodes = 4), the limit is 100: each node admits the whole limit, the cluster 4×")
	})
}
