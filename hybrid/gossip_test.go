package hybrid_test

import (
	"context"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/hybridlimit/hybridlimit/hybrid"
	"github.com/hybridlimit/hybridlimit/internal/clocktest"
	"github.com/hybridlimit/hybridlimit/internal/hybridsim"
	"github.com/hybridlimit/hybridlimit/internal/leakcheck"
	"github.com/hybridlimit/hybridlimit/internal/redistest"
	"github.com/hybridlimit/hybridlimit/local"
	"github.com/hybridlimit/hybridlimit/syncer"
)

var gossipKey = []byte("0123456789abcdef")

// gossipConfig is a gossip node on a free loopback port with intervals
// short enough for tests.
func gossipConfig(name string, seeds ...string) *hybrid.GossipConfig {
	ml := memberlist.DefaultLocalConfig()
	ml.Name, ml.BindAddr, ml.BindPort = name, "127.0.0.1", 0
	ml.ProbeInterval = 50 * time.Millisecond
	ml.ProbeTimeout = 25 * time.Millisecond
	ml.GossipInterval = 10 * time.Millisecond
	ml.PushPullInterval = 300 * time.Millisecond
	ml.SuspicionMult = 2
	ml.TCPTimeout = 500 * time.Millisecond
	return &hybrid.GossipConfig{
		Memberlist: ml, Seeds: seeds, Keys: [][]byte{gossipKey}, Label: "hybrid-test",
		Interval: 20 * time.Millisecond, DemandHalfLife: 200 * time.Millisecond, RecordTTL: 5 * time.Second,
	}
}

// gossipCluster starts one Limiter per name on srv, with manual rounds on
// clk, each with a gossip node, joined to the first one's.
func gossipCluster(t *testing.T, srv *redistest.Server, prefix string, clk *clocktest.Clock, names ...string) []*hybrid.Limiter {
	t.Helper()
	return gossipClusterWith(t, srv, prefix, clk, nil, names...)
}

// gossipClusterWith is gossipCluster with tune, if not nil, applied to each
// node's gossip Config.
func gossipClusterWith(t *testing.T, srv *redistest.Server, prefix string, clk *clocktest.Clock, tune func(*hybrid.GossipConfig), names ...string) []*hybrid.Limiter {
	t.Helper()
	var out []*hybrid.Limiter
	for i, name := range names {
		cfg := nodeConfig(redistest.Client(t, srv.Addr), prefix, clk, name, len(names))
		var seeds []string
		if i > 0 {
			seeds = []string{out[0].Stats().GossipAddr}
		}
		cfg.Gossip = gossipConfig(name, seeds...)
		if tune != nil {
			tune(cfg.Gossip)
		}
		out = append(out, newNode(t, cfg))
	}
	for _, l := range out {
		require.Eventually(t, func() bool { return l.Stats().GossipMembers == len(names) }, 5*time.Second, 10*time.Millisecond,
			"every gossip node sees %d members", len(names))
	}
	return out
}

// TestFallbackDefaultPolicy: a Gossip that is not valid is reported, naming
// it (TestDefaults checks that Config.Gossip makes Gossip the default policy).
func TestFallbackDefaultPolicy(t *testing.T) {
	assert.Equal(t, "gossip", hybrid.Gossip.String())
	_, err := hybrid.New(hybrid.Config{Gossip: &hybrid.GossipConfig{}}) // no keys, not Insecure
	assert.ErrorIs(t, err, hybrid.ErrInvalidConfig)
	assert.ErrorContains(t, err, "Gossip")
}

// TestFallbackSkewedOutage: three nodes, Redis killed while 90% of a key's
// traffic is on one node. The Gossip policy splits what the window has
// left by the demand the nodes gossip, so the cluster keeps about the
// limit where an even split would admit about two thirds of it; when Redis
// restarts empty in the same window, each node hands back what it admitted,
// and no lease is granted on top of it.
func TestFallbackSkewedOutage(t *testing.T) {
	leakcheck.Check(t)
	ctx := context.Background()
	srv := redistest.Start(t)
	prefix := redistest.Prefix(t)
	const L = 1000
	W := time.Second
	clk := clocktest.New(epoch2030.Add(100 * time.Millisecond))
	nodes := gossipCluster(t, srv, prefix, clk, "a", "b", "c")
	rules := make([]*hybrid.Rule, len(nodes))
	for i, l := range nodes {
		rules[i] = mustRegister(t, l, hybrid.Rule{Name: "r", Limit: fixed(L, W)}, hybrid.Hybrid)
	}
	offered := []int{90, 10, 0} // per step, node by node
	admitted := make([]int64, len(nodes))
	step := func(sync bool) {
		for i, l := range nodes {
			for range offered[i] {
				d, err := l.Allow(ctx, rules[i], "k")
				if err != nil {
					require.ErrorIs(t, err, hybrid.ErrUnavailable, "node %d", i)
				}
				if d.Allowed() {
					admitted[i]++
				}
			}
			if sync {
				c, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
				hybridsim.SyncAt(c, l, clk.Now())
				cancel()
			}
		}
		clk.Add(10 * time.Millisecond)
	}
	// A window with Redis: demand and counts reach the gossip.
	for range 30 {
		step(true)
	}
	require.Eventually(t, func() bool {
		step(true)
		return nodes[0].Stats().GossipRecordsReceived > 0 && nodes[1].Stats().GossipRecordsReceived > 0
	}, 5*time.Second, 20*time.Millisecond, "records reach the peers")
	// Redis dies at the start of a window.
	wid := windowStart(clk, W)
	clk.Set(time.UnixMicro(wid).Add(W + 5*time.Millisecond))
	wid = windowStart(clk, W)
	srv.Kill()
	for i, l := range nodes {
		// The idle node (no key: its loop asleep until its next
		// registration) learns of it at its first request.
		l.Allow(ctx, rules[i], "probe")
		c, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
		_, err := hybridsim.SyncAt(c, l, clk.Now())
		cancel()
		require.ErrorIs(t, err, hybrid.ErrUnavailable, "node %d", i)
	}
	clear(admitted)
	// 60 steps of 10ms: offered 6 × L, a little faster than the gossip.
	for range 60 {
		step(true)
		time.Sleep(5 * time.Millisecond) // the gossip runs on real time
	}
	outage := admitted[0] + admitted[1] + admitted[2]
	t.Logf("outage window: admitted %v = %d (limit %d)", admitted, outage, L)
	assert.InDelta(t, L, outage, 0.10*L, "Gossip keeps the limit within 10%% with 90%% of the traffic on one node")
	assert.Greater(t, admitted[0], int64(L*2/3), "the busy node takes more than an even split")

	// Redis restarts empty in the same window: every node reports what it
	// admitted, once, and no lease comes on top of it.
	srv.Restart()
	for _, l := range nodes {
		syncBack(t, l, clk)
	}
	for range 20 {
		step(true)
	}
	require.Equal(t, wid, windowStart(clk, W), "still the outage's window")
	total := admitted[0] + admitted[1] + admitted[2]
	st := readWindow(t, redistest.Client(t, srv.Addr), syncer.Keyspace{Prefix: prefix}, "r", "k", W, wid)
	t.Logf("window: admitted %v = %d; Redis used %v", admitted, total, st.u)
	assert.LessOrEqual(t, total, int64(L*105/100), "the window Redis returns in admits at most 1.05 × L")
	assert.Equal(t, admitted[0], st.u["a"], "Redis holds what node a admitted")
	assert.Equal(t, admitted[1], st.u["b"], "Redis holds what node b admitted")
	assert.Equal(t, total, st.sumU(), "Redis's count equals what was admitted: nothing lost, nothing twice")
}

// TestHandBackSpan: the first round after an outage is a span of its own,
// the hand-back; the others are sync round spans.
func TestHandBackSpan(t *testing.T) {
	ctx := context.Background()
	srv := redistest.Start(t)
	clk := clocktest.New(epoch2030.Add(100 * time.Millisecond))
	rec := tracetest.NewSpanRecorder()
	cfg := nodeConfig(redistest.Client(t, srv.Addr), redistest.Prefix(t), clk, "a", 1)
	cfg.TracerProvider = trace.NewTracerProvider(trace.WithSpanProcessor(rec))
	l := newNode(t, cfg)
	r := mustRegister(t, l, hybrid.Rule{Name: "r", Limit: fixed(1000, time.Second)}, hybrid.Hybrid)
	l.Allow(ctx, r, "k")
	syncOK(t, l, clk)
	srv.Kill()
	markUnavailable(t, l, r, clk)
	srv.Restart()
	l.Allow(ctx, r, "k2") // a new key: the next round has something to exchange
	syncBack(t, l, clk)
	l.Allow(ctx, r, "k3")
	syncOK(t, l, clk)
	var names []string
	for _, s := range rec.Ended() {
		names = append(names, s.Name())
	}
	assert.Contains(t, names, "hybridlimit.sync")
	assert.Equal(t, 1, count(names, "hybridlimit.handback"), "one hand-back span: %v", names)
	assert.Equal(t, "hybridlimit.sync", names[len(names)-1], "rounds after the hand-back are sync spans")
}

// syncBack runs rounds on l until one succeeds: after Redis was down, the
// client's pool waits about a second before dialing again.
func syncBack(t *testing.T, l *hybrid.Limiter, clk *clocktest.Clock) {
	t.Helper()
	require.Eventually(t, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel()
		_, err := hybridsim.SyncAt(ctx, l, clk.Now())
		return err == nil
	}, 10*time.Second, 50*time.Millisecond, "Redis answers again")
}

func count(ss []string, s string) int {
	n := 0
	for _, x := range ss {
		if x == s {
			n++
		}
	}
	return n
}

// TestNoGrantOnUnknownUse: Redis restarts empty in a window where both
// nodes admitted by their failure policy, whichever it is. The first node
// back reports its use and would be granted the rest of the window before
// the second one reports its own; it takes no grant on top of its use
// there, and decides on its part of the limit until the window ends.
func TestNoGrantOnUnknownUse(t *testing.T) {
	for _, c := range []struct {
		policy hybrid.Policy
		outage int64 // what the two nodes admit without Redis
	}{
		{hybrid.Gossip, 800}, // without gossip: FailLocal's even split, L/2 each
		{hybrid.FailLocal, 800},
		{hybrid.FailOpen, 800},
		{hybrid.FailClosed, 0},
	} {
		t.Run(c.policy.String(), func(t *testing.T) { noGrantOnUnknownUse(t, c.policy, c.outage) })
	}
}

func noGrantOnUnknownUse(t *testing.T, policy hybrid.Policy, outage int64) {
	srv := redistest.Start(t)
	prefix := redistest.Prefix(t)
	const L = 1000
	W := time.Second
	clk := clocktest.New(epoch2030.Add(100 * time.Millisecond))
	nodes, rules := twoNodes(t, srv.Addr, prefix, clk, fixed(L, W), policy)
	var tl tally
	allow := func(i int) bool { return tl.allow(t, nodes[i], rules[i]) }
	for range 10 {
		allow(0)
		allow(1)
	}
	syncOK(t, nodes[0], clk)
	syncOK(t, nodes[1], clk)
	clk.Set(time.UnixMicro(windowStart(clk, W)).Add(W + 10*time.Millisecond))
	wid := windowStart(clk, W)
	tl.total = 0
	srv.Kill()
	for i := range nodes {
		markUnavailable(t, nodes[i], rules[i], clk)
		for range 400 {
			allow(i)
		}
	}
	require.Equal(t, outage, tl.total, "what the nodes admit by the policy")
	srv.Restart()
	backInTurn(t, nodes, allow, clk) // node a alone for a while: Redis knows only its 400
	require.Equal(t, wid, windowStart(clk, W))
	windowHeld(t, srv.Addr, prefix, W, wid, tl.total, L)
}

// backInTurn brings nodes[0] back from an outage, lets it decide all it
// can for 30 rounds alone, then nodes[1], and both for 30 rounds more.
func backInTurn(t *testing.T, nodes []*hybrid.Limiter, allow func(int) bool, clk *clocktest.Clock) {
	t.Helper()
	ctx := context.Background()
	syncBack(t, nodes[0], clk)
	for range 30 {
		for allow(0) {
		}
		hybridsim.SyncAt(ctx, nodes[0], clk.Now())
		clk.Add(10 * time.Millisecond)
	}
	syncBack(t, nodes[1], clk)
	for range 30 {
		for i := range nodes {
			for allow(i) {
			}
			hybridsim.SyncAt(ctx, nodes[i], clk.Now())
		}
		clk.Add(10 * time.Millisecond)
	}
}

// windowHeld checks that window wid of key "k" of rule "r" admitted no
// more than L in all, and that Redis counts what was admitted.
func windowHeld(t *testing.T, addr, prefix string, W time.Duration, wid, admitted, L int64) {
	t.Helper()
	st := readWindow(t, redistest.Client(t, addr), syncer.Keyspace{Prefix: prefix}, "r", "k", W, wid)
	t.Logf("admitted in the window: %d; Redis used %v", admitted, st.u)
	assert.LessOrEqual(t, admitted, L, "no grant on top of the use Redis did not know yet")
	assert.Equal(t, admitted, st.sumU(), "Redis's count equals what was admitted")
}

// TestNoGrantInTheNextWindow: the outage ends just before a window
// begins, and the nodes come back at different moments, as after a Cluster
// failover whose slot map one node reloads later. Node b, its breaker
// still open, admits its even split of the new window by FailLocal, which
// Redis does not know yet; node a, back first, takes no grant on top of its
// use in that window either while the hand-back lasts, so the window holds
// the limit, and Redis's count of it equals what was admitted.
func TestNoGrantInTheNextWindow(t *testing.T) {
	srv := redistest.Start(t)
	prefix := redistest.Prefix(t)
	const L = 1000
	W := time.Second
	clk := clocktest.New(epoch2030.Add(100 * time.Millisecond))
	nodes, rules := twoNodes(t, srv.Addr, prefix, clk, fixed(L, W), hybrid.FailLocal)
	var tl tally
	allow := func(i int) bool { return tl.allow(t, nodes[i], rules[i]) }
	for i := range nodes {
		allow(i)
		syncOK(t, nodes[i], clk)
	}
	clk.Set(time.UnixMicro(windowStart(clk, W)).Add(900 * time.Millisecond))
	srv.Kill()
	for i := range nodes {
		markUnavailable(t, nodes[i], rules[i], clk)
	}
	srv.Restart()
	clk.Set(time.UnixMicro(windowStart(clk, W)).Add(W + 10*time.Millisecond))
	wid := windowStart(clk, W)
	tl.total = 0
	for allow(1) { // node b, not back yet: its even split
	}
	require.Equal(t, int64(L/2), tl.total, "node b's even split while its breaker is open")
	backInTurn(t, nodes, allow, clk) // node a, back alone for a while: Redis knows none of b's use
	require.Equal(t, wid, windowStart(clk, W), "still the window after the outage")
	windowHeld(t, srv.Addr, prefix, W, wid, tl.total, L)
}

// TestGossipMetrics: the gossip's figures and each switch of mode are
// metrics, and the figures are in Limiter.Stats too.
func TestGossipMetrics(t *testing.T) {
	leakcheck.Check(t)
	ctx := context.Background()
	srv := redistest.Start(t)
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { mp.Shutdown(context.Background()) })
	clk := clocktest.New(epoch2030.Add(100 * time.Millisecond))
	prefix := redistest.Prefix(t)
	var nodes []*hybrid.Limiter
	for i, name := range []string{"a", "b"} {
		cfg := nodeConfig(redistest.Client(t, srv.Addr), prefix, clk, name, 2)
		cfg.MeterProvider = mp
		var seeds []string
		if i > 0 {
			seeds = []string{nodes[0].Stats().GossipAddr}
		}
		cfg.Gossip = gossipConfig(name, seeds...)
		nodes = append(nodes, newNode(t, cfg))
	}
	require.Eventually(t, func() bool { return nodes[0].Stats().GossipMembers == 2 }, 5*time.Second, 10*time.Millisecond)
	r := mustRegister(t, nodes[0], hybrid.Rule{Name: "r", Limit: fixed(1000, time.Second)}, hybrid.Hybrid)
	for range 20 {
		nodes[0].Allow(ctx, r, "k")
	}
	syncOK(t, nodes[0], clk)
	srv.Kill()
	markUnavailable(t, nodes[0], r, clk)
	c := collect(t, reader)
	members := int64Points(t, c, "hybridlimit.gossip.members")
	assert.Equal(t, int64(2), members[""], "members: %v", members)
	assert.Contains(t, c, "hybridlimit.gossip.io")
	assert.Contains(t, c, "hybridlimit.gossip.records")
	assert.Contains(t, c, "hybridlimit.gossip.records.dropped")
	changes := int64Points(t, c, "hybridlimit.mode.changes")
	assert.Equal(t, map[string]int64{"to=policy": 1}, changes)

	// Stats reads the same counters later (the metrics sum both nodes'):
	// at least what was collected.
	var sum hybrid.Stats
	for _, n := range nodes {
		st := n.Stats()
		assert.NotEmpty(t, st.GossipAddr)
		assert.Positive(t, st.GossipBytesSent)
		assert.Zero(t, st.GossipMalformed)
		sum.GossipBytesSent += st.GossipBytesSent
		sum.GossipBytesReceived += st.GossipBytesReceived
		sum.GossipRecordsSent += st.GossipRecordsSent
		sum.GossipRecordsReceived += st.GossipRecordsReceived
	}
	assert.Equal(t, 2, nodes[0].Stats().GossipMembers)
	bytes, records := int64Points(t, c, "hybridlimit.gossip.io"), int64Points(t, c, "hybridlimit.gossip.records")
	assert.GreaterOrEqual(t, sum.GossipBytesSent, uint64(bytes["direction=sent"]))
	assert.GreaterOrEqual(t, sum.GossipBytesReceived, uint64(bytes["direction=received"]))
	assert.GreaterOrEqual(t, sum.GossipRecordsSent, uint64(records["direction=sent"]))
	assert.GreaterOrEqual(t, sum.GossipRecordsReceived, uint64(records["direction=received"]))

	alone, err := hybrid.New(hybrid.Config{})
	require.NoError(t, err)
	t.Cleanup(func() { alone.Close() })
	assert.Equal(t, hybrid.Stats{}, alone.Stats(), "no gossip, no rules: zero figures")
}

// TestNoBurstOnUnknownUse: a token bucket drained by the failure policies
// while Redis was down, and Redis restarted full. For a while after it
// answers again, the nodes refill at their share of the rate only: Redis's
// fresh burst, which the nodes spent without it, is not handed out again.
func TestNoBurstOnUnknownUse(t *testing.T) {
	ctx := context.Background()
	srv := redistest.Start(t)
	prefix := redistest.Prefix(t)
	const L, B = 1000, 200
	lim := local.Limit{Algorithm: local.TokenBucket, Quota: L, Window: time.Second, Burst: B}
	clk := clocktest.New(epoch2030.Add(100 * time.Millisecond))
	nodes, rules := twoNodes(t, srv.Addr, prefix, clk, lim, hybrid.Gossip)
	var total int64
	drain := func(i int) {
		for {
			d, err := nodes[i].Allow(ctx, rules[i], "k")
			require.NoError(t, err)
			if !d.Allowed() {
				return
			}
			total++
		}
	}
	for i := range nodes {
		drain(i)
		syncOK(t, nodes[i], clk)
	}
	srv.Kill()
	for i := range nodes {
		markUnavailable(t, nodes[i], rules[i], clk)
		drain(i)
	}
	srv.Restart()
	for i := range nodes {
		syncBack(t, nodes[i], clk)
	}
	// 300 ms with Redis back, both nodes asking for all they can get.
	total = 0
	const span = 300 * time.Millisecond
	for end := clk.Now().Add(span); clk.Now().Before(end); clk.Add(10 * time.Millisecond) {
		for i := range nodes {
			drain(i)
			hybridsim.SyncAt(ctx, nodes[i], clk.Now())
		}
	}
	rate := int64(L * span / time.Second)
	t.Logf("admitted in the %v after Redis came back: %d (the rate alone: %d; burst %d)", span, total, rate, B)
	assert.LessOrEqual(t, total, rate+B/4, "a burst handed out on top of what the nodes spent without Redis")
	assert.Greater(t, total, rate/2, "the nodes' shares of the rate refill them")
}
