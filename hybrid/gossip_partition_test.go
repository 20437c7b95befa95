package hybrid_test

import (
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/hybrid"
	"github.com/hybridlimit/hybridlimit/internal/clocktest"
	"github.com/hybridlimit/hybridlimit/internal/leakcheck"
	"github.com/hybridlimit/hybridlimit/internal/netsplit"
	"github.com/hybridlimit/hybridlimit/internal/redistest"
)

// liveSet holds the members memberlist holds alive or suspected, from its
// events: what a node's gossip sees of a partition.
type liveSet struct {
	mu    sync.Mutex
	names map[string]bool
}

func (c *liveSet) NotifyJoin(m *memberlist.Node)  { c.set(m.Name, true) }
func (c *liveSet) NotifyLeave(m *memberlist.Node) { c.set(m.Name, false) }
func (c *liveSet) NotifyUpdate(*memberlist.Node)  {}

func (c *liveSet) set(name string, live bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.names == nil {
		c.names = map[string]bool{}
	}
	if live {
		c.names[name] = true
	} else {
		delete(c.names, name)
	}
}

// count returns how many members it holds.
func (c *liveSet) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.names)
}

// Phases of a partition test, as every node sees them.
const (
	phaseWhole   = "whole"   // no split, every node sees every member
	phaseSuspect = "suspect" // split, no node has declared a member dead yet
	phaseDead    = "dead"    // split, every node sees only its own side
	phaseHealed  = "healed"  // healed, every node sees every member again
	phaseMixed   = "mixed"   // in between
)

// TestGossipPartition: four Limiters under the Gossip policy, one fixed
// window key, 5 × L offered spread evenly, Redis killed, then the gossip
// split 2|2 (and, in a second cluster, 3|1) for longer than memberlist
// takes to declare the far side dead, then healed. Every window, summed
// over the four nodes, stays within the limit: while far members are
// suspected their demand and claims still count, and once memberlist
// declares them dead they still count in the split, at the live members'
// mean demand, since none of them left. So each side admits about its
// members ÷ 4 of the limit, where it would admit the whole of it if the
// dead were dropped (2 × L and 2 × L in all for 2|2 and 3|1).
func TestGossipPartition(t *testing.T) {
	if testing.Short() {
		t.Skip("real time")
	}
	for _, c := range []struct {
		name string
		side []int // the nodes cut off from the others
	}{
		{"2|2", []int{2, 3}},
		{"3|1", []int{3}},
	} {
		t.Run(c.name, func(t *testing.T) { gossipPartition(t, c.side) })
	}
}

func gossipPartition(t *testing.T, far []int) {
	leakcheck.Check(t)
	srv := redistest.Start(t)
	prefix := redistest.Prefix(t)
	const L, W = 200, 500 * time.Millisecond
	const offered = 5 * L * int64(time.Second/W) // per second, in all
	clk := clocktest.New(epoch2030)
	names := []string{"a", "b", "c", "d"}
	nw := netsplit.New()
	var nodes []*hybrid.Limiter
	var rules []*hybrid.Rule
	var addrs []string
	lives := make([]*liveSet, len(names))
	for i, name := range names {
		opt := redistest.Options(srv.Addr)
		opt.DialerRetries = 1 // a killed Redis refused at once, round after round
		client := redis.NewClient(opt)
		t.Cleanup(func() { client.Close() })
		cfg := nodeConfig(client, prefix, clk, name, 0)
		var seeds []string
		if i > 0 {
			seeds = addrs[:1]
		}
		cfg.Gossip = gossipConfig(name, seeds...)
		// Suspicion of 0.8–1.6s: a whole window passes after the split
		// before any node declares a member dead.
		ml := cfg.Gossip.Memberlist
		ml.ProbeInterval, ml.ProbeTimeout = 200*time.Millisecond, 100*time.Millisecond
		ml.SuspicionMult, ml.SuspicionMaxTimeoutMult = 4, 2
		tr, err := nw.Transport()
		require.NoError(t, err)
		lives[i] = &liveSet{}
		ml.Transport, ml.Events = tr, lives[i]
		cfg.Gossip.RejoinInterval = 300 * time.Millisecond
		l := newNode(t, cfg)
		nodes, addrs = append(nodes, l), append(addrs, tr.Addr())
		rules = append(rules, mustRegister(t, l, hybrid.Rule{Name: "r", Limit: fixed(L, W)}, hybrid.Hybrid))
	}
	seeAll := func() bool {
		for _, lc := range lives {
			if lc.count() != len(names) {
				return false
			}
		}
		return true
	}
	require.Eventually(t, seeAll, 5*time.Second, 10*time.Millisecond, "every node sees every member")
	isFar := make([]bool, len(names))
	var near, cut []string
	for _, i := range far {
		isFar[i] = true
	}
	for i, a := range addrs {
		if isFar[i] {
			cut = append(cut, a)
		} else {
			near = append(near, a)
		}
	}
	seeOwnSide := func() bool {
		for i, lc := range lives {
			want := len(names) - len(far)
			if isFar[i] {
				want = len(far)
			}
			if lc.count() != want {
				return false
			}
		}
		return true
	}
	anyDead := func() bool {
		for _, lc := range lives {
			if lc.count() < len(names) {
				return true
			}
		}
		return false
	}

	// The Limiters' clock follows real time, as the gossip does.
	start := time.Now()
	var split, healed atomic.Bool
	phase := func() string {
		switch {
		case !split.Load() && !healed.Load() && seeAll():
			return phaseWhole
		case split.Load() && !anyDead():
			return phaseSuspect
		case split.Load() && seeOwnSide():
			return phaseDead
		case healed.Load() && seeAll():
			return phaseHealed
		}
		return phaseMixed
	}
	type window struct {
		id       int64
		phase    string
		admitted [4]int64
		asked    [4]int64
		split    [4]int        // the members each node's split assumed, at the window's end
		stall    time.Duration // the longest step in it
	}
	var windows []*window
	last := time.Now()
	var owed float64
	var slowest, slowSync, syncTotal time.Duration
	var syncs int
	var synced time.Time
	tick := func() time.Time {
		now := time.Now()
		clk.Set(epoch2030.Add(now.Sub(start)))
		return now
	}
	step := func() {
		now := tick()
		// At most 100ms's worth at once: a step the loaded machine stalled
		// does not turn into a burst that throws the demands off.
		perNode := float64(offered) / float64(len(nodes))
		owed = min(owed+perNode*now.Sub(last).Seconds(), perNode/10)
		last = now
		wid := windowStart(clk, W)
		if len(windows) == 0 || windows[len(windows)-1].id != wid {
			windows = append(windows, &window{id: wid, phase: phase()})
		}
		w := windows[len(windows)-1]
		if p := phase(); p != w.phase {
			w.phase = phaseMixed
		}
		for i, l := range nodes {
			w.split[i] = l.Stats().GossipMembers
		}
		for ; owed >= 1; owed-- {
			for i, l := range nodes {
				var tl tally
				w.asked[i]++
				if tl.allow(t, l, rules[i]) {
					w.admitted[i]++
				}
			}
		}
		// Rounds every 40ms (each reports the key's figures to the gossip,
		// which queues records every 20ms): more would only load the machine.
		if t1 := time.Now(); t1.Sub(synced) >= 40*time.Millisecond {
			for _, l := range nodes {
				trySync(l, clk)
			}
			synced = t1
			slowSync = max(slowSync, time.Since(t1))
			syncTotal += time.Since(t1)
			syncs++
		}
		time.Sleep(5 * time.Millisecond)
		if d := time.Since(now); d > slowest {
			slowest = d
		}
		w.stall = max(w.stall, time.Since(now))
	}
	until := func(cond func() bool, limit time.Duration, what string) {
		t.Helper()
		end := time.Now().Add(limit)
		for !cond() {
			require.True(t, time.Now().Before(end), "within %v: %s", limit, what)
			step()
		}
	}
	windowsOf := func(n int) func() bool {
		tick()
		w0 := windowStart(clk, W)
		return func() bool { return windowStart(clk, W) >= w0+int64(n)*W.Microseconds() }
	}
	// Redis up for a window, then killed: two windows on the gossip alone.
	until(windowsOf(2), 5*time.Second, "two windows with Redis")
	srv.Kill()
	for i, l := range nodes {
		markUnavailable(t, l, rules[i], clk)
	}
	first := len(windows)
	until(windowsOf(3), 5*time.Second, "two windows whole")
	// Split at a window's start.
	split.Store(true)
	nw.Split(near, cut)
	until(seeOwnSide, 10*time.Second, "every node declares the far side dead")
	until(windowsOf(4), 5*time.Second, "three windows with the far side dead")
	split.Store(false)
	healed.Store(true)
	nw.Heal()
	until(seeAll, 10*time.Second, "every node sees every member again")
	until(windowsOf(4), 5*time.Second, "three windows healed")

	type mean struct {
		near, far           float64
		nearAsked, farAsked float64
		n                   int
	}
	means := map[string]*mean{}
	var b strings.Builder
	for _, w := range windows[first : len(windows)-1] { // the last is not over
		var near, far, nearAsked, farAsked int64
		for i, a := range w.admitted {
			if isFar[i] {
				far, farAsked = far+a, farAsked+w.asked[i]
			} else {
				near, nearAsked = near+a, nearAsked+w.asked[i]
			}
		}
		fmt.Fprintf(&b, "\n  window %2d %-7s split %v admitted %v = %3d (%.2f × L; near side %.2f × L, far side %.2f × L), longest step %v",
			(w.id-windows[first].id)/W.Microseconds(), w.phase, w.split, w.admitted, near+far,
			float64(near+far)/L, float64(near)/L, float64(far)/L, w.stall.Round(time.Millisecond))
		m := means[w.phase]
		if m == nil {
			m = &mean{}
			means[w.phase] = m
		}
		m.near += float64(near) / L
		m.far += float64(far) / L
		m.nearAsked += float64(nearAsked) / L
		m.farAsked += float64(farAsked) / L
		m.n++
	}
	t.Logf("L = %d per %v, %d offered per second; slowest step %v, sync %v (mean %v over %d rounds); per window, node by node:%s",
		L, W, offered, slowest, slowSync, syncTotal/time.Duration(syncs), syncs, b.String())
	for _, p := range []string{phaseWhole, phaseSuspect, phaseDead, phaseHealed} {
		if m := means[p]; m != nil {
			near, far := m.near/float64(m.n), m.far/float64(m.n)
			t.Logf("%-7s %d windows: %.2f × L a window (near side %.2f, far side %.2f)", p, m.n, near+far, near, far)
		}
	}
	m := means[phaseDead]
	require.NotNil(t, m, "a window with the far side dead")
	// Each side keeps about its members' part of the limit (the split
	// counts the far side's members at the side's mean demand), where it
	// would take the whole limit were the dead dropped. The margins are
	// for a loaded machine, whose stalls throw the demands off.
	nearPart, farPart := float64(len(names)-len(far))/float64(len(names)), float64(len(far))/float64(len(names))
	nearMean, farMean := m.near/float64(m.n), m.far/float64(m.n)
	if na, fa := m.nearAsked/float64(m.n), m.farAsked/float64(m.n); na < nearPart+0.4 || fa < farPart+0.4 {
		// A side asked for little more than its part tells nothing.
		t.Skipf("the machine is too loaded to offer enough: the sides asked for %.2f and %.2f × L a window", na, fa)
	}
	assert.LessOrEqual(t, nearMean, nearPart+0.25, "the near side keeps about its part, %.2f × L", nearPart)
	assert.LessOrEqual(t, farMean, farPart+0.25, "the far side keeps about its part, %.2f × L", farPart)
	assert.LessOrEqual(t, nearMean+farMean, 1.3, "the cluster keeps about L with the far side dead")
}
