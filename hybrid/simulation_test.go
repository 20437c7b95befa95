package hybrid_test

import (
	"container/heap"
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/hybrid"
	"github.com/hybridlimit/hybridlimit/internal/clocktest"
	"github.com/hybridlimit/hybridlimit/internal/config"
	"github.com/hybridlimit/hybridlimit/internal/hybridsim"
	"github.com/hybridlimit/hybridlimit/internal/localx"
	"github.com/hybridlimit/hybridlimit/internal/redistest"
	"github.com/hybridlimit/hybridlimit/local"
	"github.com/hybridlimit/hybridlimit/syncer"
)

// The deterministic simulation of the hybrid mode: N limiters in one
// process, on one virtual clock, against a real redis-server that takes
// every script's time from the clock (hybridsim.Virtual). An event queue drives
// each node's requests (Poisson arrivals, precomputed from a seeded RNG),
// its regular sync rounds (every Interval, phase-shifted per node), its
// early rounds and its first-lease rounds (as the Syncer's loop runs them:
// when a key asks, at once or MinGap after the node's last round, and at
// once or FirstGap after its last first-lease round; a regular round serves
// an early one that waits). Every decision is recorded with
// the window it counted in, and compared with an exact replay of the same
// arrivals through one local limiter: admitted per window must stay within
// the bounds docs/accuracy.md derives, and false rejections (refused here,
// admitted by the exact replay) within the budget.

// skipRace skips a simulation under the race detector: it is one
// goroutine's event loop, which -race slows threefold and checks for
// nothing; make test runs it without -race, beside the -race pass.
func skipRace(t *testing.T) {
	t.Helper()
	if raceEnabled {
		t.Skip("the simulation runs without -race (make test runs it so)")
	}
}

// simTimeout bounds each exchange with Redis in wall-clock time.
const simTimeout = time.Minute

type event struct {
	at   int64
	kind int // request, regular, early or first-lease sync
	node int
	key  int // a request's key; an early sync's generation (earlyGen)
	seq  int // tie-break: arrival order
}

const (
	evRequest = iota
	evSync
	evEarly
	evFirst
)

type events []event

func (e events) Len() int { return len(e) }
func (e events) Less(i, j int) bool {
	if e[i].at != e[j].at {
		return e[i].at < e[j].at
	}
	return e[i].seq < e[j].seq
}
func (e events) Swap(i, j int) { e[i], e[j] = e[j], e[i] }
func (e *events) Push(x any)   { *e = append(*e, x.(event)) }
func (e *events) Pop() any {
	old := *e
	x := old[len(old)-1]
	*e = old[:len(old)-1]
	return x
}

// workload describes a run: how many requests each node offers, for which
// keys.
type workload struct {
	name    string
	offered float64   // total offered, as a multiple of the limit
	weights []float64 // share of the traffic per node (nil: even)
	keys    int       // distinct keys, drawn by Zipf (1: one key)
	coldAt  float64   // > 0: the one key appears only at this many windows in, on all nodes at once
	churn   bool      // a new key every window, from 0.3 W into it for one W, on all nodes at once
	// users > 0: that many keys, each with its own Poisson rate (offered
	// is ignored), each request sent to a uniformly random node, as a
	// round-robin load balancer does: a fraction abusers of the keys at
	// 10 × the limit, the others log-uniform between 1% and 10% of it.
	users   int
	abusers float64
}

type simResult struct {
	windows     int
	worstOver   float64 // max over windows of admitted / limit − 1, per key
	falseRejPct float64 // false rejections as % of what the exact replay admitted
	lostPct     float64 // capacity lost: per key and window, what the exact replay admitted beyond hybrid, as % of its total
	admitted    int64
	exact       int64
	scripts     int64                  // lease scripts run
	falseBy     map[local.Reason]int64 // false rejections by reason
	requests    int64
	coldMax     int64 // users: the most admitted for one key in its first, partial window
}

func simulate(t *testing.T, lim hybrid.Limit, nodes int, w workload, windows int, seed uint64) simResult {
	t.Helper()
	client := redistest.Client(t, redistest.Addr(t))
	prefix := redistest.Prefix(t)
	W := lim.Window.Microseconds()
	start := (time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC).UnixMicro()/W)*W + W/3 // mid-window start
	// The virtual clock all nodes share.
	clock := clocktest.New(time.UnixMicro(start))
	const interval = 100 * time.Millisecond
	ctx := context.Background()

	ls := make([]*hybrid.Limiter, nodes)
	rules := make([]*hybrid.Rule, nodes)
	for i := range ls {
		l, err := hybrid.New(hybridsim.Virtual(hybrid.Config{
			Redis: client, Keyspace: syncer.Keyspace{Prefix: prefix}, Clock: clock,
			// Deadlines are wall-clock: on a loaded machine a round may take
			// longer than an interval of virtual time, which must not count
			// as Redis failing.
			Timeout: simTimeout,
			Sync:    hybrid.SyncConfig{Interval: interval, NodeID: fmt.Sprintf("n%d", i), Nodes: nodes, Timeout: simTimeout},
		}))
		require.NoError(t, err, "New")
		t.Cleanup(func() { l.Close() })
		r, err := l.Register(hybrid.Rule{Name: "sim", Limit: lim, Mode: hybrid.Hybrid})
		require.NoError(t, err, "Register")
		require.Equal(t, hybrid.Hybrid, r.Mode, "the mode the rule runs in")
		ls[i], rules[i] = l, r
	}

	rng := rand.New(rand.NewPCG(seed, 7))
	var q events
	seq := 0
	push := func(e event) { e.seq = seq; seq++; heap.Push(&q, e) }
	end := start + int64(windows)*W
	// Poisson arrivals per node.
	rate := w.offered * float64(lim.Quota) / float64(W) // per µs, total
	var zipf *rand.Zipf
	if w.keys > 1 && !w.churn {
		zipf = rand.NewZipf(rng, 1.1, 1, uint64(w.keys-1))
	}
	under := map[int]bool{} // users: the keys offered less than the limit
	for k := range w.users {
		perW := float64(lim.Quota) * math.Exp(math.Log(0.01)+rng.Float64()*math.Log(10)) // 1% to 10% of the limit
		if k < int(w.abusers*float64(w.users)+0.5) {
			perW = 10 * float64(lim.Quota)
		} else {
			under[k] = true
		}
		for at := float64(start); ; {
			at += rng.ExpFloat64() * float64(W) / perW
			if int64(at) >= end {
				break
			}
			push(event{at: int64(at), kind: evRequest, node: rng.IntN(nodes), key: k})
		}
	}
	for n := range nodes {
		if w.users > 0 {
			for at := start + int64(n)*interval.Microseconds()/int64(nodes); at < end; at += interval.Microseconds() {
				push(event{at: at, kind: evSync, node: n})
			}
			continue
		}
		share := 1 / float64(nodes)
		if w.weights != nil {
			share = w.weights[n]
		}
		at := float64(start)
		if w.coldAt > 0 {
			at = float64(start) + w.coldAt*float64(W)
		}
		churnFrom := start - start%W + W + 3*W/10
		if w.churn {
			at = float64(churnFrom)
		}
		for {
			at += rng.ExpFloat64() / (rate * share)
			if int64(at) >= end {
				break
			}
			k := 0
			if zipf != nil {
				k = int(zipf.Uint64())
			}
			if w.churn {
				k = int((int64(at) - churnFrom) / W)
			}
			push(event{at: int64(at), kind: evRequest, node: n, key: k})
		}
		// Regular rounds, each node with its own phase.
		for at := start + int64(n)*interval.Microseconds()/int64(nodes); at < end; at += interval.Microseconds() {
			push(event{at: at, kind: evSync, node: n})
		}
	}

	// The exact replay: one limiter sees every arrival in order.
	exact, err := local.New(lim, local.Config{Clock: clocktest.Wall{}, NoBackgroundSweep: true, MaxKeys: 1 << 20})
	require.NoError(t, err)
	defer exact.Close()

	type wk struct{ window, key int64 }
	admitted, exactPer := map[wk]int64{}, map[wk]int64{}
	res := simResult{falseBy: map[local.Reason]int64{}}
	earlyQueued, firstQueued := make([]bool, nodes), make([]bool, nodes)
	earlyGen := make([]int, nodes) // an early round's event carries it in key: a regular round served it
	lastRound, lastFirst := make([]int64, nodes), make([]int64, nodes)
	minGap := (interval / 10).Microseconds()
	firstGap := minGap / 10
	lastOn, lastAny := map[[2]int]int64{}, map[int]int64{} // users: each key's last request, per node and anywhere
	var admittedTimes [][]int64 = make([][]int64, max(w.keys, w.users)+1)
	for q.Len() > 0 {
		e := heap.Pop(&q).(event)
		clock.Set(time.UnixMicro(e.at))
		switch e.kind {
		case evSync, evEarly, evFirst:
			sync := hybridsim.SyncAt
			switch {
			case e.kind == evEarly && e.key != earlyGen[e.node]:
				continue // a regular round ran since it was asked for
			case e.kind == evFirst:
				firstQueued[e.node] = false
				lastFirst[e.node] = e.at
				sync = hybridsim.SyncFirstAt
			default:
				earlyQueued[e.node] = false
				earlyGen[e.node]++
				lastRound[e.node] = e.at
			}
			st, err := sync(ctx, ls[e.node], clock.Now())
			require.NoError(t, err, "sync")
			res.scripts += int64(st.Synced)
			if st.Registered {
				res.scripts++
			}
		case evRequest:
			key := fmt.Sprintf("k%d", e.key)
			res.requests++
			d, err := ls[e.node].Allow(ctx, rules[e.node], key)
			require.NoError(t, err, "Allow")
			ex := exact.AllowNAt(clock.Now(), key, 1)
			// Steady-state figures: the first, partial window is the
			// cold start, which the cold workload measures.
			steady := e.at >= start-start%W+W
			if w.users > 0 && !under[e.key] {
				steady = false // false rejections are counted for the keys under their limit
			}
			if ex.Allowed() && steady {
				res.exact++
				exactPer[wk{e.at - e.at%W, int64(e.key)}]++
			}
			if d.Allowed() {
				res.admitted++
				admitted[wk{e.at - e.at%W, int64(e.key)}]++
				admittedTimes[e.key] = append(admittedTimes[e.key], e.at)
			} else if ex.Allowed() && steady {
				res.falseRejPct++ // counted, turned into a percentage below
				res.falseBy[d.Reason()]++
				if os.Getenv("SIMDEBUG") != "" && w.users > 0 {
					t.Logf("false rejection: key %d node %d at %d: %v; last on this node %d µs ago, last anywhere %d µs ago", e.key, e.node, e.at-start, d, e.at-lastOn[[2]int{e.key, e.node}], e.at-lastAny[e.key])
				}
				if os.Getenv("SIMDEBUG") != "" && w.users == 0 {
					t.Logf("false rejection: node %d window %d at %d µs into it: %v", e.node, (e.at-start+start%W)/W, e.at%W, d)
				}
			}
			if w.users > 0 {
				lastOn[[2]int{e.key, e.node}], lastAny[e.key] = e.at, e.at
			}
			// A key that asks for a sync wakes the node's loop, which runs
			// a round at once, or MinGap after its last one.
			if hybridsim.SyncWanted(ls[e.node]) && !earlyQueued[e.node] {
				earlyQueued[e.node] = true
				push(event{at: max(e.at, lastRound[e.node]+minGap), kind: evEarly, node: e.node, key: earlyGen[e.node]})
			}
			if hybridsim.SyncFirstWanted(ls[e.node]) && !firstQueued[e.node] {
				firstQueued[e.node] = true
				push(event{at: max(e.at, lastFirst[e.node]+firstGap), kind: evFirst, node: e.node})
			}
		}
	}
	if res.exact > 0 {
		res.falseRejPct = 100 * res.falseRejPct / float64(res.exact)
		var lost int64
		for k, n := range exactPer {
			lost += max(n-admitted[k], 0)
		}
		res.lostPct = 100 * float64(lost) / float64(res.exact)
		if os.Getenv("SIMDEBUG") != "" {
			for k, n := range exactPer {
				if n-admitted[k] > 20 {
					t.Logf("key %d window %d: exact %d hybrid %d", k.key, (k.window-start+start%W)/W, n, admitted[k])
				}
			}
		}
	}
	first := start - start%W // users: every key's first, partial window
	for k, n := range admitted {
		if k.window == first {
			res.coldMax = max(res.coldMax, n)
		}
	}
	switch alg := lim.Algorithm; {
	case w.users > 0 && (alg == local.TokenBucket || alg == local.LeakyBucket || alg == local.GCRA):
		// Per key, as the api-users benchmark measures it: the largest
		// excess over the arrival curve (burst + rate × interval) of an
		// interval ending after the key's first window, as a fraction of
		// the limit.
		for _, ts := range admittedTimes {
			for i := range ts {
				for j := i; j < len(ts) && ts[j]-ts[i] <= 2*W; j++ {
					if ts[j] < first+W {
						continue
					}
					excess := float64(j-i+1) - float64(localx.MustLimit(lim).Burst()) - float64(lim.Quota)*float64(ts[j]-ts[i])/float64(W)
					res.worstOver = math.Max(res.worstOver, excess/float64(lim.Quota))
				}
			}
		}
	case w.users > 0:
		// Per key and window after its first: admitted beyond the limit,
		// as a fraction of it.
		for k, n := range admitted {
			if k.window > first {
				res.worstOver = math.Max(res.worstOver, float64(n)/float64(lim.Quota)-1)
			}
		}
	case alg == local.TokenBucket || alg == local.LeakyBucket || alg == local.GCRA:
		// The arrival-curve excess: admitted in [t0, t1] beyond burst + rate × (t1 − t0).
		// A steady workload's key is new at its start: its cold start, which
		// the cold and churn workloads measure, is left out, as the windows'
		// first, partial window is.
		debug := os.Getenv("SIMDEBUG") != ""
		from := int64(0)
		if w.coldAt == 0 && !w.churn {
			from = start - start%W + W
		}
		for _, ts := range admittedTimes {
			for i := range ts {
				if ts[i] < from {
					continue
				}
				for j := i; j < len(ts) && ts[j]-ts[i] <= 2*W; j++ {
					excess := float64(j-i+1) - float64(localx.MustLimit(lim).Burst()) - float64(lim.Quota)*float64(ts[j]-ts[i])/float64(W)
					if debug && excess > 0 && excess/float64(localx.MustLimit(lim).Burst()) > res.worstOver {
						t.Logf("excess %.1f over [%d, %d] µs from start, %d admitted", excess, ts[i]-start, ts[j]-start, j-i+1)
					}
					res.worstOver = math.Max(res.worstOver, excess/float64(localx.MustLimit(lim).Burst()))
				}
			}
		}
	case alg == local.SlidingWindowCounter:
		// The counter's own invariant at every admission: the previous
		// window's admissions weighted by the steps of it still inside the
		// sliding window, plus this window's, at most the limit.
		step, ws := localx.MustLimit(lim).Counter()
		for _, ts := range admittedTimes {
			perWin := map[int64]int64{}
			for _, at := range ts {
				w := at - at%W
				perWin[w]++
				left := ws - (at-w)/step
				est := float64(perWin[w-W])*float64(left)/float64(ws) + float64(perWin[w])
				if w >= start-start%W+W { // skip the first, partial window
					res.worstOver = math.Max(res.worstOver, est/float64(lim.Quota)-1)
				}
			}
		}
	case alg == local.SubWindowCounter:
		// The sub-window counter's own invariant: at most the limit in any
		// K consecutive sub-windows, from the first full window on.
		step := W / localx.MustLimit(lim).SubWindows()
		for _, ts := range admittedTimes {
			perSub := map[int64]int64{}
			for _, at := range ts {
				perSub[at-at%step]++
			}
			for x := start - start%W + W; x < end; x += step {
				var n int64
				for y := x - W + step; y <= x; y += step {
					n += perSub[y]
				}
				res.worstOver = math.Max(res.worstOver, float64(n)/float64(lim.Quota)-1)
			}
		}
	default:
		for k, n := range admitted {
			if k.window < start-start%W+W { // the first, partial window
				continue
			}
			res.worstOver = math.Max(res.worstOver, float64(n)/float64(lim.Quota)-1)
		}
	}
	res.windows = windows
	if testing.Verbose() {
		perWin := map[int64]int64{}
		for k, n := range admitted {
			perWin[k.window] += n
		}
		for x := start - start%W; x < end; x += W {
			t.Logf("window %d: admitted %d", (x-start+start%W)/W, perWin[x])
		}
	}
	return res
}

func TestSimulation(t *testing.T) {
	skipRace(t)
	if testing.Short() {
		t.Skip("the simulation runs 30 windows per workload")
	}
	fixed := local.Limit{Algorithm: local.FixedWindow, Quota: 2000, Window: time.Second}
	counter := local.Limit{Algorithm: local.SlidingWindowCounter, Quota: 2000, Window: time.Second}
	gcra := local.Limit{Algorithm: local.GCRA, Quota: 2000, Window: time.Second}
	sub := local.Limit{Algorithm: local.SubWindowCounter, Quota: 2000, Window: time.Second, SubWindows: 10}
	const nodes = 8
	skew := []float64{0.8}
	for range nodes - 1 {
		skew = append(skew, 0.2/float64(nodes-1))
	}
	// The bounds are derived in docs/accuracy.md. Over-admission: none from
	// leases; the cold-start allowance adds at most ε + nodes/L. Capacity
	// lost: per window, what the exact replay admitted beyond hybrid. False
	// rejections, per request, only where they mean something: a fixed
	// window admits the first arrivals of each window, in both. Were the
	// budget split among nodes ahead, the two would differ by about
	// nodes·σ·0.4/L (2.4% here, σ = √(L·(1/N)·(1 − 1/N))); paced grants
	// leave the spread of each node's arrivals over its last grant's span,
	// 3 PaceGaps: about 0.6% here, and the bounds of 0.6-1% fail on a
	// return to the split, or to grants paced at MinGap (1.3% uniform,
	// 0.7-0.8% skewed, 1.3-1.5% cold and churn). Under the limit it admits
	// all, in both. Under overload the counter and the buckets admit a
	// tenth of the arrivals spread over the window, and no split of the
	// budget picks the same ones as the exact replay: there the count,
	// capacity lost, is the measure.
	for _, c := range []struct {
		lim       hybrid.Limit
		w         workload
		maxOver   float64 // fraction of the limit (or of the burst)
		maxLost   float64 // %
		maxFalseR float64 // % of the exact replay's admissions; < 0: not checked
	}{
		{fixed, workload{name: "uniform", offered: 10, keys: 1}, 0, 0.5, 1},
		{fixed, workload{name: "skewed", offered: 10, keys: 1, weights: skew}, 0, 0.5, 0.6},
		{fixed, workload{name: "under", offered: 0.9, keys: 1}, 0, 1, 1},
		{fixed, workload{name: "cold", offered: 10, keys: 1, coldAt: 3.3}, 0.05 + nodes/2000.0, 2, 1},
		{fixed, workload{name: "cold-skewed", offered: 10, keys: 1, coldAt: 3.3, weights: skew}, 0.05 + nodes/2000.0, 1, 0.6},
		{fixed, workload{name: "zipf", offered: 10, keys: 1000}, 0, 0.5, 0.3},
		{counter, workload{name: "cold", offered: 10, keys: 1, coldAt: 3.3}, 0.05 + nodes/2000.0, 2, -1},
		{counter, workload{name: "uniform", offered: 10, keys: 1}, 0, 1, -1},
		// The counter under its limit admits all, in both. Its room is
		// thin (a tenth of L, shared by the nodes): the bound fails when
		// grants left unused in a window weigh on the next as its count,
		// when nodes open a window without a grant, or when a node's claim
		// is its part of the whole budget rather than of what is left.
		{counter, workload{name: "under", offered: 0.9, keys: 1}, 0, 0.3, 0.3},
		{sub, workload{name: "uniform", offered: 10, keys: 1}, 0, 1, -1},
		// The sub-window counter under its limit admits all, in both. A
		// sub-window's budget is what the window's earlier ones left, a
		// tenth of L here: the bound fails when grants left unused in a
		// sub-window stay committed after it (half the arrivals refused),
		// or when a node asks for a horizon in the current sub-window and
		// another ahead in the next.
		{sub, workload{name: "under", offered: 0.9, keys: 1}, 0, 0.3, 0.3},
		{gcra, workload{name: "uniform", offered: 10, keys: 1}, 0, 1, -1},
		{gcra, workload{name: "skewed", offered: 10, keys: 1, weights: skew}, 0, 1, -1},
		{gcra, workload{name: "cold", offered: 10, keys: 1, coldAt: 3.3}, 0.05 + nodes/2000.0, 4, -1},
		{fixed, workload{name: "churn", offered: 10, keys: 31, churn: true}, 0.05 + nodes/2000.0, 1, 1},
		{gcra, workload{name: "churn", offered: 10, keys: 31, churn: true}, 0.05 + nodes/2000.0, 3, -1},
		{gcra, workload{name: "zipf", offered: 5, keys: 100000}, 0.05 + nodes/2000.0, 1, 1},
	} {
		t.Run(c.lim.Algorithm.String()+"/"+c.w.name, func(t *testing.T) {
			r := simulate(t, c.lim, nodes, c.w, 30, 1)
			t.Logf("%s %s: over-admission worst window %+.2f%%, capacity lost %.2f%%, false rejections %.2f%% of %d exact admissions (by reason %v), %d requests, %d scripts (%.4f per decision)",
				c.lim, c.w.name, 100*r.worstOver, r.lostPct, r.falseRejPct, r.exact, r.falseBy, r.requests, r.scripts, float64(r.scripts)/float64(r.requests))
			assert.LessOrEqual(t, r.worstOver, c.maxOver+1e-9, "over-admission, worst window, within its bound")
			assert.LessOrEqual(t, r.lostPct, c.maxLost, "capacity lost, in percent")
			if c.maxFalseR >= 0 {
				assert.LessOrEqual(t, r.falseRejPct, c.maxFalseR, "false rejections, in percent of the exact admissions")
			}
		})
	}
}

// TestSimulationSmallLimits: the limits people write, 100 per window per
// user (a time-scaled 100 per minute), over many keys with heavy-tailed
// rates, each request sent to a random node of 8. Every key leases: no
// decision waits on Redis. After a key's first window, over-admission per
// window (the buckets: over the arrival curve, as the api-users benchmark
// measures it) within 5% of the limit; in its first, the cold-start bound:
// the limit (and burst) plus each node's allowance, max(1, ⌈ε × limit ÷
// nodes⌉). Keys under their limit lose at most 0.1% of what an exact
// limiter admits. Bounds derived in docs/accuracy.md.
func TestSimulationSmallLimits(t *testing.T) {
	skipRace(t)
	if testing.Short() {
		t.Skip("the simulation runs 12 windows per workload")
	}
	const nodes, L, windows = 8, 100, 12
	W := 10 * time.Second
	users := workload{name: "users", users: 300, abusers: 0.01}
	for _, lim := range []hybrid.Limit{
		local.Limit{Algorithm: local.FixedWindow, Quota: L, Window: W},
		local.Limit{Algorithm: local.GCRA, Quota: L, Window: W, Burst: 10},
	} {
		t.Run(lim.Algorithm.String(), func(t *testing.T) {
			r := simulate(t, lim, nodes, users, windows, 1)
			allowance := max(int64(math.Ceil(config.Epsilon*float64(localx.MustLimit(lim).MaxCost())/nodes)), 1)
			coldBound := L + nodes*allowance
			if lim.Algorithm == local.GCRA {
				coldBound += localx.MustLimit(lim).Burst()
			}
			t.Logf("%s users: over-admission worst window %+.2f%%, first window at most %d (bound %d), false rejections %.3f%% of %d exact admissions of keys under their limit (by reason %v), %d requests, %d scripts (%.4f per decision)",
				lim, 100*r.worstOver, r.coldMax, coldBound, r.falseRejPct, r.exact, r.falseBy, r.requests, r.scripts, float64(r.scripts)/float64(r.requests))
			assert.LessOrEqual(t, r.worstOver, 0.05, "over-admission per window after a key's first")
			assert.LessOrEqual(t, r.coldMax, coldBound, "a key's first window within the cold-start bound")
			assert.LessOrEqual(t, r.falseRejPct, 0.1, "false rejections of keys under their limit, %")
			assert.Positive(t, r.exact)
		})
	}
}
