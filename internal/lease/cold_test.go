package lease

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/internal/localx"
	"github.com/hybridlimit/hybridlimit/local"
)

// coldRule is lim's lease rule under testParams on a cluster that counted
// nodes live nodes (0: not counted yet), waiting for its leases if wait.
func coldRule(t *testing.T, lim localx.Limit, nodes int64, wait bool) *Rule {
	t.Helper()
	c := NewCluster(0)
	c.SetNodes(nodes)
	r, err := NewRule(lim, testParams, c, nil)
	require.NoError(t, err)
	if wait {
		r.SetWaitFirst()
	}
	return r
}

// TestColdStartAllowance: a key's first requests on a node, before any
// lease, are decided at once, up to the allowance max(1, ⌈ε × limit ÷
// nodes⌉) (1 while the nodes are not counted yet), the same in every run;
// past it they are refused with figures that agree (remaining below the
// cost, a retry of about one round trip). A rule that waits for its leases
// admits nothing without one.
func TestColdStartAllowance(t *testing.T) {
	fixed := func(limit int64) localx.Limit {
		return localx.MustLimit(local.Limit{Algorithm: local.FixedWindow, Quota: limit, Window: 10 * time.Second})
	}
	gcra := localx.MustLimit(local.Limit{Algorithm: local.GCRA, Quota: 100, Window: 10 * time.Second, Burst: 10})
	for _, tc := range []struct {
		name  string
		lim   localx.Limit
		nodes int64
		wait  bool
		want  int64 // admitted of a burst of 40
	}{
		{"nodes not counted yet", fixed(1000), 0, false, 1},
		{"1000 per window, 4 nodes", fixed(1000), 4, false, 13},
		{"100 per window, 8 nodes", fixed(100), 8, false, 1},
		{"5 per window, 8 nodes", fixed(5), 8, false, 1},
		{"counter 100, 1 node", localx.MustLimit(local.Limit{Algorithm: local.SlidingWindowCounter, Quota: 100, Window: 10 * time.Second}), 1, false, 5},
		{"GCRA burst 10, 8 nodes", gcra, 8, false, 1},
		{"GCRA burst 10, not counted yet", gcra, 0, false, 1},
		{"waits for its lease", fixed(1000), 4, true, 0},
		{"GCRA, waits for its lease", gcra, 4, true, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for run := range 2 { // identical runs admit the same
				r := coldRule(t, tc.lim, tc.nodes, tc.wait)
				var k Lease
				now := int64(1_900_000_000)*1e6 + 123
				var admitted int64
				for range 40 {
					v, signal := k.Decide(r, now, 1)
					assert.True(t, signal.Sync(), "a key without a lease asks the syncer")
					if v.Reason == local.ReasonOK {
						admitted++
						continue
					}
					assert.Equal(t, local.ReasonNoLease, v.Reason, "run %d", run)
					assert.Less(t, v.Remaining, int64(1), "a refusal's remaining is below its cost")
					assert.Equal(t, r.minGap, v.Retry, "retry after about one round trip")
				}
				assert.Equal(t, tc.want, admitted, "run %d", run)
			}
		})
	}
}

// TestAllowanceRenews: the allowance bounds what a node admits beyond its
// grant in a window: once spent, the key is refused until a grant comes,
// even after Redis counted the debt (renewed debt races the others' grants
// on a busy key); a grant admits again.
func TestAllowanceRenews(t *testing.T) {
	lim := localx.MustLimit(local.Limit{Algorithm: local.FixedWindow, Quota: 100, Window: 10 * time.Second})
	r := coldRule(t, lim, 8, false)
	const w = int64(10e6)
	start := int64(1_900_000_000) * w
	var k Lease
	now := start + 1000
	v, _ := k.Decide(r, now, 1)
	require.Equal(t, local.ReasonOK, v.Reason)
	v, _ = k.Decide(r, now+1, 1)
	require.Equal(t, local.ReasonNoLease, v.Reason, "the allowance (1) is spent")

	reply := func(granted, committed int64) {
		q := k.Request(r, now+10, false)
		k.Answered()
		k.ApplyWindow(r, &q, &WindowReply{
			Now: now + 20, Window: start, Epoch: 1, Granted: granted, Used: q.Cur.Used, Committed: committed,
			Live: 8, Room: 100 - committed,
		}, now+20)
	}
	reply(0, 1)
	v, _ = k.Decide(r, now+30, 1)
	assert.Equal(t, local.ReasonNoLease, v.Reason, "counted, but no grant: the allowance does not renew")
	assert.Equal(t, int64(0), v.Remaining)

	reply(5, 5)
	v, _ = k.Decide(r, now+40, 1)
	assert.Equal(t, local.ReasonOK, v.Reason, "a grant admits")
	assert.LessOrEqual(t, v.Remaining, int64(100))
}

// TestCounterUsedUpGrant: a sliding window counter's key whose grant in the
// window is used up admits nothing on the allowance, however much room its
// last reply told of (Redis never says the counter's window is exhausted,
// and that room is being granted to the others), until a top-up comes; a
// fixed window's key, which Redis tells when its window is spent, still
// may. A counter key without a grant in the window keeps its allowance.
func TestCounterUsedUpGrant(t *testing.T) {
	const w = int64(1e6)
	start := int64(1_900_000_000) * w
	for _, tc := range []struct {
		alg       local.Algorithm
		allowance bool // admits past its used-up grant
	}{
		{local.SlidingWindowCounter, false},
		{local.FixedWindow, true},
	} {
		t.Run(tc.alg.String(), func(t *testing.T) {
			lim := localx.MustLimit(local.Limit{Algorithm: tc.alg, Quota: 10000, Window: time.Second})
			r := coldRule(t, lim, 8, false)
			require.Equal(t, int64(63), r.allowance())
			var k Lease
			now := start + 1000
			reply := func(granted, committed int64) {
				q := k.Request(r, now, false)
				k.Answered()
				k.ApplyWindow(r, &q, &WindowReply{
					Now: now, Window: start, Epoch: 1, Granted: granted, Used: q.Cur.Used, Committed: committed,
					Live: 8, Room: 10000 - committed,
				}, now)
			}
			reply(0, 0)
			v, _ := k.Decide(r, now, 1)
			require.Equal(t, local.ReasonOK, v.Reason, "no grant in the window: the allowance admits")

			reply(50, 2000) // a stale reply: room 8000, far more than the allowance needs
			for i := range 49 {
				v, _ = k.Decide(r, now, 1)
				require.Equal(t, local.ReasonOK, v.Reason, "request %d, within the grant", i)
			}
			require.Equal(t, k.granted, k.used, "the grant is used up")
			v, signal := k.Decide(r, now, 1)
			assert.True(t, signal.Sync(), "a used-up grant asks for its top-up")
			if !tc.allowance {
				assert.Equal(t, local.ReasonNoLease, v.Reason, "a used-up grant waits for its top-up")
				assert.Equal(t, k.granted, k.used, "nothing admitted as debt")
			} else {
				assert.Equal(t, local.ReasonOK, v.Reason, "the fixed window's allowance, bounded by exhausted")
			}

			reply(100, 2100)
			v, _ = k.Decide(r, now, 1)
			assert.Equal(t, local.ReasonOK, v.Reason, "the top-up admits")
		})
	}
}

// TestVerdictsAgree: whatever the replies, a verdict's figures agree with
// its reason: a refusal says less than its cost remains, and its retry is
// positive; an admission's remaining is within what the rule can admit.
func TestVerdictsAgree(t *testing.T) {
	for _, alg := range []local.Algorithm{local.FixedWindow, local.SlidingWindowCounter, local.TokenBucket, local.GCRA} {
		t.Run(alg.String(), func(t *testing.T) {
			lim := localx.MustLimit(local.Limit{Algorithm: alg, Quota: 20, Window: time.Second})
			r := coldRule(t, lim, 4, false)
			rng := rand.New(rand.NewPCG(1, 2))
			const w = int64(1e6)
			now := int64(1_900_000_000)*w + 1
			var k Lease
			for i := range 20000 {
				now += rng.Int64N(w / 20)
				n := 1 + rng.Int64N(3)
				v, _ := k.Decide(r, now, n)
				if v.Reason == local.ReasonOK {
					assert.LessOrEqual(t, v.Remaining, r.MaxCost(), "step %d", i)
				} else {
					assert.Less(t, v.Remaining, n, "step %d: a refusal (%v) says %d remain of a cost %d", i, v.Reason, v.Remaining, n)
					assert.Positive(t, v.Retry, "step %d", i)
				}
				if rng.IntN(4) != 0 {
					continue
				}
				q := k.Request(r, now, false)
				k.Answered()
				rnow := now + rng.Int64N(200) - 100
				if r.buckets {
					share := rng.Int64N(8)
					k.ApplyBucket(r, &q, &BucketReply{
						Now: rnow, Epoch: 1, Rate: share, Burst: share, Expiry: rnow + 300_000,
						Grant: rng.Int64N(share + 1), Pool: rng.Int64N(25) - 4, PoolRate: rng.Int64N(21), PoolCap: 20, Live: 4,
					}, now)
					continue
				}
				committed := rng.Int64N(25)
				k.ApplyWindow(r, &q, &WindowReply{
					Now: rnow, Window: rnow - rnow%w, Epoch: 1, Granted: rng.Int64N(8), Used: q.Cur.Used,
					Committed: committed, PrevCommitted: rng.Int64N(25), Exhausted: committed >= 20,
					Live: 4, Room: max(20-committed, 0),
				}, now)
			}
		})
	}
}
