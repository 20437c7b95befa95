package hybrid_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/hybrid"
	"github.com/hybridlimit/hybridlimit/internal/redistest"
	"github.com/hybridlimit/hybridlimit/local"
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
	lim := local.MustLimit(local.Params{Algorithm: local.SubWindowCounter, Limit: L, Window: W, SubWindows: K})
	clk := newFakeClock(epoch2030.Add(time.Second))
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
	clk := newFakeClock(epoch2030)
	l := newNode(t, nodeConfig(client, prefix, clk, "a", 1))
	for _, p := range []local.Params{
		{Algorithm: local.FixedWindow, Limit: 1000, Window: time.Second, Anchored: true},
		{Algorithm: local.SubWindowCounter, Limit: 1000, Window: time.Second, Anchored: true},
	} {
		r := mustRegister(t, l, hybrid.Rule{Name: "anchored-" + p.Algorithm.String(), Limit: local.MustLimit(p)}, hybrid.ModeDefault)
		assert.Equal(t, hybrid.Central, l.Mode(r), "%v", p)
	}
}
