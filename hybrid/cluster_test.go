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
	"github.com/hybridlimit/hybridlimit/internal/config"
	"github.com/hybridlimit/hybridlimit/internal/redistest"
	"github.com/hybridlimit/hybridlimit/syncer"
)

// TestClusterSmoke: the hybrid mode on the real three-master Cluster: four
// nodes on a virtual clock, a fixed-window rule over keys whose state lives
// on different masters, ten windows at 3× the limit: each key admits at most
// its limit per window (its first window: plus the cold-start allowance).
func TestClusterSmoke(t *testing.T) {
	ctx := context.Background()
	addrs := redistest.ClusterAddrs(t)
	prefix := redistest.Prefix(t)
	ks := syncer.Keyspace{Prefix: prefix}
	const L, N = 400, 4 // 400 × 100ms ÷ (1s × 4) = 10 per node per round: leasable
	W := time.Second
	keys := []string{"alice", "bob", "carol", "dave", "erin"}

	// The keys' state must span masters: find each one's slot and master.
	probe := redistest.ClusterClient(t, addrs)
	masters := map[string]bool{}
	for _, k := range keys {
		m, err := probe.MasterForKey(ctx, redisKeyBase(ks, "r", k)+"m")
		require.NoError(t, err, "MasterForKey %s", k)
		masters[m.Options().Addr] = true
	}
	require.GreaterOrEqual(t, len(masters), 2, "the masters the keys' state lives on; pick other keys")

	clk := clocktest.New(epoch2030)
	nodes := make([]*hybrid.Limiter, N)
	rules := make([]*hybrid.Rule, N)
	for i := range nodes {
		nodes[i] = newNode(t, nodeConfig(redistest.ClusterClient(t, addrs), prefix, clk, fmt.Sprint("n", i), N))
		rules[i] = mustRegister(t, nodes[i], hybrid.Rule{Name: "r", Limit: fixed(L, W)}, hybrid.Hybrid)
	}
	// 3 × L per key and window: 1,200 over 4 nodes and 100 steps.
	s := newStepper(t, clk, nodes, rules, keys, W, 3)
	for clk.Now().Before(epoch2030.Add(10 * W)) {
		s.step()
	}
	assert.Zero(t, s.syncErrs, "rounds failed")
	allowance := int64(float64(L)*config.Epsilon/N) + 1
	for k, key := range keys {
		per := s.perWindow(k)
		var line []int64
		for x := epoch2030.UnixMicro(); x < epoch2030.Add(10*W).UnixMicro(); x += W.Microseconds() {
			n := per[x]
			line = append(line, n)
			bound := int64(L)
			if x == epoch2030.UnixMicro() {
				bound += N * allowance // the key's first window: the cold-start allowance
			}
			assert.LessOrEqual(t, n, bound, "key %s, window %d: admitted at most the bound", key, (x-epoch2030.UnixMicro())/W.Microseconds())
			assert.GreaterOrEqual(t, n, int64(L/2), "key %s, window %d: admitted at least half of %d at 3× the limit", key, (x-epoch2030.UnixMicro())/W.Microseconds(), L)
		}
		t.Logf("key %s: admitted per window %v", key, line)
	}
}
