package hybrid_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/hybrid"
	"github.com/hybridlimit/hybridlimit/internal/clocktest"
	"github.com/hybridlimit/hybridlimit/internal/redistest"
	"github.com/hybridlimit/hybridlimit/local"
)

// BenchmarkAllowMulti measures a two-rule AllowMulti on one hot key per
// combination of modes. The clock stands still and the hybrid rule's lease
// is fetched before the timer starts, so every decision admits without
// Redis.
func BenchmarkAllowMulti(b *testing.B) {
	clk := clocktest.New(epoch2030.Add(100 * time.Millisecond))
	l := newNode(b, nodeConfig(redistest.Client(b, redistest.Addr(b)), redistest.Prefix(b), clk, "a", 1))
	big := fixed(1<<40, time.Hour)
	rules := map[hybrid.Mode][2]*hybrid.Rule{}
	for _, m := range []hybrid.Mode{hybrid.Local, hybrid.Hybrid} {
		rules[m] = [2]*hybrid.Rule{
			mustRegister(b, l, hybrid.Rule{Name: m.String() + "1", Limit: big, Mode: m}, m),
			mustRegister(b, l, hybrid.Rule{Name: m.String() + "2", Limit: big, Mode: m}, m),
		}
	}
	ctx := context.Background()
	for _, bc := range []struct {
		name string
		a, c *hybrid.Rule
	}{
		{"local", rules[hybrid.Local][0], rules[hybrid.Local][1]},
		{"hybrid", rules[hybrid.Hybrid][0], rules[hybrid.Hybrid][1]},
		{"local+hybrid", rules[hybrid.Local][0], rules[hybrid.Hybrid][1]},
	} {
		b.Run(bc.name, func(b *testing.B) {
			reqs := []hybrid.Request{{Rule: bc.a, Key: "k", N: 1}, {Rule: bc.c, Key: "k", N: 1}}
			out := make([]local.Decision, 2)
			if _, err := l.AllowMulti(ctx, reqs, out); err != nil {
				b.Skipf("AllowMulti: %v", err)
			}
			syncOK(b, l, clk) // the hybrid rule's lease
			if ok, err := l.AllowMulti(ctx, reqs, out); !ok || err != nil {
				b.Fatalf("AllowMulti: %v, %v, %v", ok, err, out)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				l.AllowMulti(ctx, reqs, out)
			}
		})
	}
}

// TestAllowMultiNoAllocations holds AllowMulti without central rules to no
// allocation: Local rules, Hybrid ones, and both together.
func TestAllowMultiNoAllocations(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	clk := clocktest.New(epoch2030.Add(100 * time.Millisecond))
	l := newNode(t, nodeConfig(redistest.Client(t, redistest.Addr(t)), redistest.Prefix(t), clk, "a", 1))
	rs := registerMixed(t, l, time.Hour, map[string]int64{"local": 1 << 40, "hybrid": 1 << 40, "central": 1 << 40}, hybrid.Policy(0))
	ctx := context.Background()
	for _, names := range [][]string{{"local", "local"}, {"hybrid", "hybrid"}, {"local", "hybrid"}, {"hybrid", "local", "hybrid"}} {
		reqs := mixedRequests(rs, "k", names)
		out := make([]local.Decision, len(reqs))
		l.AllowMulti(ctx, reqs, out)
		syncOK(t, l, clk) // the hybrid key's lease
		ok, err := l.AllowMulti(ctx, reqs, out)
		require.NoError(t, err)
		require.True(t, ok, "%v: %v", names, out)
		assert.Zero(t, testing.AllocsPerRun(100, func() { l.AllowMulti(ctx, reqs, out) }), "%v", names)
	}
}
