package hybrid_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/hybrid"
	"github.com/hybridlimit/hybridlimit/internal/clocktest"
	"github.com/hybridlimit/hybridlimit/internal/redistest"
	"github.com/hybridlimit/hybridlimit/local"
	"github.com/hybridlimit/hybridlimit/syncer"
)

// TestSubWindowLeases: three nodes lease a sub-window counter, each lease
// naming its sub-window, under half again the limit's rate. With no
// cold-start allowance, no SubWindows consecutive sub-windows admit more
// than the limit together, and leases keep the cluster near it.
func TestSubWindowLeases(t *testing.T) {
	client := redistest.Client(t, redistest.Addr(t))
	prefix := redistest.Prefix(t)
	const L, K = 6000, 6
	W := 6 * time.Second
	sub := W / K
	lim := local.Limit{Algorithm: local.SubWindowCounter, Quota: L, Window: W, SubWindows: K}
	clk := clocktest.New(epoch2030.Add(time.Second))
	var nodes []*hybrid.Limiter
	var rules []*hybrid.Rule
	for _, id := range []string{"a", "b", "c"} {
		cfg := nodeConfig(client, prefix, clk, id, 3)
		cfg.Sync.NoColdStart = true
		l := newNode(t, cfg)
		nodes = append(nodes, l)
		rules = append(rules, mustRegister(t, l, hybrid.Rule{Name: "sub", Limit: lim}, hybrid.Hybrid))
	}
	s := newStepper(t, clk, nodes, rules, []string{"k"}, sub, 5) // 1,500 a second of 1,000
	for range 1800 {                                             // 18s: three windows
		s.step()
	}
	require.Zero(t, s.syncErrs)
	per := s.perWindow(0)
	step := sub.Microseconds()
	var first, last, total int64 = -1, 0, 0
	for x, n := range per {
		if first < 0 || x < first {
			first = x
		}
		last = max(last, x)
		total += n
	}
	for x := first; x <= last; x += step {
		var sum int64
		for y := x - (K-1)*step; y <= x; y += step {
			sum += per[y]
		}
		assert.LessOrEqual(t, sum, int64(L), "the %d sub-windows up to %d", K, x)
	}
	// An exact limiter admits L in the first second, then what leaves the
	// window: about L per window, 3L in all.
	t.Logf("admitted %d of an exact limiter's %d; refused %v", total, 3*L, s.refused)
	assert.GreaterOrEqual(t, total, int64(3*L*8/10))
}

// TestAnchoredRunsCentral: anchored windows start at each key's own first
// request, which window leases do not follow: a Hybrid rule of one runs
// Central.
func TestAnchoredRunsCentral(t *testing.T) {
	client := redistest.Client(t, redistest.Addr(t))
	prefix := redistest.Prefix(t)
	clk := clocktest.New(epoch2030)
	l := newNode(t, nodeConfig(client, prefix, clk, "a", 1))
	for _, p := range []local.Limit{
		{Algorithm: local.FixedWindow, Quota: 1000, Window: time.Second, Anchored: true},
		{Algorithm: local.SubWindowCounter, Quota: 1000, Window: time.Second, Anchored: true},
	} {
		r := mustRegister(t, l, hybrid.Rule{Name: "anchored-" + p.Algorithm.String(), Limit: p}, hybrid.Mode(0))
		assert.Equal(t, hybrid.Central, r.Mode, "%v", p)
	}
}

// TestSubWindowRelease: a node's exchange in a sub-window makes its use of
// the one before final, and Redis releases what the node held there
// unused: the later sub-windows' budget counts that sub-window's use, not
// its grants. Under the limit, grants left unused in the window's earlier
// sub-windows would otherwise cut the budget of every sub-window until
// they leave the window.
func TestSubWindowRelease(t *testing.T) {
	client := redistest.Client(t, redistest.Addr(t))
	ks := syncer.Keyspace{Prefix: redistest.Prefix(t)}
	const L, K = 1000, 10
	W := time.Second
	sub := W / K
	lim := local.Limit{Algorithm: local.SubWindowCounter, Quota: L, Window: W, SubWindows: K}
	clk := clocktest.New(epoch2030.Add(sub / 10))
	const nodes = 2
	ls, _, allow := leasingNodes(t, client, ks.Prefix, clk, "release", lim, nodes)

	// The first sub-window: both nodes lease, and use a part of it.
	x := windowStart(clk, sub)
	var used int // n0's admissions there
	for range 5 {
		for i := range nodes {
			if a := allow(i, 3); i == 0 {
				used += a
			}
			syncOK(t, ls[i], clk)
		}
		clk.Add(sub / 10)
	}
	st := readWindow(t, client, ks, "release", "k", sub, x)
	require.True(t, st.ok)
	require.Greater(t, st.g["n0"], st.u["n0"], "n0 holds a grant unused in the sub-window: %+v", st)
	require.Greater(t, st.g["n1"], st.u["n1"], "n1 too: %+v", st)

	// The next sub-window: n0's exchange there releases its grant unused in
	// the first; n1's, not sent yet, stays.
	clk.Set(time.UnixMicro(x + sub.Microseconds() + sub.Microseconds()/10))
	allow(0, 1)
	syncOK(t, ls[0], clk)
	after := readWindow(t, client, ks, "release", "k", sub, x)
	require.True(t, after.ok)
	assert.Equal(t, after.u["n0"], after.g["n0"], "n0's grant there is its use: %+v", after)
	assert.Equal(t, int64(used), after.u["n0"], "n0's use there, reported: %+v", after)
	assert.Equal(t, st.g["n1"], after.g["n1"], "n1's grant stays until n1 reports: %+v", after)
	assert.Equal(t, after.u["n0"]+max(after.g["n1"], after.u["n1"]), after.R, "R: %+v", after)
}

// leasingNodes starts n nodes with no cold-start allowance, each with a
// hybrid rule of lim named name. allow decides count requests of the key
// "k" on node i and returns how many were admitted.
func leasingNodes(t *testing.T, client redis.UniversalClient, prefix string, clk *clocktest.Clock, name string, lim hybrid.Limit, n int) ([]*hybrid.Limiter, []*hybrid.Rule, func(i, count int) int) {
	t.Helper()
	ls, rs := make([]*hybrid.Limiter, n), make([]*hybrid.Rule, n)
	for i := range ls {
		cfg := nodeConfig(client, prefix, clk, fmt.Sprintf("n%d", i), n)
		cfg.Sync.NoColdStart = true
		ls[i] = newNode(t, cfg)
		rs[i] = mustRegister(t, ls[i], hybrid.Rule{Name: name, Limit: lim}, hybrid.Hybrid)
	}
	allow := func(i, count int) (admitted int) {
		t.Helper()
		for range count {
			d, err := ls[i].Allow(context.Background(), rs[i], "k")
			require.NoError(t, err)
			if d.Allowed() {
				admitted++
			}
		}
		return admitted
	}
	return ls, rs, allow
}
