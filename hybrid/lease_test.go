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
	"github.com/hybridlimit/hybridlimit/internal/hybridsim"
	"github.com/hybridlimit/hybridlimit/internal/redistest"
	"github.com/hybridlimit/hybridlimit/local"
	"github.com/hybridlimit/hybridlimit/syncer"
)

// TestIdleReleaseWindows: a node gives back the unused part of a window
// lease once the key has gone IdleRelease (default 3 × Interval) without
// requests, so the other nodes can have it (SyncConfig.IdleRelease).
func TestIdleReleaseWindows(t *testing.T) {
	ctx := context.Background()
	client := redistest.Client(t, redistest.Addr(t))
	prefix := redistest.Prefix(t)
	ks := syncer.Keyspace{Prefix: prefix}
	const L = 60_000
	W := time.Minute
	start := epoch2030.Add(time.Second)
	clk := clocktest.New(start)
	wid := windowStart(clk, W)
	a := newNode(t, nodeConfig(client, prefix, clk, "a", 2))
	b := newNode(t, nodeConfig(client, prefix, clk, "b", 2))
	ra := mustRegister(t, a, hybrid.Rule{Name: "r", Limit: fixed(L, W)}, hybrid.Hybrid)
	rb := mustRegister(t, b, hybrid.Rule{Name: "r", Limit: fixed(L, W)}, hybrid.Hybrid)
	// A short burst on node a: two rounds 10ms apart.
	for range 2 {
		for range 20 {
			a.Allow(ctx, ra, "k")
		}
		syncOK(t, a, clk)
		clk.Add(10 * time.Millisecond)
	}
	held := readWindow(t, client, ks, "r", "k", W, wid)
	t.Logf("node a used %d, holds a grant of %d of %d", held.u["a"], held.g["a"], L)
	// Node a goes idle; its loop runs every Interval.
	for clk.Now().Before(start.Add(2 * time.Second)) {
		clk.Add(testInterval)
		syncOK(t, a, clk)
	}
	st := readWindow(t, client, ks, "r", "k", W, wid)
	assert.LessOrEqual(t, st.g["a"], st.u["a"], "bug: node a idle for 2s (IdleRelease %v) still holds a grant beyond what it used", 3*testInterval)
	// Node b, with the same demand, gets its part. Its demand would spend
	// the budget long before the window ends: its grants are paced, and it
	// asks for more in a first-lease round every PaceGap (MinGap ÷ 5).
	var got int64
	for range 25 {
		n, _ := exhaust(t, b, rb, "k", L)
		got += n
		if hybridsim.SyncFirstWanted(b) {
			_, err := hybridsim.SyncFirstAt(ctx, b, clk.Now())
			require.NoError(t, err, "SyncFirstAt")
		} else {
			syncOK(t, b, clk)
		}
		clk.Add(testInterval / 50)
	}
	assert.GreaterOrEqual(t, got, int64(L/2), "node b's admissions in a window where %d of %d were used", st.sumU(), L)
}

// TestLongWindowNoStarvation: two nodes with the same steady demand on a
// one-minute window; node b starts a second after node a. Far below the
// limit, neither is refused: a single exact limiter would admit every
// request, and the design grants each node its share of the budget by
// demand.
func TestLongWindowNoStarvation(t *testing.T) {
	ctx := context.Background()
	client := redistest.Client(t, redistest.Addr(t))
	prefix := redistest.Prefix(t)
	ks := syncer.Keyspace{Prefix: prefix}
	const L = 60_000
	W := time.Minute
	start := epoch2030.Add(time.Second)
	clk := clocktest.New(start)
	wid := windowStart(clk, W)
	nodes := []*hybrid.Limiter{
		newNode(t, nodeConfig(client, prefix, clk, "a", 2)),
		newNode(t, nodeConfig(client, prefix, clk, "b", 2)),
	}
	rules := make([]*hybrid.Rule, 2)
	for i, l := range nodes {
		rules[i] = mustRegister(t, l, hybrid.Rule{Name: "r", Limit: fixed(L, W)}, hybrid.Hybrid)
	}
	// Node b is live from the start, with little demand.
	nodes[1].Allow(ctx, rules[1], "k")
	syncOK(t, nodes[1], clk)
	var admitted, offered [2]int64
	var refusedB int64
	var firstRefusal local.Decision
	lastSync := [2]time.Time{}
	for step := 0; step < 400; step++ { // 4s in steps of 10ms
		now := clk.Now()
		for i, l := range nodes {
			if i == 1 && now.Before(start.Add(time.Second)) {
				continue // node b starts a second later
			}
			if syncWanted(l) || now.Sub(lastSync[i]) >= testInterval {
				syncOK(t, l, clk)
				lastSync[i] = now
			}
			for range 20 { // 2,000 a second per node: 4,000 of 1,000 a second
				offered[i]++
				d, _ := l.Allow(ctx, rules[i], "k")
				if d.Allowed() {
					admitted[i]++
				} else if i == 1 && now.After(start.Add(1500*time.Millisecond)) {
					if refusedB == 0 {
						firstRefusal = d
					}
					refusedB++
				}
			}
		}
		clk.Add(10 * time.Millisecond)
	}
	st := readWindow(t, client, ks, "r", "k", W, wid)
	t.Logf("admitted a %d/%d, b %d/%d; Redis g %v u %v R %d", admitted[0], offered[0], admitted[1], offered[1], st.g, st.u, st.R)
	require.LessOrEqual(t, admitted[0]+admitted[1], int64(L/2), "admitted in all: the test means to stay far below the limit")
	assert.Zero(t, refusedB, "bug: node b refused requests (first: %+v) in a window with %d of %d used: node a holds a grant of %d",
		firstRefusal, admitted[0]+admitted[1], L, st.g["a"])
}

// stepper drives nodes on a virtual clock in steps of 10ms: at each step,
// each node runs a round when a key asked for one (syncWanted) or its
// regular Interval is up, then offers perStep requests per key.
type stepper struct {
	t        *testing.T
	clk      *clocktest.Clock
	nodes    []*hybrid.Limiter
	rules    []*hybrid.Rule // per node
	keys     []string
	w        time.Duration
	perStep  int
	last     []time.Time
	admitted map[[3]int64]int64 // (node, key, window) → admitted
	refused  map[local.Reason]int64
	syncErrs int
	synced   []time.Time // per node: the last round that exchanged with Redis
}

func newStepper(t *testing.T, clk *clocktest.Clock, nodes []*hybrid.Limiter, rules []*hybrid.Rule, keys []string, w time.Duration, perStep int) *stepper {
	s := &stepper{t: t, clk: clk, nodes: nodes, rules: rules, keys: keys, w: w, perStep: perStep,
		admitted: map[[3]int64]int64{}, refused: map[local.Reason]int64{},
		last: make([]time.Time, len(nodes)), synced: make([]time.Time, len(nodes))}
	for i := range nodes { // each node's regular rounds at its own phase
		s.last[i] = clk.Now().Add(-testInterval + time.Duration(i)*testInterval/time.Duration(len(nodes)))
	}
	return s
}

func (s *stepper) step() {
	s.t.Helper()
	now := s.clk.Now()
	for i, l := range s.nodes {
		if syncWanted(l) || now.Sub(s.last[i]) >= testInterval {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			st, err := hybridsim.SyncAt(ctx, l, now)
			cancel()
			switch {
			case err != nil:
				require.ErrorIs(s.t, err, hybrid.ErrUnavailable, "SyncAt: a round fails only for want of Redis")
				s.syncErrs++
			case st.Synced > 0:
				s.synced[i] = now
			}
			s.last[i] = now
		}
		for k, key := range s.keys {
			for range s.perStep {
				d, _ := l.Allow(context.Background(), s.rules[i], key)
				if d.Allowed() {
					s.admitted[[3]int64{int64(i), int64(k), windowStart(s.clk, s.w)}]++
				} else {
					s.refused[d.Reason()]++
				}
			}
		}
	}
	s.clk.Add(10 * time.Millisecond)
}

// perWindow sums the admissions of key k over the nodes, by window.
func (s *stepper) perWindow(k int) map[int64]int64 {
	out := map[int64]int64{}
	for x, n := range s.admitted {
		if x[1] == int64(k) {
			out[x[2]] += n
		}
	}
	return out
}

// TestRestart: Redis restarted empty mid-window. The nodes find out at
// their next exchange, report their use again (nothing admitted is lost)
// and take new leases. docs/accuracy.md bounds the excess at one window's
// worth, once per loss; every other window stays within the limit.
func TestRestart(t *testing.T) {
	srv := redistest.Start(t)
	prefix := redistest.Prefix(t)
	ks := syncer.Keyspace{Prefix: prefix}
	check := redistest.Client(t, srv.Addr)
	const L = 1000
	W := time.Second
	clk := clocktest.New(epoch2030)
	var nodes []*hybrid.Limiter
	var rules []*hybrid.Rule
	for _, id := range []string{"a", "b"} {
		l := newNode(t, nodeConfig(redistest.Client(t, srv.Addr), prefix, clk, id, 2))
		nodes = append(nodes, l)
		// FailClosed: what is admitted is admitted on leases.
		rules = append(rules, mustRegister(t, l, hybrid.Rule{Name: "r", Limit: fixed(L, W), Policy: hybrid.FailClosed}, hybrid.Hybrid))
	}
	s := newStepper(t, clk, nodes, rules, []string{"k"}, W, 15) // 3 × L
	restartAt := epoch2030.Add(3*W + 450*time.Millisecond)
	restartW := windowStart(clk, W) + 3*W.Microseconds()
	var before [2]int64
	restarted, checked := false, false
	for clk.Now().Before(epoch2030.Add(8 * W)) {
		if !restarted && !clk.Now().Before(restartAt) {
			for i := range nodes {
				before[i] = s.admitted[[3]int64{int64(i), 0, restartW}]
			}
			srv.Restart()
			restarted = true
		}
		s.step()
		if restarted && !checked && s.synced[0].After(restartAt) && s.synced[1].After(restartAt) {
			// Both nodes have exchanged with the new Redis: their use
			// before the restart is there again.
			checked = true
			st := readWindow(t, check, ks, "r", "k", W, restartW)
			t.Logf("after both nodes' first exchange since the restart (%v later): Redis u %v, R %d; used before the restart a %d, b %d",
				clk.Now().Sub(restartAt), st.u, st.R, before[0], before[1])
			assert.True(t, st.ok, "Redis holds the window of the restart")
			assert.GreaterOrEqual(t, st.u["a"], before[0], "node a's use before the restart reported again: Redis u %v, nodes used %v", st.u, before)
			assert.GreaterOrEqual(t, st.u["b"], before[1], "node b's use before the restart reported again: Redis u %v, nodes used %v", st.u, before)
		}
	}
	require.True(t, checked, "the nodes never exchanged with Redis after the restart")
	per := s.perWindow(0)
	for x := windowStart(clk, W) - 7*W.Microseconds(); x < windowStart(clk, W); x += W.Microseconds() {
		n := per[x]
		bound := int64(L)
		if x == restartW {
			bound = 2 * L // docs/accuracy.md: one window's worth, once per loss
		}
		t.Logf("window %d: admitted %d (bound %d)%s", (x-epoch2030.UnixMicro())/W.Microseconds(), n, bound, map[bool]string{true: " <- restart"}[x == restartW])
		assert.LessOrEqual(t, n, bound, "window %d: admitted at most the bound", (x-epoch2030.UnixMicro())/W.Microseconds())
		assert.GreaterOrEqual(t, n, int64(L/2), "window %d: admitted at least half of %d at 3× the limit", (x-epoch2030.UnixMicro())/W.Microseconds(), L)
	}
	t.Logf("rounds failed on the restart: %d; refusals %v", s.syncErrs, s.refused)
}

// dupPipelines runs every pipeline twice, as a client retrying after a
// lost reply would: the node sees the second run's replies.
type dupPipelines struct{}

func (dupPipelines) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (dupPipelines) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (dupPipelines) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if err := next(ctx, cmds); err != nil {
			return err
		}
		return next(ctx, cmds)
	}
}

// TestRetriedSync: reports and targets are absolute, so a sync applied
// twice changes nothing: a round run again at the same time, or every
// exchange executed twice by Redis, leaves the same state and the same
// decisions.
func TestRetriedSync(t *testing.T) {
	const L = 1000
	W := time.Second
	// run drives two nodes over 4 windows at 3× the limit, and returns
	// their admissions per window and Redis's state of the last windows.
	run := func(t *testing.T, dup bool) (map[[3]int64]int64, map[int64]winState) {
		prefix := redistest.Prefix(t)
		clk := clocktest.New(epoch2030.Add(300 * time.Millisecond))
		var nodes []*hybrid.Limiter
		var rules []*hybrid.Rule
		for _, id := range []string{"a", "b"} {
			c := redistest.Client(t, redistest.Addr(t))
			if dup {
				c.AddHook(dupPipelines{})
			}
			// The two runs must see the same rounds: no round may time out
			// on a loaded machine, which would change one run alone.
			cfg := nodeConfig(c, prefix, clk, id, 2)
			cfg.Timeout, cfg.Sync.Timeout = 10*time.Second, 10*time.Second
			l := newNode(t, cfg)
			nodes = append(nodes, l)
			rules = append(rules, mustRegister(t, l, hybrid.Rule{Name: "r", Limit: fixed(L, W)}, hybrid.Hybrid))
		}
		s := newStepper(t, clk, nodes, rules, []string{"k"}, W, 15)
		for clk.Now().Before(epoch2030.Add(4 * W)) {
			s.step()
		}
		for _, l := range nodes {
			require.NoError(t, l.Shutdown(context.Background()), "Shutdown")
		}
		states := map[int64]winState{}
		check := redistest.Client(t, redistest.Addr(t))
		for x := windowStart(clk, W) - W.Microseconds(); x <= windowStart(clk, W)+W.Microseconds(); x += W.Microseconds() {
			states[x] = readWindow(t, check, syncer.Keyspace{Prefix: prefix}, "r", "k", W, x)
		}
		return s.admitted, states
	}
	t.Run("same round twice", func(t *testing.T) {
		ctx := context.Background()
		client := redistest.Client(t, redistest.Addr(t))
		prefix := redistest.Prefix(t)
		ks := syncer.Keyspace{Prefix: prefix}
		clk := clocktest.New(epoch2030.Add(300 * time.Millisecond))
		a := newNode(t, nodeConfig(client, prefix, clk, "a", 2))
		r := mustRegister(t, a, hybrid.Rule{Name: "r", Limit: fixed(L, W)}, hybrid.Hybrid)
		for step := range 30 {
			for range 10 {
				a.Allow(ctx, r, "k")
			}
			first, err := hybridsim.SyncAt(ctx, a, clk.Now())
			require.NoError(t, err, "SyncAt")
			before := snapshot(t, client, ks, "r", "k")
			again, err := hybridsim.SyncAt(ctx, a, clk.Now())
			require.NoError(t, err, "SyncAt again")
			require.Equal(t, before, snapshot(t, client, ks, "r", "k"), "step %d: the round run again at the same time changes nothing in Redis", step)
			if first.Synced > 0 {
				assert.Zero(t, again.Synced, "step %d: keys the same round exchanged again, after %d the first time", step, first.Synced)
			}
			clk.Add(10 * time.Millisecond)
		}
	})
	t.Run("every exchange executed twice", func(t *testing.T) {
		admitted, states := run(t, false)
		dupAdmitted, dupStates := run(t, true)
		assert.Equal(t, admitted, dupAdmitted, "admissions when every exchange runs twice (actual) and once (expected)")
		assert.Equal(t, states, dupStates, "Redis state when every exchange runs twice (actual) and once (expected)")
		var total int64
		for _, n := range admitted {
			total += n
		}
		assert.GreaterOrEqual(t, total, int64(3*L), "admitted over 4 windows at 3× the limit %d", L)
	})
}

// TestSetLimit: a hybrid rule's limit changed at runtime, on every node.
// Leases are revoked at each node's next exchange, consumption is kept (same
// window length), and the new limit holds from that exchange on; until it,
// a node may use what it held under the old limit (the transient, logged).
func TestSetLimit(t *testing.T) {
	ctx := context.Background()
	client := redistest.Client(t, redistest.Addr(t))
	prefix := redistest.Prefix(t)
	ks := syncer.Keyspace{Prefix: prefix}
	W := time.Second
	clk := clocktest.New(epoch2030.Add(100 * time.Millisecond))
	wid := windowStart(clk, W)
	var nodes []*hybrid.Limiter
	var rules []*hybrid.Rule
	for _, id := range []string{"a", "b"} {
		l := newNode(t, nodeConfig(client, prefix, clk, id, 2))
		nodes = append(nodes, l)
		rules = append(rules, mustRegister(t, l, hybrid.Rule{Name: "r", Limit: fixed(1000, W)}, hybrid.Hybrid))
	}
	// Each node uses 200 of 1,000.
	var used [2]int64
	for range 20 {
		for i, l := range nodes {
			for range 10 {
				if d, _ := l.Allow(ctx, rules[i], "k"); d.Allowed() {
					used[i]++
				}
			}
			syncOK(t, l, clk)
		}
		clk.Add(10 * time.Millisecond)
	}
	pre := readWindow(t, client, ks, "r", "k", W, wid)
	t.Logf("before: used %v, Redis g %v u %v R %d", used, pre.g, pre.u, pre.R)
	require.Equal(t, [2]int64{200, 200}, used, "used by each node")
	// The new limit, below what is used.
	const L2 = 300
	for i, l := range nodes {
		require.NoError(t, l.SetLimit(rules[i], fixed(L2, W)), "SetLimit")
	}
	for i, l := range nodes {
		d, _ := l.AllowN(ctx, rules[i], "k", 0)
		assert.EqualValues(t, L2, d.Capacity(), "Decision.Capacity() after SetLimit(%d)", L2)
	}
	// Each node's next round revokes its lease: Redis keeps the use and
	// takes back the grants beyond it.
	clk.Add(10 * time.Millisecond)
	for _, l := range nodes {
		syncOK(t, l, clk)
	}
	st := readWindow(t, client, ks, "r", "k", W, wid)
	t.Logf("after each node's next round: Redis g %v u %v R %d", st.g, st.u, st.R)
	for i, id := range []string{"a", "b"} {
		assert.LessOrEqual(t, st.g[id], st.u[id], "bug: node %s: after SetLimit and a round, Redis still grants it beyond its use: the lease was not revoked", id)
		assert.GreaterOrEqual(t, st.u[id], used[i], "node %s: after SetLimit and a round, Redis keeps what it used", id)
	}
	// The nodes go on at 3× the new limit: what they admit in this window
	// beyond the use before the change is the transient; from the next
	// window on the new limit holds.
	s := newStepper(t, clk, nodes, rules, []string{"k"}, W, 5)
	for clk.Now().Before(time.UnixMicro(wid).Add(W + 50*time.Millisecond)) {
		s.step() // the window of the change, and the first rounds of the next
	}
	st = readWindow(t, client, ks, "r", "k", W, wid)
	for clk.Now().Before(time.UnixMicro(wid).Add(4 * W)) {
		s.step()
	}
	per := s.perWindow(0)
	transient := per[wid]
	t.Logf("window of the change: %d admitted after it (%d before, old limit 1000, new %d); Redis u %v R %d", transient, used[0]+used[1], L2, st.u, st.R)
	assert.LessOrEqual(t, used[0]+used[1]+transient, int64(1000), "the window of the change admits no more than even the old limit")
	assert.GreaterOrEqual(t, st.sumU(), used[0]+used[1]+transient, "Redis holds the use of the window of the change that the nodes admitted: no consumption lost")
	for x := wid + W.Microseconds(); x < wid+4*W.Microseconds(); x += W.Microseconds() {
		t.Logf("window +%d: admitted %d under the limit %d", (x-wid)/W.Microseconds(), per[x], L2)
		assert.LessOrEqual(t, per[x], int64(L2), "window +%d: admitted at most the limit", (x-wid)/W.Microseconds())
		assert.GreaterOrEqual(t, per[x], int64(L2/2), "window +%d: admitted at least half the limit at 3× it", (x-wid)/W.Microseconds())
	}
	// Raised again: the new room is used, and no more.
	const L3 = 2000
	for i, l := range nodes {
		require.NoError(t, l.SetLimit(rules[i], fixed(L3, W)), "SetLimit")
	}
	s = newStepper(t, clk, nodes, rules, []string{"k"}, W, 30)
	w4 := windowStart(clk, W) + W.Microseconds()
	for clk.Now().Before(time.UnixMicro(w4).Add(2 * W)) {
		s.step()
	}
	per = s.perWindow(0)
	for _, x := range []int64{w4, w4 + W.Microseconds()} {
		t.Logf("raised: admitted %d under the limit %d", per[x], L3)
		assert.LessOrEqual(t, per[x], int64(L3), "after raising the limit to %d: admitted at most it", L3)
		assert.Greater(t, per[x], int64(L2), "after raising the limit to %d: admitted more than the old limit %d", L3, L2)
	}
	// A limit that cannot be leased is refused; the old one stays.
	logLimit := local.Limit{Algorithm: local.SlidingWindowLog, Quota: 1000, Window: W}
	assert.ErrorIs(t, nodes[0].SetLimit(rules[0], logLimit), hybrid.ErrInvalidRule, "SetLimit to a sliding log on a hybrid rule")
	d, _ := nodes[0].AllowN(ctx, rules[0], "k2", 0)
	assert.EqualValues(t, L3, d.Capacity(), "limit after a refused SetLimit")
}

// TestQuietBucketKey: a bucket key far below its limit, whose requests on
// each node come further apart than a share lasts (2 a second per node,
// shares of 500ms), is admitted every time: a node without a share admits
// on the allowance, as debt against the pool, which it reports at its next
// round; it is not refused for want of a lease.
func TestQuietBucketKey(t *testing.T) {
	ctx := context.Background()
	c := redistest.Client(t, redistest.Addr(t))
	prefix := redistest.Prefix(t)
	clk := clocktest.New(epoch2030)
	const N = 8
	lim := local.Limit{Algorithm: local.GCRA, Quota: 1000, Window: time.Second}
	nodes := make([]*hybrid.Limiter, N)
	rules := make([]*hybrid.Rule, N)
	for i := range nodes {
		nodes[i] = newNode(t, nodeConfig(c, prefix, clk, fmt.Sprint("n", i), N))
		rules[i] = mustRegister(t, nodes[i], hybrid.Rule{Name: "q", Limit: lim}, hybrid.Hybrid)
	}
	refused := map[local.Reason]int{}
	admitted := 0
	// 4 seconds in steps of 10ms: node i asks at its own phase, every
	// 500ms; every node runs a round every 100ms.
	for step := range 400 {
		for i := range nodes {
			if step%50 == i*6 {
				d, err := nodes[i].Allow(ctx, rules[i], "k")
				require.NoError(t, err)
				if d.Allowed() {
					admitted++
				} else {
					refused[d.Reason()]++
				}
			}
			if step%10 == i%10 {
				syncOK(t, nodes[i], clk)
			}
		}
		clk.Add(10 * time.Millisecond)
	}
	assert.Equal(t, 8*N, admitted, "admitted, of all requests: a quiet key must not be refused")
	assert.Empty(t, refused, "refusals by reason: a quiet key must not be refused")
}

// TestQuietNodeAfterShare: a small bucket limit (100 per 10 s, burst 10)
// whose key a busy node held a share of. Node b, quiet, sees the key about
// once a second and admits on the allowance, against the pool; its replies
// come while a holds its share. Shares leave the pool a floor, refilled
// while a holds the rest, so b's view of the pool refills too, and b is
// never refused: the key stays far under its limit. (Were a's share the
// whole rate and burst, b's last reply would show an empty pool that never
// refills, and b would refuse until its next exchange.)
func TestQuietNodeAfterShare(t *testing.T) {
	ctx := context.Background()
	c := redistest.Client(t, redistest.Addr(t))
	prefix := redistest.Prefix(t)
	clk := clocktest.New(epoch2030)
	lim := local.Limit{Algorithm: local.GCRA, Quota: 100, Window: 10 * time.Second, Burst: 10}
	a := newNode(t, nodeConfig(c, prefix, clk, "a", 2))
	b := newNode(t, nodeConfig(c, prefix, clk, "b", 2))
	ra := mustRegister(t, a, hybrid.Rule{Name: "q", Limit: lim}, hybrid.Hybrid)
	rb := mustRegister(t, b, hybrid.Rule{Name: "q", Limit: lim}, hybrid.Hybrid)
	refused := map[string]int{}
	// 6 seconds in steps of 10ms: a asks every 150ms for its first
	// second, b every 1.1 s; both run a round every 100ms.
	for step := range 600 {
		if step < 100 && step%15 == 0 {
			d, err := a.Allow(ctx, ra, "k")
			require.NoError(t, err)
			if !d.Allowed() {
				refused["a"]++
			}
		}
		if step%110 == 50 {
			d, err := b.Allow(ctx, rb, "k")
			require.NoError(t, err)
			if !d.Allowed() {
				refused[fmt.Sprintf("b at %v", time.Duration(step)*10*time.Millisecond)]++
			}
		}
		if step%10 == 0 {
			syncOK(t, a, clk)
		}
		if step%10 == 5 {
			syncOK(t, b, clk)
		}
		clk.Add(10 * time.Millisecond)
	}
	assert.Empty(t, refused, "a key far under its limit must not be refused")
}

// TestReleaseReturnsTokens: a node that goes idle hands the tokens of its
// bucket share back to the pool, where another node finds them: a key's
// burst is not lost in the buckets of nodes that stopped using it. Node b
// admits what an exact bucket, fed the same requests, admits, to within
// the allowance.
func TestReleaseReturnsTokens(t *testing.T) {
	ctx := context.Background()
	c := redistest.Client(t, redistest.Addr(t))
	prefix := redistest.Prefix(t)
	clk := clocktest.New(epoch2030)
	lim := local.Limit{Algorithm: local.TokenBucket, Quota: 200, Window: time.Second, Burst: 4000}
	exact, err := local.New(lim, local.Config{NoBackgroundSweep: true})
	require.NoError(t, err)
	defer exact.Close()
	a := newNode(t, nodeConfig(c, prefix, clk, "a", 2))
	b := newNode(t, nodeConfig(c, prefix, clk, "b", 2))
	ra := mustRegister(t, a, hybrid.Rule{Name: "t", Limit: lim}, hybrid.Hybrid)
	rb := mustRegister(t, b, hybrid.Rule{Name: "t", Limit: lim}, hybrid.Hybrid)
	count := func(l *hybrid.Limiter, r *hybrid.Rule, max int) {
		for range max {
			if d, _ := l.Allow(ctx, r, "k"); d.Allowed() {
				exact.AllowNAt(clk.Now(), "k", 1) // what a admitted, the exact bucket counts
			}
		}
	}
	// Node a, busy for 200ms, takes a share; then it goes idle for a second
	// and releases it; b is idle meanwhile.
	for range 20 {
		count(a, ra, 20)
		syncOK(t, a, clk)
		syncOK(t, b, clk)
		clk.Add(10 * time.Millisecond)
	}
	for range 10 {
		clk.Add(100 * time.Millisecond)
		syncOK(t, a, clk)
		syncOK(t, b, clk)
	}
	// Node b now asks for far more than is left, in rounds; the exact
	// bucket is asked the same.
	got, want := 0, 0
	for range 50 {
		for range 1000 {
			if d, _ := b.Allow(ctx, rb, "k"); d.Allowed() {
				got++
			}
			if exact.AllowNAt(clk.Now(), "k", 1).Allowed() {
				want++
			}
		}
		syncOK(t, b, clk)
		clk.Add(10 * time.Millisecond)
	}
	assert.InEpsilon(t, want, got, 0.05, "node b's admissions after node a went idle, against the exact bucket's: the tokens a held are not lost")
	t.Logf("node b admitted %d, the exact bucket %d", got, want)
}

// TestNewKeyUsesLearnedOffset: Redis's clock sets the windows. A node whose
// clock is off by an hour and half a window must decide a new key's first
// requests, before that key's own first reply, in Redis's window: with the
// clock offset the syncer measured on earlier replies, not the node clock's
// window (which would end half a window apart).
func TestNewKeyUsesLearnedOffset(t *testing.T) {
	client := redistest.Client(t, redistest.Addr(t))
	prefix := redistest.Prefix(t)
	const w = time.Second
	skew := -(time.Hour + w/2)
	clk := clocktest.New(time.Now().Add(skew))
	cfg := nodeConfig(client, prefix, clk, "n0", 1)
	cfg = hybridsim.Config(cfg, true, false) // the scripts read Redis's clock, the real one
	l := newNode(t, cfg)
	r := mustRegister(t, l, hybrid.Rule{Name: "offset", Limit: fixed(1000, w)}, hybrid.Hybrid)
	ctx := context.Background()

	// A first key, synced: the syncer measures the offset.
	d, _ := l.Allow(ctx, r, "first")
	require.True(t, d.Allowed(), "first key's first request: %+v", d)
	syncOK(t, l, clk)
	syncOK(t, l, clk)

	// A new key, not yet synced: its window is Redis's.
	clk.Set(time.Now().Add(skew))
	d, err := l.Allow(ctx, r, "second")
	require.NoError(t, err, "new key's first request")
	require.True(t, d.Allowed(), "new key's first request: %+v", d)
	// Redis runs on this machine's clock: the window ends where the real
	// clock's does. Compare on the circle of one window, as the real time
	// moved on since the decision.
	want := w - time.Duration(time.Now().UnixMicro()%w.Microseconds())*time.Microsecond
	diff := (d.ResetAfter() - want) % w
	if diff < 0 {
		diff += w
	}
	if diff > w/2 {
		diff = w - diff
	}
	assert.LessOrEqual(t, diff, 50*time.Millisecond, "new key's ResetAfter %v, the real window ends in %v: want the window of Redis's clock (the node clock's is %v apart)",
		d.ResetAfter(), want, w/2)
}

// TestNewKeyFirstGrants: a new key bursts on every node at once, and each
// node's first exchange comes before it could measure the key's demand. No
// node may take more than a part of an even claim then, whatever it asked
// for, and none may be told the window is exhausted: the nodes that ask
// last get as much as the first. Their next exchange, with demand measured,
// brings each its claim, L ÷ N.
func TestNewKeyFirstGrants(t *testing.T) {
	const (
		nodes = 4
		limit = 1000
		w     = time.Second
	)
	c := newKeyCluster(t, "burst", "new", nodes, fixed(limit, w))
	client, ks, clk, ls, allow := c.client, c.ks, c.clk, c.ls, c.allow
	// Each node admits 20 requests (its cold-start allowance is
	// ε·L/N = 13, the rest refused) and asks, at the same instant.
	for i := range ls {
		allow(i, 20)
		syncOK(t, ls[i], clk)
	}
	part := int64((limit/nodes + 3) / 4) // a quarter of the even claim
	st := readWindow(t, client, ks, "burst", "new", w, windowStart(clk, w))
	for i := range ls {
		assert.Equal(t, part, st.g[fmt.Sprintf("n%d", i)], "first exchanges: n%d granted a quarter of L/N; all grants %v", i, st.g)
	}
	// MinGap later, each node has measured the same demand: each is
	// granted the same, more than its guess. At that demand (4,000 a
	// second on each node against 1,000 a window) the budget would not last
	// the window, so the grants are paced: each covers a few MinGaps of its
	// node's demand, less than the even claim L/N.
	clk.Add(testInterval / 10)
	for i := range ls {
		assert.NotZero(t, allow(i, 40), "n%d admits after its first grant", i)
		syncOK(t, ls[i], clk)
	}
	st = readWindow(t, client, ks, "burst", "new", w, windowStart(clk, w))
	for i := range ls {
		g := st.g[fmt.Sprintf("n%d", i)]
		assert.Equal(t, st.g["n0"], g, "second exchanges: n%d granted n0's grant; all grants %v", i, st.g)
		assert.Greater(t, g, part, "second exchanges: n%d granted above the guess; all grants %v", i, st.g)
		assert.Less(t, g, int64(limit/nodes), "second exchanges: n%d granted below L/N, paced; all grants %v", i, st.g)
	}
	assert.LessOrEqual(t, st.R, int64(limit), "R, the budget committed, within the limit")
}

// TestFamilyAndModeSwitch: one rule name and key run in turn as a central
// GCRA, a hybrid GCRA, a central fixed window and a central GCRA again, as
// redeploys that change a rule's algorithm or mode would. Each finds under
// the key's name the state the one before left, of another type or another
// family, and starts afresh without an error.
func TestFamilyAndModeSwitch(t *testing.T) {
	client := redistest.Client(t, redistest.Addr(t))
	prefix := redistest.Prefix(t)
	clk := clocktest.New(epoch2030.Add(time.Second / 3))
	ctx := context.Background()
	gcra := local.Limit{Algorithm: local.GCRA, Quota: 1000, Window: time.Second}
	for i, st := range []struct {
		lim  hybrid.Limit
		mode hybrid.Mode
	}{
		{gcra, hybrid.Central}, {gcra, hybrid.Hybrid}, {fixed(1000, time.Second), hybrid.Central}, {gcra, hybrid.Central},
	} {
		l := newNode(t, nodeConfig(client, prefix, clk, fmt.Sprintf("n%d", i), 1))
		r := mustRegister(t, l, hybrid.Rule{Name: "switch", Limit: st.lim, Mode: st.mode}, st.mode)
		var d local.Decision
		for range 3 {
			var err error
			d, err = l.Allow(ctx, r, "k")
			require.NoError(t, err, "step %d (%v, %v)", i, st.lim, st.mode)
			require.True(t, d.Allowed(), "step %d (%v, %v): %+v", i, st.lim, st.mode, d)
			if st.mode == hybrid.Hybrid {
				syncOK(t, l, clk)
			}
		}
		if st.mode == hybrid.Central {
			assert.Equal(t, d.Capacity()-3, d.Remaining(), "step %d (%v, %v): remaining after 3 admissions: the state starts afresh", i, st.lim, st.mode)
		}
		l.Close()
		clk.Add(time.Millisecond)
	}
}

// TestSkewedNewKey: a new key busy on one node and seen now and then on
// the others. Its first exchanges go in first-lease rounds, not in the
// ordinary early rounds, which wait MinGap; the busy node, granted a
// quarter of an even part on a guess, is corrected upwards but holds no
// more than an even part unused, and is not told the window is exhausted
// while the others' demands are unknown; once they have measured theirs,
// a MinGap later, it is granted the budget they do not need. Before, it
// was held to an even part until the others' next regular round.
func TestSkewedNewKey(t *testing.T) {
	const (
		nodes = 4
		limit = 1000
		w     = time.Second
	)
	minGap := testInterval / 10
	c := newKeyCluster(t, "skew", "k", nodes, fixed(limit, w))
	client, ks, clk, ls, allow := c.client, c.ks, c.clk, c.ls, c.allow
	ctx := context.Background()
	first := func(i int) {
		t.Helper()
		require.True(t, hybridsim.SyncFirstWanted(ls[i]), "n%d: a first-lease round asked for", i)
		_, err := hybridsim.SyncFirstAt(ctx, ls[i], clk.Now())
		require.NoError(t, err, "n%d: SyncFirstAt", i)
	}
	for i := range ls {
		hybridsim.SyncAt(ctx, ls[i], clk.Now()) // registered: a round in the past
	}
	clk.Add(time.Millisecond)
	for i := range ls {
		allow(i, 1)
		assert.False(t, hybridsim.SyncWanted(ls[i]), "n%d: a new key asked for an ordinary early round", i)
		first(i)
	}
	guess := int64((limit/nodes + 3) / 4)
	require.Equal(t, guess, readWindow(t, client, ks, "skew", "k", w, windowStart(clk, w)).g["n0"], "first grant: a quarter of L/N")
	// n0 is busy: 200 requests in 2ms use half its guess and more; it asks
	// for the correction in a first-lease round.
	clk.Add(2 * time.Millisecond)
	allow(0, 200)
	first(0)
	st := readWindow(t, client, ks, "skew", "k", w, windowStart(clk, w))
	// Over the limit at these demands, the grant is paced: n0 holds
	// unused no more than an even part while the others' are unknown.
	require.Greater(t, st.g["n0"], guess, "corrected grant: above the guess (grants %v)", st.g)
	require.LessOrEqual(t, st.g["n0"]-st.u["n0"], int64(limit/nodes),
		"corrected grant %d (used %d): at most L/N unused while the others' demands are unknown (grants %v)", st.g["n0"], st.u["n0"], st.g)
	// A MinGap after their first exchanges, the quiet nodes see the key
	// again and measure their demand: two requests in 10ms.
	clk.Add(minGap)
	for i := 1; i < nodes; i++ {
		allow(i, 2)
		first(i)
	}
	// n0, refused for want of a lease meanwhile (not told the window is
	// exhausted), asks again at its next round.
	require.Less(t, allow(0, 500), 500, "n0 admitted all of 500 on a grant of %d", st.g["n0"])
	syncOK(t, ls[0], clk)
	st = readWindow(t, client, ks, "skew", "k", w, windowStart(clk, w))
	t.Logf("grants %v, R %d", st.g, st.R)
	assert.GreaterOrEqual(t, st.g["n0"], int64(limit*3/4), "busy node's grant once the others measured a demand of 200/s each: at least 3/4 of %d", limit)
	assert.LessOrEqual(t, st.R, int64(limit), "R, the budget committed, within the limit")
}

// TestFirstLeaseRoundLoop: with the sync loop running, a new key's first
// lease comes in a first-lease round, FirstGap after the last one, where
// the ordinary early rounds wait MinGap after the last round (here 5s: a
// second new key would wait that long for its lease). The rule waits for
// its leases (WaitFirst), within a context shorter than MinGap.
func TestFirstLeaseRoundLoop(t *testing.T) {
	client := redistest.Client(t, redistest.Addr(t))
	l := newNode(t, hybrid.Config{
		Redis: client, Keyspace: syncer.Keyspace{Prefix: redistest.Prefix(t)}, Logger: quiet,
		Sync: hybrid.SyncConfig{Interval: 10 * time.Second, MinGap: 5 * time.Second, FirstGap: time.Millisecond,
			NoColdStart: true, Nodes: 1},
	})
	r := mustRegister(t, l, hybrid.Rule{Name: "first", Limit: fixed(1000, time.Minute), Wait: hybrid.WaitFirst}, hybrid.Hybrid)
	leased := func(key string, within time.Duration) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), within)
		defer cancel()
		d, err := l.Allow(ctx, r, key)
		require.NoError(t, err)
		assert.True(t, d.Allowed(), "%s: %+v", key, d)
	}
	leased("a", 2*time.Second)
	leased("b", 2*time.Second) // would take 5s (MinGap) in an ordinary early round
}

// keyCluster is nodes hybrid limiters on one fake clock, each with the rule
// name (limit lim), and allow(i, n), which offers n requests for key on
// node i and returns how many it admitted.
type keyCluster struct {
	client redis.UniversalClient
	ks     syncer.Keyspace
	clk    *clocktest.Clock
	ls     []*hybrid.Limiter
	allow  func(i, n int) int
}

func newKeyCluster(t *testing.T, name, key string, nodes int, lim hybrid.Limit) keyCluster {
	t.Helper()
	c := keyCluster{client: redistest.Client(t, redistest.Addr(t)), ks: syncer.Keyspace{Prefix: redistest.Prefix(t)},
		clk: clocktest.New(epoch2030.Add(lim.Window / 3)), ls: make([]*hybrid.Limiter, nodes)}
	rs := make([]*hybrid.Rule, nodes)
	for i := range c.ls {
		c.ls[i] = newNode(t, nodeConfig(c.client, c.ks.Prefix, c.clk, fmt.Sprintf("n%d", i), nodes))
		rs[i] = mustRegister(t, c.ls[i], hybrid.Rule{Name: name, Limit: lim}, hybrid.Hybrid)
	}
	c.allow = func(i, n int) (admitted int) {
		t.Helper()
		for range n {
			d, err := c.ls[i].Allow(context.Background(), rs[i], key)
			require.NoError(t, err)
			if d.Allowed() {
				admitted++
			}
		}
		return admitted
	}
	return c
}

// TestPacedGrants: a fixed window's grants are paced when the budget will
// not last the window at the demands the nodes report. Over the limit a
// node holds a few PaceGaps of its demand (three), not its part of the
// budget, so that the nodes run out together, as an exact limiter's
// budget does, rather than each after its own first arrivals; it asks for
// more in the first-lease rounds once what it holds lasts less than two
// PaceGaps, and not sooner; the next window's grant ahead is paced the same
// way. Under the
// limit a node is granted ahead what lasts it a Horizon, as before, and
// waits for the ordinary rounds.
func TestPacedGrants(t *testing.T) {
	const (
		nodes = 4
		limit = 10000
		w     = time.Second
	)
	minGap := testInterval / 10
	paceGap := minGap / 5 // the default
	for _, tc := range []struct {
		name  string
		per   int  // requests per node per PaceGap
		paced bool // the budget does not last the window at that demand
	}{
		{"over", 60, true},  // 30,000 a second on each node
		{"under", 2, false}, // 1,000 a second on each node
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newKeyCluster(t, "paced", "k", nodes, fixed(limit, w))
			demand := int64(tc.per) * int64(w/paceGap) // per window
			pace := demand * 3 * paceGap.Microseconds() / w.Microseconds()
			check := func(what string, wid int64) {
				t.Helper()
				st := readWindow(t, c.client, c.ks, "paced", "k", w, wid)
				assert.LessOrEqual(t, st.R, int64(limit), "%s: R, the budget committed, within the limit", what)
				for i := range nodes {
					id := fmt.Sprintf("n%d", i)
					held := st.g[id] - st.u[id]
					if tc.paced {
						assert.Positive(t, held, "%s: %s holds unused (granted %d, used %d): want 1 to %d, three PaceGaps of its demand",
							what, id, st.g[id], st.u[id], pace+1)
						assert.LessOrEqual(t, held, pace+1, "%s: %s holds unused (granted %d, used %d): want 1 to %d, three PaceGaps of its demand",
							what, id, st.g[id], st.u[id], pace+1)
					} else {
						assert.GreaterOrEqual(t, held, demand*testInterval.Microseconds()*2/w.Microseconds(),
							"%s: %s holds unused (granted %d, used %d): want at least a Horizon of its demand", what, id, st.g[id], st.u[id])
					}
				}
			}
			for i := range nodes { // first exchanges: demands unknown
				c.allow(i, 1)
				syncOK(t, c.ls[i], c.clk)
			}
			c.clk.Add(minGap)
			for i := range nodes { // the second ones measure them
				c.allow(i, tc.per*int(minGap/paceGap))
				syncOK(t, c.ls[i], c.clk)
			}
			// paceRound: PaceGap on, each node's requests, and the first-lease
			// round that a paced key running low asks for.
			paceRound := func() {
				c.clk.Add(paceGap)
				for i := range nodes {
					c.allow(i, tc.per)
					if hybridsim.SyncFirstWanted(c.ls[i]) {
						_, err := hybridsim.SyncFirstAt(context.Background(), c.ls[i], c.clk.Now())
						require.NoError(t, err, "SyncFirstAt")
					}
				}
			}
			for range 5 { // until the grant made on the guess is used down to the paced level
				paceRound()
			}
			check("measured", windowStart(c.clk, w))
			// A paced key asks for a first-lease round once what it holds
			// lasts less than two PaceGaps, not before; any other waits for
			// the ordinary rounds.
			hybridsim.SyncFirstWanted(c.ls[0])
			for _, step := range []struct {
				use  int64
				want bool
			}{{1, false}, {pace / 2, tc.paced}} {
				c.allow(0, int(step.use))
				assert.Equal(t, step.want, hybridsim.SyncFirstWanted(c.ls[0]), "%d requests on: a first-lease round asked for", step.use)
			}
			if !tc.paced {
				return
			}
			// The window runs out; within its last Horizon the nodes, still
			// asked, are granted the next window ahead, paced.
			end := windowStart(c.clk, w) + w.Microseconds()
			for n := 1; c.clk.Micros() < end-testInterval.Microseconds(); n++ {
				paceRound()
				if n%int(minGap/paceGap) == 0 { // and the ordinary rounds
					for i := range nodes {
						syncOK(t, c.ls[i], c.clk)
					}
				}
			}
			st := readWindow(t, c.client, c.ks, "paced", "k", w, windowStart(c.clk, w))
			assert.EqualValues(t, limit, st.R, "the window's budget committed, all of it")
			check("next window, granted ahead", end)
		})
	}
}

// TestMinGapClockLag: the loop spaces its early rounds MinGap apart on its
// timers, while a key's gap since its last sync is read from the Limiter's
// clock, a coarse clock that may lag them by a millisecond. A key that asked
// for an early sync is due at the next round, whose clock may read a little
// under MinGap after its last sync, not two rounds on; but not at half a
// MinGap.
func TestMinGapClockLag(t *testing.T) {
	c := newKeyCluster(t, "lag", "k", 1, fixed(10000, time.Second))
	minGap := testInterval / 10
	c.allow(0, 1)
	syncOK(t, c.ls[0], c.clk)
	for _, step := range []struct {
		after time.Duration
		want  int
	}{
		{minGap, 1},                                // measures the demand
		{minGap / 2, 0},                            // too soon
		{minGap/2 - minGap/20, 1},                  // 9.5ms after the last: the clock lagged
		{minGap - minGap/20, 1},                    // again
		{minGap - minGap/20 + time.Millisecond, 1}, // 10.5ms: the lag the other way
	} {
		c.clk.Add(step.after)
		c.allow(0, 300) // 30,000 a second: the lease runs low at once
		assert.Equal(t, step.want, syncOK(t, c.ls[0], c.clk).Synced, "%v on: keys synced", step.after)
	}
}

// TestWaitFirstContext: a rule that waits for its leases, with no round
// to bring one (hybridsim.Manual), refuses once the request's context ends, with
// ReasonNoLease and figures that agree; a rule that does not wait admits
// the key's first request at once, within the cold-start allowance, and
// refuses past it with ReasonLimited.
func TestWaitFirstContext(t *testing.T) {
	client := redistest.Client(t, redistest.Addr(t))
	clk := clocktest.New(epoch2030.Add(100 * time.Millisecond))
	l := newNode(t, nodeConfig(client, redistest.Prefix(t), clk, "a", 4))
	wait := mustRegister(t, l, hybrid.Rule{Name: "login", Limit: fixed(20, time.Minute), Wait: hybrid.WaitFirst}, hybrid.Hybrid)
	now := mustRegister(t, l, hybrid.Rule{Name: "api", Limit: fixed(20, time.Minute)}, hybrid.Hybrid)

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	d, err := l.Allow(ctx, wait, "k")
	require.NoError(t, err)
	assert.False(t, d.Allowed())
	assert.Equal(t, local.ReasonNoLease, d.Reason())
	assert.Equal(t, int64(0), d.Remaining(), "a refusal for want of a lease has nothing remaining")
	assert.Equal(t, int64(20), d.Capacity())

	d, err = l.Allow(context.Background(), now, "k")
	require.NoError(t, err)
	assert.True(t, d.Allowed(), "the first request is decided at once: %+v", d)
	d, err = l.Allow(context.Background(), now, "k")
	require.NoError(t, err)
	assert.False(t, d.Allowed(), "past the allowance (1), before the lease")
	assert.Equal(t, local.ReasonLimited, d.Reason())
	assert.Equal(t, int64(0), d.Remaining())
	assert.Positive(t, d.RetryAfter())
	assert.LessOrEqual(t, d.RetryAfter(), time.Second, "retry after about one round trip")
}
