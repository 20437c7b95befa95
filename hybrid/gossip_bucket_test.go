package hybrid_test

import (
	"context"
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
)

// steadyMembers gives memberlist's failure detector time to spare, so that
// a loaded machine does not have a live node declared dead (which hands the
// others its share) while a test measures the split.
func steadyMembers(c *hybrid.GossipConfig) {
	c.Memberlist.ProbeInterval = 200 * time.Millisecond
	c.Memberlist.ProbeTimeout = 100 * time.Millisecond
	c.Memberlist.SuspicionMult = 4
}

// TestFallbackBucketOutage: three nodes, token bucket and GCRA rules of L
// per second, Redis killed while each key's traffic (3 × L in all) is 90%
// on one node, all on one, or even. The Gossip policy gives each node its
// demand-weighted share of the rate and burst, so the cluster keeps about
// L per second in every case, where an even split would admit about L/3
// with all the traffic on one node; and a key no node has gossiped yet is
// split evenly, as FailLocal splits it.
func TestFallbackBucketOutage(t *testing.T) {
	leakcheck.Check(t)
	ctx := context.Background()
	srv := redistest.Start(t)
	prefix := redistest.Prefix(t)
	const L, burst = 1000, 100
	clk := clocktest.New(epoch2030.Add(100 * time.Millisecond))
	nodes := gossipClusterWith(t, srv, prefix, clk, steadyMembers, "a", "b", "c")
	algos := []local.Algorithm{local.TokenBucket, local.GCRA}
	workloads := []struct {
		key     string
		offered [3]int // per 10ms step, node by node
	}{
		{"skew", [3]int{27, 3, 0}},
		{"one", [3]int{30, 0, 0}},
		{"even", [3]int{10, 10, 10}},
	}
	// rules[a][i] is algorithm a's rule on node i; evenRules the same
	// under FailLocal.
	rules := make([][]*hybrid.Rule, len(algos))
	evenRules := make([][]*hybrid.Rule, len(algos))
	for a, alg := range algos {
		lim := local.Limit{Algorithm: alg, Quota: L, Window: time.Second, Burst: burst}
		for _, l := range nodes {
			rules[a] = append(rules[a], mustRegister(t, l, hybrid.Rule{Name: alg.String(), Limit: lim}, hybrid.Hybrid))
			evenRules[a] = append(evenRules[a], mustRegister(t, l, hybrid.Rule{Name: alg.String() + "-even", Limit: lim, Policy: hybrid.FailLocal}, hybrid.Hybrid))
		}
	}
	// admitted[a][w][i]: by algorithm, workload and node.
	admitted := make([][][3]int64, len(algos))
	for a := range admitted {
		admitted[a] = make([][3]int64, len(workloads))
	}
	step := func() {
		for i, l := range nodes {
			for a := range algos {
				for w, wl := range workloads {
					for range wl.offered[i] {
						d, err := l.Allow(ctx, rules[a][i], wl.key)
						require.NoError(t, err)
						if d.Allowed() {
							admitted[a][w][i]++
						}
					}
				}
			}
			trySync(l, clk)
		}
		gossipStep(clk)
	}
	// With Redis: every key's demand reaches the gossip.
	for range 30 {
		step()
	}
	require.Eventually(t, func() bool {
		step()
		for _, l := range nodes {
			if l.Stats().GossipRecordsReceived < uint64(len(algos)*len(workloads)) {
				return false
			}
		}
		return true
	}, 5*time.Second, time.Millisecond, "records reach the peers")

	srv.Kill()
	for i, l := range nodes {
		markUnavailable(t, l, rules[0][i], clk)
	}

	// A key no node has gossiped: the even split of the burst, as
	// FailLocal's (the cold-start allowance on top in both).
	for a, alg := range algos {
		n, d := exhaust(t, nodes[0], rules[a][0], "new", 1000)
		even, _ := exhaust(t, nodes[0], evenRules[a][0], "new", 1000)
		assert.Equal(t, even, n, "%v: a new key is split evenly, as FailLocal splits it", alg)
		assert.InDelta(t, burst/3, n, 3, "%v: a new key admits about a third of the burst", alg)
		assert.True(t, d.Degraded(), "%v: a policy's decision is Degraded", alg)
		assert.Equal(t, local.ReasonLimited, d.Reason(), "%v: a refusal without Redis, on the node's part", alg)
		assert.Equal(t, int64(burst), d.Capacity(), "%v: the limit is the rule's", alg)
		// A cost the rule takes but a third of the burst does not: an
		// ordinary refusal, not cost_too_high.
		d, err := nodes[0].AllowN(ctx, rules[a][0], "big", burst)
		require.NoError(t, err)
		assert.False(t, d.Allowed(), "%v: a cost above the node's part of the burst", alg)
		assert.Equal(t, local.ReasonLimited, d.Reason(), "%v: a cost the rule takes is refused as limited, on the node's part", alg)
	}

	// The leases held when Redis died run out and the bursts drain; then
	// one second of outage, 3 × L offered per key.
	for range 50 {
		step()
	}
	for a := range admitted {
		clear(admitted[a])
	}
	const steps = 100
	for range steps {
		step()
	}
	for a, alg := range algos {
		for w, wl := range workloads {
			got := admitted[a][w]
			total := got[0] + got[1] + got[2]
			t.Logf("%v, %s: admitted %v = %d in 1s (rate %d/s)", alg, wl.key, got, total, L)
			// Within 10%: the demand the shares follow is measured on real
			// time, under whatever else the machine runs.
			assert.InDelta(t, L, total, 0.10*L, "%v, %s: the cluster keeps the rate", alg, wl.key)
			if wl.offered[0] > wl.offered[1] {
				assert.Greater(t, got[0], int64(L/2), "%v, %s: the busy node takes more than an even split", alg, wl.key)
			}
		}
	}
}

// TestFallbackBucketShareGrows: a bucket key that only one node asks for
// during an outage, refused ones included, comes to hold nearly the whole
// rate on that node once its demand is gossiped: the requests the policy
// decides count as demand.
func TestFallbackBucketShareGrows(t *testing.T) {
	leakcheck.Check(t)
	ctx := context.Background()
	srv := redistest.Start(t)
	const L = 1000
	clk := clocktest.New(epoch2030.Add(100 * time.Millisecond))
	nodes := gossipClusterWith(t, srv, redistest.Prefix(t), clk, steadyMembers, "a", "b")
	lim := local.Limit{Algorithm: local.TokenBucket, Quota: L, Window: time.Second, Burst: 10}
	var r *hybrid.Rule
	for i, l := range nodes {
		rr := mustRegister(t, l, hybrid.Rule{Name: "r", Limit: lim}, hybrid.Hybrid)
		if i == 0 {
			r = rr
		}
	}
	srv.Kill()
	markUnavailable(t, nodes[0], r, clk)
	// 10 per 10ms asked of node a alone (L/s): an even split admits half.
	var admitted int64
	step := func() {
		for range 10 {
			d, err := nodes[0].Allow(ctx, r, "k")
			if err != nil {
				require.ErrorIs(t, err, hybrid.ErrUnavailable)
			}
			if d.Allowed() {
				admitted++
			}
		}
		trySync(nodes[0], clk)
		gossipStep(clk)
	}
	for range 20 {
		step()
	}
	admitted = 0
	for range 50 {
		step()
	}
	t.Logf("admitted %d of %d asked in 0.5s", admitted, L/2)
	assert.Greater(t, admitted, int64(L/2*85/100), "the only node asking takes most of the rate, not half")
}

// TestAllowNoAllocsFallbackBucket: a bucket rule's decision by its demand
// share while Redis is down allocates nothing.
func TestAllowNoAllocsFallbackBucket(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	ctx := context.Background()
	srv := redistest.Start(t)
	clk := clocktest.New(epoch2030.Add(100 * time.Millisecond))
	l := gossipClusterWith(t, srv, redistest.Prefix(t), clk, steadyMembers, "a")[0]
	lim := local.Limit{Algorithm: local.TokenBucket, Quota: 1000, Window: time.Second, Burst: 10}
	r := mustRegister(t, l, hybrid.Rule{Name: "r", Limit: lim}, hybrid.Hybrid)
	srv.Kill()
	markUnavailable(t, l, r, clk)
	for range 20 {
		l.Allow(ctx, r, "k")
	}
	c, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	hybridsim.SyncAt(c, l, clk.Now()) // the key is in the syncer's hands: no queueing below
	cancel()
	d, err := l.Allow(ctx, r, "k")
	require.NoError(t, err)
	require.True(t, d.Degraded(), "decided by the policy")
	allocs := testing.AllocsPerRun(100, func() {
		clk.Add(time.Millisecond)
		l.Allow(ctx, r, "k")
	})
	assert.Zero(t, allocs)
}
