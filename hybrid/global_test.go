package hybrid_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/hybrid"
	"github.com/hybridlimit/hybridlimit/internal/netproxy"
	"github.com/hybridlimit/hybridlimit/internal/redistest"
	"github.com/hybridlimit/hybridlimit/syncer"
)

// The rules of global reach, with real processes: a redis-server per
// region and a global one, each region's link to it a proxy that adds
// latency and can be cut, the nodes Limiters in this process. Time is
// real: the exchanges run on their loops.

const (
	globalL      = 300 // per second, the global limit
	globalRate   = 100 // requests per second per node
	globalNodes  = 2   // nodes per region
	globalRegion = 3
)

// regions is a test's regions.
type regions struct {
	global *redistest.Server
	local  []*redistest.Server
	links  []*netproxy.Proxy
	nodes  [][]*hybrid.Limiter
	rules  [][]*hybrid.Rule
	prefix string
}

// startRegions starts n regions of k nodes under one global rule of limit
// lim, each link to the global store delaying delay one way.
func startRegions(t *testing.T, n, k int, lim hybrid.Limit, delay time.Duration) *regions {
	t.Helper()
	prefix := redistest.Prefix(t)
	rg := &regions{global: redistest.Start(t), prefix: prefix}
	for i := range n {
		srv := redistest.Start(t)
		p, err := netproxy.Start(rg.global.Addr, delay)
		require.NoError(t, err)
		t.Cleanup(func() { p.Close() })
		rg.local, rg.links = append(rg.local, srv), append(rg.links, p)
		var ls []*hybrid.Limiter
		var rs []*hybrid.Rule
		for j := range k {
			l := newNode(t, hybrid.Config{
				Redis: redistest.Client(t, srv.Addr), Global: redistest.Client(t, p.Addr()),
				Region: fmt.Sprintf("r%d", i), Keyspace: syncer.Keyspace{Prefix: prefix}, Logger: quiet,
				Sync: hybrid.SyncConfig{NodeID: fmt.Sprintf("r%dn%d", i, j)},
			})
			ls = append(ls, l)
			rs = append(rs, mustRegister(t, l, hybrid.Rule{Name: "g", Limit: lim, Mode: hybrid.Hybrid, Global: true}, hybrid.Hybrid))
		}
		rg.nodes, rg.rules = append(rg.nodes, ls), append(rg.rules, rs)
	}
	return rg
}

// windows counts admissions per region and window (unix seconds).
type windows struct {
	mu  sync.Mutex
	got []map[int64]int64
}

func (w *windows) add(region int, at time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.got[region][at.Unix()]++
}

// totals returns the whole windows from..to-1 (unix seconds) summed over
// the regions, and region r's.
func (w *windows) totals(from, to int64, r int) (all, one []int64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for x := from; x < to; x++ {
		var s int64
		for i := range w.got {
			s += w.got[i][x]
		}
		all, one = append(all, s), append(one, w.got[r][x])
	}
	return all, one
}

// drive offers globalRate requests per second at each node of the regions
// active returns true for, until stop is closed; it returns the tally and
// a function that waits for the drivers to end.
func (rg *regions) drive(t *testing.T, key string, active func(region int) bool, stop <-chan struct{}) (*windows, func()) {
	w := &windows{got: make([]map[int64]int64, len(rg.nodes))}
	var wg sync.WaitGroup
	for i, ls := range rg.nodes {
		w.got[i] = map[int64]int64{}
		for j, l := range ls {
			wg.Add(1)
			go func() {
				defer wg.Done()
				tick := time.NewTicker(time.Second / globalRate)
				defer tick.Stop()
				for {
					select {
					case <-stop:
						return
					case <-tick.C:
					}
					if !active(i) {
						continue
					}
					d, err := l.Allow(context.Background(), rg.rules[i][j], key)
					if assert.NoError(t, err) && d.Allowed() {
						w.add(i, time.Now())
					}
				}
			}()
		}
	}
	return w, wg.Wait
}

// nextSecond sleeps to the start of the next second and returns it.
func nextSecond() int64 {
	now := time.Now()
	next := now.Truncate(time.Second).Add(time.Second)
	time.Sleep(time.Until(next))
	return next.Unix()
}

// offer drives the regions active returns true for (drive) from the start
// of the next second, runs during, and returns the tally and that second.
func (rg *regions) offer(t *testing.T, active func(region int) bool, during func()) (*windows, int64) {
	stop := make(chan struct{})
	w, wait := rg.drive(t, "k", active, stop)
	start := nextSecond()
	during()
	close(stop)
	wait()
	return w, start
}

// assertShared checks windows whose limit L is shared, not split: each
// within 2% above (a decision's window is read after it) and 10% below.
func assertShared(t *testing.T, all []int64, L int64) {
	t.Helper()
	for i, a := range all {
		assert.LessOrEqual(t, a, L*102/100, "window %d", i)
		assert.GreaterOrEqual(t, a, L*90/100, "window %d: the limit is shared, not split", i)
	}
}

func sleep(d time.Duration) func() { return func() { time.Sleep(d) } }

// awaitRegions waits until every region's Redis holds the regions' count
// as the store has it, which its exchanger writes, and then until every
// node has read it: a node that read a smaller count (the regions that
// had registered first) reads it again a second later, at its next round.
func (rg *regions) awaitRegions(t *testing.T) {
	t.Helper()
	for _, srv := range rg.local {
		c := redistest.Client(t, srv.Addr)
		require.Eventually(t, func() bool {
			n, err := c.Get(context.Background(), "{"+rg.prefix+":nodes}:regions").Int()
			return err == nil && n == len(rg.local)
		}, 5*time.Second, 10*time.Millisecond, "the regions counted")
	}
	time.Sleep(1500 * time.Millisecond)
}

// burst sends n requests at once to l on key and returns how many were
// admitted.
func burst(t *testing.T, l *hybrid.Limiter, r *hybrid.Rule, key string, n int) int64 {
	var admitted atomic.Int64
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			d, err := l.Allow(context.Background(), r, key)
			if assert.NoError(t, err) && d.Allowed() {
				admitted.Add(1)
			}
		})
	}
	wg.Wait()
	return admitted.Load()
}

// TestGlobalNewKeyBurst: a key new to every region opens in each at
// L ÷ regions, before any region has reached the global store: a burst
// within it is admitted at once everywhere. A burst in one region alone
// gets that at once, and the rest of L as its exchanger brings it; a key
// the store knows does not open in another region: never more than L.
func TestGlobalNewKeyBurst(t *testing.T) {
	const L = 90
	rg := startRegions(t, globalRegion, globalNodes, fixed(L, 10*time.Second), 40*time.Millisecond)
	rg.awaitRegions(t)
	// All three windows of this test within one 10 s window.
	if left := 10*time.Second - time.Duration(time.Now().UnixNano()%int64(10*time.Second)); left < 4*time.Second {
		time.Sleep(left)
	}
	var got [globalRegion]atomic.Int64
	var wg sync.WaitGroup
	for i := range globalRegion {
		wg.Go(func() { got[i].Store(burst(t, rg.nodes[i][0], rg.rules[i][0], "everywhere", 20)) })
	}
	wg.Wait()
	for i := range globalRegion {
		assert.Equal(t, int64(20), got[i].Load(), "region %d: a burst of 20 on a key new everywhere (L = %d)", i, L)
	}

	first := burst(t, rg.nodes[1][0], rg.rules[1][0], "one", 50)
	assert.Equal(t, int64(L/globalRegion), first, "a burst of 50 in one region: its opening at once")
	// The openings kept for the other regions end; the region alone takes
	// all of L.
	time.Sleep(2 * time.Second)
	more := burst(t, rg.nodes[1][1], rg.rules[1][1], "one", 70)
	assert.LessOrEqual(t, first+more, int64(L), "never more than L")
	assert.GreaterOrEqual(t, more, (int64(L)-first)*9/10, "the rest of L, once its exchanger has brought it")
	// Another region learned of the key from the store: it does not open
	// it, and admits nothing past L.
	assert.Zero(t, burst(t, rg.nodes[2][0], rg.rules[2][0], "one", 20), "a key that holds all of L elsewhere does not open")
}

func TestGlobalRegionsShareOneLimit(t *testing.T) {
	rg := startRegions(t, globalRegion, globalNodes, fixed(globalL, time.Second), 20*time.Millisecond)
	w, start := rg.offer(t, func(int) bool { return true }, sleep(5*time.Second))
	// The first two windows open the key in every region.
	all, _ := w.totals(start+2, start+5, 0)
	t.Logf("admitted per window, all regions: %v (L = %d, offered %d)", all, globalL, 2*globalL)
	assertShared(t, all, globalL)
	// One node per region leads its exchanges; the others do not.
	for i, ls := range rg.nodes {
		var leaders int
		for _, l := range ls {
			if st := l.Stats(); st.GlobalRounds > 0 {
				leaders++
				assert.Equal(t, int64(1), st.GlobalKeys, "region %d: the keys its last round exchanged", i)
			}
		}
		assert.Equal(t, 1, leaders, "region %d: nodes that led its exchanges", i)
	}
}

func TestGlobalRegionAloneGetsTheLimit(t *testing.T) {
	const L = globalL / 2
	rg := startRegions(t, globalRegion, globalNodes, fixed(L, time.Second), 20*time.Millisecond)
	// Region 1 alone, offered 4/3 × L.
	w, start := rg.offer(t, func(r int) bool { return r == 1 }, sleep(5*time.Second))
	all, one := w.totals(start+2, start+5, 1)
	t.Logf("admitted per window: %v, region 1 %v", all, one)
	assert.Equal(t, all, one, "only region 1 had traffic")
	for i, a := range one {
		assert.GreaterOrEqual(t, a, int64(L*95/100), "window %d: a region alone gets the limit, not L ÷ regions", i)
		assert.LessOrEqual(t, a, int64(L*102/100), "window %d", i)
	}
}

func TestGlobalRegionCutOffHoldsItsShare(t *testing.T) {
	rg := startRegions(t, globalRegion, globalNodes, fixed(globalL, time.Second), 20*time.Millisecond)
	w, start := rg.offer(t, func(int) bool { return true }, func() {
		time.Sleep(3 * time.Second)
		rg.links[2].Cut() // region 2 loses the global store
		time.Sleep(4 * time.Second)
	})
	all, cut := w.totals(start+4, start+7, 2)
	t.Logf("admitted per window while region 2 is cut off: %v, region 2 %v", all, cut)
	for i := range all {
		assert.LessOrEqual(t, all[i], int64(globalL*105/100), "window %d: the cluster with a region cut off", i)
		assert.GreaterOrEqual(t, cut[i], int64(globalL/5), "window %d: the region cut off admits its standing share", i)
	}
	var failed int64
	for _, l := range rg.nodes[2] {
		failed += l.Stats().GlobalFailures
	}
	assert.Positive(t, failed, "region 2's exchanges failed while cut off")
}

func TestGlobalStoreKilledAndRestarted(t *testing.T) {
	rg := startRegions(t, globalRegion, globalNodes, fixed(globalL, time.Second), 20*time.Millisecond)
	w, start := rg.offer(t, func(int) bool { return true }, func() {
		time.Sleep(3 * time.Second)
		rg.global.Kill() // every region loses the store, which comes back empty
		time.Sleep(3 * time.Second)
		rg.global.Restart()
		time.Sleep(4 * time.Second)
	})
	all, _ := w.totals(start+3, start+10, 0)
	t.Logf("admitted per window, the store down from the first, back from the fourth: %v", all)
	for i, a := range all {
		assert.LessOrEqual(t, a, int64(globalL*102/100), "window %d: the standing shares never sum past L, nor what a restarted store grants", i)
	}
	assert.GreaterOrEqual(t, all[1], int64(globalL*80/100), "the store down: each region holds its standing share")
	assert.GreaterOrEqual(t, all[len(all)-1], int64(globalL*90/100), "the store back: the limit shared again")
}

// TestGlobalRegionRedisDownUsesThePolicy: a region whose Redis is down
// decides by the failure policy (FailLocal here) on its even part of the
// limit, L ÷ regions split over its nodes, not on the whole of L.
func TestGlobalRegionRedisDownUsesThePolicy(t *testing.T) {
	rg := startRegions(t, 2, 1, fixed(globalL, time.Second), 0)
	rg.awaitRegions(t)
	l, r := rg.nodes[0][0], rg.rules[0][0]
	ctx := context.Background()
	deadline := time.Now().Add(3 * time.Second)
	for time.Now().Before(deadline) {
		if d, err := l.Allow(ctx, r, "k"); err == nil && d.Allowed() && !d.Degraded() {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	rg.local[0].Kill()
	// The lease held is used to its end; then the failure policy decides.
	var degraded int
	for deadline := time.Now().Add(3 * time.Second); time.Now().Before(deadline) && degraded == 0; {
		d, err := l.Allow(ctx, r, "k")
		require.NoError(t, err, "a region's Redis down: the failure policy decides, %v", d)
		if d.Degraded() {
			degraded++
		}
		time.Sleep(5 * time.Millisecond)
	}
	require.Positive(t, degraded, "decisions made by the failure policy within the region")
	// A window the region holds no lease of: the policy's part alone.
	nextSecond()
	var admitted int
	for range 2 * globalL {
		if d, err := l.Allow(ctx, r, "k"); err == nil && d.Allowed() {
			admitted++
		}
	}
	assert.Equal(t, globalL/2, admitted, "FailLocal in one of two regions, one node: L ÷ 2")
}

// TestGlobalCluster: a region's Redis may be a Cluster, and so may the
// global store: region 0 on the 3-master Cluster, region 1 on a server of
// its own, the store on the Cluster too (its keys apart from the leases').
func TestGlobalCluster(t *testing.T) {
	cluster := redistest.ClusterAddrs(t)
	single := redistest.Start(t)
	prefix := redistest.Prefix(t)
	rg := &regions{}
	for i, c := range []redis.UniversalClient{redistest.ClusterClient(t, cluster), redistest.Client(t, single.Addr)} {
		var ls []*hybrid.Limiter
		var rs []*hybrid.Rule
		for j := range globalNodes {
			l := newNode(t, hybrid.Config{
				Redis: c, Global: redistest.ClusterClient(t, cluster), Region: fmt.Sprintf("r%d", i),
				Keyspace: syncer.Keyspace{Prefix: prefix}, Logger: quiet,
				Sync: hybrid.SyncConfig{NodeID: fmt.Sprintf("r%dn%d", i, j)},
			})
			ls = append(ls, l)
			rs = append(rs, mustRegister(t, l, hybrid.Rule{Name: "g", Limit: fixed(globalL, time.Second), Global: true}, hybrid.Hybrid))
		}
		rg.nodes, rg.rules = append(rg.nodes, ls), append(rg.rules, rs)
	}
	// 2 regions × 2 nodes × 100 per second: 4/3 × L.
	w, start := rg.offer(t, func(int) bool { return true }, sleep(5*time.Second))
	all, _ := w.totals(start+2, start+5, 0)
	t.Logf("admitted per window, both regions: %v (L = %d)", all, globalL)
	assertShared(t, all, globalL)
}
