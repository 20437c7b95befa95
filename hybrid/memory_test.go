package hybrid_test

import (
	"context"
	"fmt"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/hybrid"
	"github.com/hybridlimit/hybridlimit/internal/clocktest"
	"github.com/hybridlimit/hybridlimit/internal/hybridsim"
	"github.com/hybridlimit/hybridlimit/internal/redistest"
	"github.com/hybridlimit/hybridlimit/local"
	"github.com/hybridlimit/hybridlimit/syncer"
)

// heapAfterGC returns the bytes of live heap objects after a full
// collection: runtime.GC returns once the collection and its sweep are
// done, so HeapAlloc then counts only what is reachable.
func heapAfterGC() int64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapAlloc)
}

// ruleCost is what registering rules cost, per rule: measured (the live
// heap's growth) and as Limiter.Stats estimates it.
type ruleCost struct{ measured, estimated float64 }

// costPerRule registers n rules of mode on a new Limiter of cfg, each
// decided for keys keys (none: idle rules), and returns their cost per
// rule. The names and keys are built before the first measure, so that
// only what the Limiter holds is counted.
func costPerRule(tb testing.TB, cfg hybrid.Config, mode hybrid.Mode, n, keys int) ruleCost {
	tb.Helper()
	l, err := hybrid.New(cfg)
	require.NoError(tb, err)
	defer l.Close()
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("rule-%06d", i)
	}
	ks := make([]string, keys)
	for i := range ks {
		ks[i] = "user-" + strconv.Itoa(i)
	}
	lim := local.Limit{Algorithm: local.FixedWindow, Quota: 1000, Window: time.Minute}
	rules := make([]*hybrid.Rule, n)
	ctx := context.Background()
	before, est := heapAfterGC(), l.Stats().Bytes
	for i := range rules {
		rules[i], err = l.Register(hybrid.Rule{Name: names[i], Limit: lim, Mode: mode})
		require.NoError(tb, err)
		for _, k := range ks {
			_, err := l.Allow(ctx, rules[i], k)
			require.NoError(tb, err)
		}
	}
	if mode == hybrid.Hybrid && keys > 0 {
		// The keys handed to the syncer: in its set of keys to look
		// after, as they are between rounds. A round over every key may
		// see a pipeline time out on a loaded machine (the test suite
		// runs beside it): the next round sends what it did not.
		var err error
		for range 5 {
			if _, err = hybridsim.SyncAt(ctx, l, cfg.Clock.Now()); err == nil {
				break
			}
		}
		require.NoError(tb, err)
	}
	after, st := heapAfterGC(), l.Stats()
	runtime.KeepAlive(rules)
	require.Equal(tb, n, st.Rules)
	require.Equal(tb, n*keys, st.Keys)
	return ruleCost{measured: float64(after-before) / float64(n), estimated: float64(st.Bytes-est) / float64(n)}
}

// memoryConfig is a Limiter on the test Redis, with manual rounds on a
// virtual clock, of shards shards per table of keys.
func memoryConfig(t testing.TB, shards int) hybrid.Config {
	return hybridsim.Virtual(hybrid.Config{
		Redis: redistest.Client(t, redistest.Addr(t)), Keyspace: syncer.Keyspace{Prefix: redistest.Prefix(t)},
		Clock: clocktest.New(epoch2030), Logger: quiet, Shards: shards,
		Sync: hybrid.SyncConfig{Nodes: 1},
	})
}

// TestMemoryPerRule measures the heap a registered rule holds, idle and
// with keys, in each mode, holds it to the budgets of docs/operating.md
// (sizing), and holds Limiter.Stats's estimate within 10% of the
// measure.
func TestMemoryPerRule(t *testing.T) {
	if testing.Short() {
		t.Skip("registers tens of thousands of rules; skipped in -short mode")
	}
	if raceEnabled {
		t.Skip("the race detector changes allocation sizes")
	}
	for _, tc := range []struct {
		mode   hybrid.Mode
		shards int
		keys   int
		budget float64 // bytes per rule, at most
	}{
		{hybrid.Local, 0, 0, 12_000},
		{hybrid.Central, 0, 0, 2_500},
		{hybrid.Hybrid, 0, 0, 13_000},
		{hybrid.Local, 8, 0, 3_000},
		{hybrid.Hybrid, 8, 0, 4_500},
		{hybrid.Local, 0, 20, 16_000},
		{hybrid.Hybrid, 0, 20, 24_000},
	} {
		t.Run(fmt.Sprintf("%s/shards=%d/keys=%d", tc.mode, tc.shards, tc.keys), func(t *testing.T) {
			n := 10_000
			if tc.keys > 0 {
				n = 1_000
			}
			c := costPerRule(t, memoryConfig(t, tc.shards), tc.mode, n, tc.keys)
			t.Logf("%s rule, %d shards, %d keys: %.0f bytes measured, %.0f estimated (Stats)", tc.mode, shardsOf(tc.shards), tc.keys, c.measured, c.estimated)
			assert.LessOrEqual(t, c.measured, tc.budget, "bytes per rule")
			assert.InEpsilon(t, c.measured, c.estimated, 0.10, "Stats.Bytes against the measure")
		})
	}
}

// BenchmarkRuleMemory reports the heap a rule holds, idle, in each mode, at
// the default shards and at 8 (B/rule: measured; est-B/rule: Stats's
// estimate). Each iteration registers 10,000 rules on a new Limiter.
func BenchmarkRuleMemory(b *testing.B) {
	for _, shards := range []int{0, 8} {
		for _, mode := range []hybrid.Mode{hybrid.Local, hybrid.Central, hybrid.Hybrid} {
			b.Run(fmt.Sprintf("%s/shards=%d", mode, shardsOf(shards)), func(b *testing.B) {
				var c ruleCost
				for b.Loop() {
					c = costPerRule(b, memoryConfig(b, shards), mode, 10_000, 0)
				}
				b.ReportMetric(c.measured, "B/rule")
				b.ReportMetric(c.estimated, "est-B/rule")
			})
		}
	}
}

// shardsOf is the shards of a table of keys under Config.Shards n.
func shardsOf(n int) int {
	if n == 0 {
		return hybrid.DefaultShards
	}
	return n
}
