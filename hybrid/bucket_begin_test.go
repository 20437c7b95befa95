package hybrid_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/hybrid"
	"github.com/hybridlimit/hybridlimit/internal/clocktest"
	"github.com/hybridlimit/hybridlimit/internal/redistest"
	"github.com/hybridlimit/hybridlimit/local"
)

// TestBucketPolicyBeginsFromTheShare: a bucket key the nodes keep at its
// rate through Redis gets no second burst from the failure policy when
// Redis goes. Each node's part begins from what it held, not full, so the
// cluster stays on the bucket's arrival curve through the fault: over any
// span, at most the burst plus the rate's refill (and the nodes'
// cold-start allowance). A part begun full would add the burst again.
func TestBucketPolicyBeginsFromTheShare(t *testing.T) {
	for _, policy := range []hybrid.Policy{hybrid.FailLocal, hybrid.Gossip} {
		t.Run(policy.String(), func(t *testing.T) { bucketBegins(t, policy) })
	}
}

func bucketBegins(t *testing.T, policy hybrid.Policy) {
	srv := redistest.Start(t)
	prefix := redistest.Prefix(t)
	const L, B, N = 1000, 100, 2
	clk := clocktest.New(epoch2030.Add(100 * time.Millisecond))
	lim := local.Limit{Algorithm: local.TokenBucket, Quota: L, Window: time.Second, Burst: B}
	// Gossip without Config.Gossip decides as FailLocal does.
	nodes, rules := twoNodes(t, srv.Addr, prefix, clk, lim, policy)
	var tl tally
	start := clk.Now()
	step := func(sync bool) {
		for i := range nodes {
			for range 10 { // 2 × L offered in all
				tl.allow(t, nodes[i], rules[i])
			}
			if sync {
				trySync(nodes[i], clk)
			}
		}
		clk.Add(10 * time.Millisecond)
	}
	for range 100 {
		step(true)
	}
	require.Zero(t, tl.byPolicy, "Redis up: no decision by the policy")
	srv.Pause()
	defer srv.Resume()
	for i := range nodes {
		markUnavailable(t, nodes[i], rules[i], clk)
	}
	for range 100 {
		step(false)
	}
	require.NotZero(t, tl.byPolicy, "the policy decided through the outage")
	// The cold-start allowance: a = max(1, ⌈ε·B/N⌉) per node.
	allowance := int64(N * 3)
	curve := B + int64(clk.Now().Sub(start).Seconds()*L) + allowance
	t.Logf("%v: admitted %d (%d by the policy) over %v: the arrival curve allows %d", policy, tl.total, tl.byPolicy, clk.Now().Sub(start), curve)
	assert.LessOrEqual(t, tl.total, curve, "admissions past the arrival curve: the policy's parts began with a burst the nodes had spent")
	assert.Greater(t, tl.total, curve-B, "the nodes kept the rate through the fault")
}
