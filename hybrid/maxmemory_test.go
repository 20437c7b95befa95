package hybrid_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
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

// The Limiter against a Redis at its maxmemory: under noeviction its writes
// fail (OOM) and the failure policies decide; under an eviction policy Redis
// drops live limiter state, which the nodes see as a new epoch (a loss, as
// after a flush). Nodes on a virtual clock in steps of 10ms against a
// private redis-server started with the maxmemory flags; another client
// (another tenant of the same Redis) fills its memory with plain SETs.

// memLoad is the traffic of a maxmemory test: per node and step (10ms),
// hot requests for key "hot" and one for each calm key; flood new keys on
// node 0, each seen once.
type memLoad struct {
	hot   int
	calm  []string
	flood int
}

// memRun drives nodes on a virtual clock in steps of 10ms, as stepper does,
// counting per rule and window what the hot key admitted, and every
// refusal of a key under its limit (calm and flood keys), by reason.
type memRun struct {
	t       *testing.T
	clk     *clocktest.Clock
	nodes   []*hybrid.Limiter
	rules   [][]*hybrid.Rule // per node, per rule
	w       time.Duration
	load    memLoad
	last    []time.Time
	floodN  int
	hot     []map[int64]int64 // per rule: window → admitted
	degr    []map[int64]int64 // per rule: window → decisions Degraded (any key)
	refused []map[local.Reason]int64
	refWin  []map[int64]int64 // per rule: window → refusals of keys under their limit
	errs    int               // decisions that returned an error
	logged  int               // refusals logged, the first few
	syncErr int               // rounds that failed
}

func newMemRun(t *testing.T, clk *clocktest.Clock, nodes []*hybrid.Limiter, rules [][]*hybrid.Rule, w time.Duration, load memLoad) *memRun {
	r := &memRun{t: t, clk: clk, nodes: nodes, rules: rules, w: w, load: load, last: make([]time.Time, len(nodes))}
	for i := range nodes {
		r.last[i] = clk.Now().Add(-testInterval + time.Duration(i)*testInterval/time.Duration(len(nodes)))
	}
	for range rules[0] {
		r.hot = append(r.hot, map[int64]int64{})
		r.degr = append(r.degr, map[int64]int64{})
		r.refused = append(r.refused, map[local.Reason]int64{})
		r.refWin = append(r.refWin, map[int64]int64{})
	}
	return r
}

// window returns the id of the window holding the clock's time.
func (r *memRun) window() int64 {
	return r.clk.Now().Sub(epoch2030).Microseconds() / r.w.Microseconds()
}

func (r *memRun) step() {
	r.t.Helper()
	now, win := r.clk.Now(), r.window()
	for i, l := range r.nodes {
		if syncWanted(l) || now.Sub(r.last[i]) >= testInterval {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			_, err := hybridsim.SyncAt(ctx, l, now)
			cancel()
			if err != nil {
				require.ErrorIs(r.t, err, hybrid.ErrUnavailable, "SyncAt: a round fails only for want of Redis")
				r.syncErr++
			}
			r.last[i] = now
		}
		for j, rule := range r.rules[i] {
			allow := func(key string, under bool) {
				d, err := l.Allow(context.Background(), rule, key)
				if err != nil {
					r.errs++
					r.t.Errorf("rule %s key %s: Allow returned %v (%+v)", rule.Name, key, err, d)
					return
				}
				if d.Degraded() {
					r.degr[j][win]++
				}
				switch {
				case !under && d.Allowed():
					r.hot[j][win]++
				case under && !d.Allowed():
					r.refused[j][d.Reason()]++
					r.refWin[j][win]++
					if r.logged < 5 && rule.Name != "closed" { // FailClosed's keys wait for their first lease

						r.logged++
						r.t.Logf("window %d +%v node %d rule %s key %s refused: %+v", win, now.Sub(epoch2030)%r.w, i, rule.Name, key, d)
					}
				}
			}
			for range r.load.hot {
				allow("hot", false)
			}
			for _, k := range r.load.calm {
				allow(k, true)
			}
			if i == 0 {
				for f := range r.load.flood {
					allow(fmt.Sprintf("flood-%d", r.floodN+f), true)
				}
			}
		}
	}
	r.floodN += r.load.flood
	r.clk.Add(10 * time.Millisecond)
}

// tenant is another application writing to the same Redis: plain SETs of
// 64 KB values without a TTL (ttl 0) or with one.
type tenant struct {
	c   *redis.Client
	n   int
	ttl time.Duration
	oom int // SETs refused for want of memory
}

var tenantValue = strings.Repeat("x", 64<<10)

// write SETs n values; OOM answers are counted, other errors fail t.
func (tn *tenant) write(t *testing.T, n int) {
	t.Helper()
	for range n {
		err := tn.c.Set(context.Background(), fmt.Sprintf("tenant:%d", tn.n), tenantValue, tn.ttl).Err()
		tn.n++
		if err != nil && strings.HasPrefix(err.Error(), "OOM") {
			tn.oom++
			continue
		}
		require.NoError(t, err, "tenant SET")
	}
}

// fill SETs values until Redis refuses one for want of memory.
func (tn *tenant) fill(t *testing.T) {
	t.Helper()
	for start := tn.oom; tn.oom == start; {
		tn.write(t, 1)
		require.Less(t, tn.n, 100000, "Redis never refused a write: is maxmemory set?")
	}
}

// TestMaxmemoryNoeviction: Redis full under noeviction refuses the
// scripts' writes (OOM), which the Limiter takes for Redis out of reach:
// each rule decides by its failure policy and no decision returns an
// error; once memory is raised again, decisions are Redis's, no window
// holds more than the limit and keys under their limits are admitted.
func TestMaxmemoryNoeviction(t *testing.T) {
	ctx := context.Background()
	srv := redistest.Start(t, "--maxmemory", "8mb", "--maxmemory-policy", "noeviction")
	prefix := redistest.Prefix(t)
	const L = 1000
	W := time.Second
	clk := clocktest.New(epoch2030)
	nodes, rules := policyNodes(t, srv.Addr, prefix, clk, fixed(L, W))
	tn := &tenant{c: redistest.Client(t, srv.Addr)}
	run := newMemRun(t, clk, nodes, rules, W, memLoad{hot: 10, calm: []string{"calm-1", "calm-2"}, flood: 1}) // 2 × L; 0.1 × L
	// Full from 2.3 s: the tenant fills Redis, then maxmemory goes below
	// what it holds, so that no write passes (the limiter's keys expiring
	// would otherwise make room for some); raised again at 5.3 s.
	const full, freed, end = 2, 5, 8
	var filled, raised bool
	for run.window() < end {
		switch at := clk.Now().Sub(epoch2030); {
		case !filled && at >= full*W+300*time.Millisecond:
			tn.fill(t)
			require.NoError(t, tn.c.ConfigSet(ctx, "maxmemory", "2mb").Err())
			filled = true
		case !raised && at >= freed*W+300*time.Millisecond:
			require.NoError(t, tn.c.ConfigSet(ctx, "maxmemory", "0").Err())
			raised = true
		}
		run.step()
	}
	run.logPolicies(end, L)
	assert.Zero(t, run.errs, "no decision returns an error")
	assert.NotZero(t, run.syncErr, "rounds failed while Redis was full")
	open, closed, flocal := 0, 1, 2
	for w := int64(0); w < end; w++ {
		if w != full && w != freed { // the outage's windows and the others
			assert.Zero(t, run.refWin[open][w], "FailOpen, window %d: no key under its limit refused", w)
			assert.Zero(t, run.refWin[flocal][w], "FailLocal, window %d: no key under its limit refused", w)
		}
		if w > full && w < freed { // every write refused: the policies decide
			assert.Equal(t, int64(2*L), run.hot[open][w], "FailOpen, window %d: everything admitted", w)
			assert.LessOrEqual(t, run.hot[flocal][w], int64(L), "FailLocal, window %d: L/2 per node", w)
			assert.GreaterOrEqual(t, run.hot[flocal][w], int64(L*9/10), "FailLocal, window %d: L/2 per node", w)
		}
		if w > full+1 && w < freed { // the leases held ran out
			assert.Zero(t, run.hot[closed][w], "FailClosed, window %d: nothing admitted", w)
		}
		if w < full || w >= freed {
			for j, p := range policyRules {
				if j != open || w > freed {
					// FailOpen's admissions before memory was raised count
					// in the window it was raised in.
					assert.LessOrEqual(t, run.hot[j][w], int64(L), "%s, window %d: at most the limit", p.name, w)
				}
				if w > freed {
					assert.GreaterOrEqual(t, run.hot[j][w], int64(L*9/10), "%s, window %d: about the limit", p.name, w)
				}
			}
		}
	}
	// FailClosed's keys wait for their first lease (WaitFirst), which the
	// test's rounds bring later: each flood key is refused for want of it.
	assert.Equal(t, run.refused[closed][local.ReasonNoLease]+run.refused[closed][local.ReasonUnavailable], sum(run.refused[closed]),
		"FailClosed refuses keys under their limits only while Redis is full, or for their first lease")
}

// TestMaxmemoryAtTheLimit: Redis at its maxmemory under noeviction, memory
// hovering about the limit, takes some writes and refuses others (OOM):
// here, before each step, maxmemory is set 2 KB above what Redis holds, so
// each round's first writes pass and the rest are refused. The rounds it
// answers keep the breaker closed; a key whose exchange Redis refused goes
// to its failure policy: a FailOpen or FailLocal key under its limit is
// admitted, never refused for want of a lease Redis could not write.
func TestMaxmemoryAtTheLimit(t *testing.T) {
	ctx := context.Background()
	srv := redistest.Start(t, "--maxmemory-policy", "noeviction")
	prefix := redistest.Prefix(t)
	const L = 1000
	W := time.Second
	clk := clocktest.New(epoch2030)
	nodes, rules := policyNodes(t, srv.Addr, prefix, clk, fixed(L, W))
	admin := redistest.Client(t, srv.Addr)
	run := newMemRun(t, clk, nodes, rules, W, memLoad{hot: 10, calm: []string{"calm-1", "calm-2"}, flood: 1}) // 2 × L; 0.1 × L
	const from, end = 1, 4
	for run.window() < end {
		if run.window() >= from {
			require.NoError(t, admin.ConfigSet(ctx, "maxmemory", strconv.FormatInt(usedMemory(t, admin)+2048, 10)).Err())
		}
		run.step()
	}
	run.logPolicies(end, L)
	require.NotZero(t, run.syncErr, "rounds failed while Redis was full")
	assert.Zero(t, run.errs, "no decision returns an error")
	open, closed, flocal := 0, 1, 2
	assert.Zero(t, sum(run.refused[open]), "bug: FailOpen refused keys under their limits while Redis refused some writes (OOM)")
	assert.Zero(t, sum(run.refused[flocal]), "bug: FailLocal refused keys at a tenth of their even split while Redis refused some writes (OOM)")
	assert.Equal(t, run.refused[closed][local.ReasonNoLease]+run.refused[closed][local.ReasonUnavailable], sum(run.refused[closed]),
		"FailClosed refuses keys under their limits only for Redis, or for their first lease")
	for w := int64(0); w < end; w++ {
		assert.LessOrEqual(t, run.hot[closed][w], int64(L), "FailClosed, window %d: what Redis granted, at most the limit", w)
		// docs/accuracy.md, item 5: node i admits up to max(g_i, L/N),
		// counting its lease's use; at most 2L.
		assert.LessOrEqual(t, run.hot[flocal][w], int64(2*L), "FailLocal, window %d", w)
	}
}

// policyNodes returns nodes a and b (two in all) on one Redis, each with a
// rule of lim per failure policy (policyRules, in that order).
func policyNodes(t *testing.T, addr, prefix string, clk *clocktest.Clock, lim hybrid.Limit) ([]*hybrid.Limiter, [][]*hybrid.Rule) {
	t.Helper()
	var nodes []*hybrid.Limiter
	var rules [][]*hybrid.Rule
	for _, id := range []string{"a", "b"} {
		l := newNode(t, nodeConfig(redistest.Client(t, addr), prefix, clk, id, 2))
		nodes = append(nodes, l)
		var rs []*hybrid.Rule
		for _, p := range policyRules {
			rs = append(rs, mustRegister(t, l, hybrid.Rule{Name: p.name, Limit: lim, Policy: p.policy}, hybrid.Hybrid))
		}
		rules = append(rules, rs)
	}
	return nodes, rules
}

// logPolicies logs, per policy rule and window up to end, what the hot
// key admitted (in units of the limit l), the decisions Degraded and the
// refusals of keys under their limits.
func (r *memRun) logPolicies(end, l int64) {
	r.t.Helper()
	for j, p := range policyRules {
		for w := int64(0); w < end; w++ {
			r.t.Logf("%-6s window %2d: hot admitted %4d (%.2f × L), degraded %4d, refusals under the limit %3d", p.name, w, r.hot[j][w], float64(r.hot[j][w])/float64(l), r.degr[j][w], r.refWin[j][w])
		}
		r.t.Logf("%-6s refusals of keys under their limits: %v", p.name, r.refused[j])
	}
	r.t.Logf("decision errors %d, failed rounds %d", r.errs, r.syncErr)
}

// usedMemory returns Redis's used_memory (INFO memory).
func usedMemory(t *testing.T, c *redis.Client) int64 {
	t.Helper()
	info, err := c.Info(context.Background(), "memory").Result()
	require.NoError(t, err)
	for _, line := range strings.Split(info, "\r\n") {
		if v, ok := strings.CutPrefix(line, "used_memory:"); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			require.NoError(t, err, "used_memory %q", v)
			return n
		}
	}
	require.FailNow(t, "no used_memory in INFO memory")
	return 0
}

// sum adds up m's values.
func sum[K comparable](m map[K]int64) int64 {
	var n int64
	for _, v := range m {
		n += v
	}
	return n
}

// evictions collects the names of the keys Redis evicts, from its keyspace
// notifications.
type evictions struct {
	ch  <-chan *redis.Message
	got map[string]int // name → evictions not yet taken
}

func watchEvictions(t *testing.T, addr string) *evictions {
	t.Helper()
	c := redistest.Client(t, addr)
	require.NoError(t, c.ConfigSet(context.Background(), "notify-keyspace-events", "Ee").Err())
	ps := c.Subscribe(context.Background(), "__keyevent@0__:evicted")
	t.Cleanup(func() { ps.Close() })
	_, err := ps.Receive(context.Background()) // the subscription's confirmation
	require.NoError(t, err)
	return &evictions{ch: ps.Channel(redis.WithChannelSize(1 << 16)), got: map[string]int{}}
}

// take returns the evictions received so far, by name.
func (e *evictions) take() map[string]int {
	for {
		select {
		case m := <-e.ch:
			e.got[m.Payload]++
			continue
		default:
		}
		out := e.got
		e.got = map[string]int{}
		return out
	}
}

// TestMaxmemoryEviction: Redis at maxmemory under an eviction policy
// evicts live limiter state while another tenant writes and a flood of new
// keys goes through the limiter. A hot key at 3 × L on three nodes admits
// at most L per window, plus one window's worth per loss of its state
// (docs/accuracy.md, Redis losing state): the nodes find the new epoch at
// their next exchange, so a loss late in a window costs the next one, whose
// grants the nodes held ahead. Keys under their limits are admitted and
// nothing fails.
func TestMaxmemoryEviction(t *testing.T) {
	for _, policy := range []string{"allkeys-lru", "allkeys-lfu", "volatile-lru", "allkeys-random"} {
		t.Run(policy, func(t *testing.T) { maxmemoryEviction(t, policy) })
	}
}

func maxmemoryEviction(t *testing.T, policy string) {
	srv := redistest.Start(t, "--maxmemory", "8mb", "--maxmemory-policy", policy)
	ev := watchEvictions(t, srv.Addr)
	prefix := redistest.Prefix(t)
	ks := syncer.Keyspace{Prefix: prefix}
	const L = 1000
	W := time.Second
	clk := clocktest.New(epoch2030)
	var nodes []*hybrid.Limiter
	var rules [][]*hybrid.Rule
	for _, id := range []string{"a", "b", "c"} {
		l := newNode(t, nodeConfig(redistest.Client(t, srv.Addr), prefix, clk, id, 3))
		nodes = append(nodes, l)
		rules = append(rules, []*hybrid.Rule{mustRegister(t, l, hybrid.Rule{Name: "r", Limit: fixed(L, W), Policy: hybrid.FailLocal}, hybrid.Hybrid)})
	}
	calm := []string{"calm-1", "calm-2", "calm-3", "calm-4"}
	run := newMemRun(t, clk, nodes, rules, W, memLoad{hot: 10, calm: calm, flood: 5}) // 3 × L; 0.3 × L
	tn := &tenant{c: redistest.Client(t, srv.Addr), ttl: time.Hour}                   // volatile-* evicts its keys too
	hot, registry := redisKeyBase(ks, "r", "hot")+"m", prefix+":nodes"
	calmKeys := map[string]bool{}
	for _, k := range calm {
		calmKeys[redisKeyBase(ks, "r", k)+"m"] = true
	}
	lost := map[int64]int64{} // window → evictions of the hot key's state
	var regLost, calmLost, limiterLost, other int
	const end = 8
	for run.window() < end {
		if run.window() >= 1 {
			tn.write(t, 2) // 128 KB per 10ms
		}
		run.step()
		for name, n := range ev.take() {
			switch {
			case name == hot:
				lost[run.window()] += int64(n)
			case name == registry:
				regLost += n
			case calmKeys[name]:
				calmLost += n
			case strings.HasPrefix(name, prefix):
				limiterLost += n
			default:
				other += n
			}
		}
	}
	var losses int64
	for w := int64(0); w < end; w++ {
		bound := L * (1 + lost[w] + lost[w-1])
		t.Logf("%s window %d: hot admitted %4d (%.2f × L), its state evicted %d× (bound %.0f × L), refusals under the limit %d, degraded %d",
			policy, w, run.hot[0][w], float64(run.hot[0][w])/L, lost[w], float64(bound)/L, run.refWin[0][w], run.degr[0][w])
		assert.LessOrEqual(t, run.hot[0][w], bound, "window %d: L, plus one window's worth per loss of the key's state in it or late in the one before", w)
		assert.GreaterOrEqual(t, run.hot[0][w], int64(L*9/10), "window %d: about the limit", w)
		losses += lost[w]
	}
	t.Logf("%s: evicted: the hot key's state %d×, the registry %d×, calm keys' state %d×, other limiter keys %d, the tenant's %d; refusals of keys under their limits %v; errors %d, failed rounds %d, tenant SETs %d (%d OOM)",
		policy, losses, regLost, calmLost, limiterLost, other, run.refused[0], run.errs, run.syncErr, tn.n, tn.oom)
	assert.Zero(t, run.errs, "no decision returns an error")
	assert.Zero(t, sum(run.refused[0]), "no key under its limit refused")
	assert.NotZero(t, limiterLost, "Redis evicted the limiter's keys")
	if policy != "allkeys-lfu" { // LFU keeps the hot key's state: it is used most
		assert.NotZero(t, losses, "Redis evicted the hot key's state")
	}
}
