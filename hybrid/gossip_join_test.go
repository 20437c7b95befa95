package hybrid_test

import (
	"context"
	"errors"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/hybrid"
	"github.com/hybridlimit/hybridlimit/internal/clocktest"
	"github.com/hybridlimit/hybridlimit/internal/hybridsim"
	"github.com/hybridlimit/hybridlimit/internal/leakcheck"
	"github.com/hybridlimit/hybridlimit/internal/redistest"
	"github.com/hybridlimit/hybridlimit/local"
)

// errCutOff is the dial error of a node whose client has not reached Redis
// again yet.
var errCutOff = errors.New("still cut off from Redis")

// trySync runs a round on l at the clock's time, within 100ms, Redis up or
// down.
func trySync(l *hybrid.Limiter, clk *clocktest.Clock) {
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	hybridsim.SyncAt(ctx, l, clk.Now())
}

// gossipStep moves the virtual clock 10ms on, and gives the gossip, which
// runs on real time, 5ms.
func gossipStep(clk *clocktest.Clock) {
	clk.Add(10 * time.Millisecond)
	time.Sleep(5 * time.Millisecond)
}

// TestBucketReturnJoinedNode: a token bucket of L per second, nodes a and b
// holding shares when Redis is killed, node c joining during the outage
// (it never held a lease and Redis never heard of it), 3 × L offered
// evenly. Redis restarts empty; a and b reach it again while c's client
// does not yet (go-redis redials a refused server about once a second, so
// nodes come back up to a second apart), and c goes on admitting its part
// by the gossip split. Redis, knowing only a's and b's demand, would give
// them the whole rate between them, on top of c's part: within the
// outage's hand-back their shares are cut to the gossip split's, and the
// cluster keeps about L. Once c is back too and the hand-back is over, the
// shares are Redis's again, still about L in all.
func TestBucketReturnJoinedNode(t *testing.T) {
	leakcheck.Check(t)
	srv := redistest.Start(t)
	prefix := redistest.Prefix(t)
	const L, B = 1000, 100
	lim := local.Limit{Algorithm: local.TokenBucket, Quota: L, Window: time.Second, Burst: B}
	clk := clocktest.New(epoch2030.Add(100 * time.Millisecond))
	nodes := gossipClusterWith(t, srv, prefix, clk, steadyMembers, "a", "b")
	var rules []*hybrid.Rule
	for _, l := range nodes {
		rules = append(rules, mustRegister(t, l, hybrid.Rule{Name: "r", Limit: lim}, hybrid.Hybrid))
	}
	var tl tally
	step := func() {
		for i, l := range nodes {
			for range 10 { // L/s per node
				tl.allow(t, l, rules[i])
			}
			trySync(l, clk)
		}
		gossipStep(clk)
	}
	for range 30 {
		step()
	}

	srv.Kill()
	for i, l := range nodes {
		markUnavailable(t, l, rules[i], clk)
	}
	// c joins while Redis is down: its client dials only once allowed.
	var dialC atomic.Bool
	opt := redistest.Options(srv.Addr)
	opt.DialerRetries = 1
	opt.Dialer = func(ctx context.Context, network, addr string) (net.Conn, error) {
		if !dialC.Load() {
			return nil, errCutOff
		}
		var d net.Dialer
		return d.DialContext(ctx, network, addr)
	}
	client := redis.NewClient(opt)
	t.Cleanup(func() { client.Close() })
	cfg := nodeConfig(client, prefix, clk, "c", 2)
	cfg.Gossip = gossipConfig("c", nodes[0].Stats().GossipAddr)
	steadyMembers(cfg.Gossip)
	nodes = append(nodes, newNode(t, cfg))
	rules = append(rules, mustRegister(t, nodes[2], hybrid.Rule{Name: "r", Limit: lim}, hybrid.Hybrid))
	markUnavailable(t, nodes[2], rules[2], clk)
	for _, l := range nodes {
		require.Eventually(t, func() bool { return l.Stats().GossipMembers == 3 }, 5*time.Second, 10*time.Millisecond,
			"every gossip node sees c")
	}
	// A second of outage: c's demand reaches the others, the split settles.
	for range 100 {
		step()
	}

	srv.Restart()
	for i := range 2 {
		syncBack(t, nodes[i], clk)
	}
	// Half a second with a and b back and c still cut off.
	const span = 500 * time.Millisecond
	tl = tally{}
	for end := clk.Now().Add(span); clk.Now().Before(end); {
		step()
	}
	rate := int64(L * span / time.Second)
	t.Logf("c cut off: admitted %d in %v, %d of them by c's policy (the rate: %d; burst %d)", tl.total, span, tl.byPolicy, rate, B)
	assert.Positive(t, tl.byPolicy, "c decides by its policy")
	assert.LessOrEqual(t, tl.total, rate+B/2, "a's and b's shares come on top of what c admits by the gossip split")
	assert.Greater(t, tl.total, rate*8/10, "the cluster keeps about the rate")

	// c reaches Redis; a second later the hand-back is over.
	dialC.Store(true)
	syncBack(t, nodes[2], clk)
	for range 100 {
		step()
	}
	tl = tally{}
	for end := clk.Now().Add(span); clk.Now().Before(end); {
		step()
	}
	t.Logf("all back: admitted %d in %v, %d by a policy", tl.total, span, tl.byPolicy)
	assert.Zero(t, tl.byPolicy, "every node decides on its lease")
	assert.InDelta(t, rate, tl.total, float64(rate)/10, "the shares are Redis's again")
}
