package fallback

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// claimCluster returns four bare nodes, members of one another, that have
// each reported and gossiped the same traffic on key k through window w-1
// of a limit per window, and have every other's last record, at now.
func claimCluster(t *testing.T, k digest, w, limit int64, t0 time.Time, asked func(name string) int64) (map[string]*node, time.Time) {
	t.Helper()
	names := []string{"a", "b", "c", "d"}
	nodes := map[string]*node{}
	for _, name := range names {
		n := bare(t, name, nil)
		for _, m := range names {
			n.mem[m] = ""
		}
		for i := range 10 {
			n.Report(k, w-1, asked(name), min(asked(name), limit/4), limit)
			n.publish(t0.Add(time.Duration(i)*n.cfg.Interval), n.cfg.Interval.Seconds())
		}
		nodes[name] = n
	}
	now := t0.Add(10 * nodes["a"].cfg.Interval)
	for _, from := range nodes {
		for _, to := range nodes {
			for _, r := range *from.own.Load() {
				to.receive(r, now.UnixNano())
			}
		}
	}
	return nodes, now
}

// TestClaimsHeld: until a node hears of the others' counts in a window it
// may admit its share of the whole limit, and it goes on admitting it while
// the others hear of its first counts there. A node's later estimate holds
// the rest of each busy peer's share for it, so the allowances the nodes
// act on together stay within the limit; with the others idle, a busy node
// may still take what they leave.
func TestClaimsHeld(t *testing.T) {
	const limit, w = 1000, 50
	k := digest{7}
	t0 := time.Unix(1000, 0)

	t.Run("busy peers", func(t *testing.T) {
		nodes, now := claimCluster(t, k, w, limit, t0, func(string) int64 { return 250 })
		// The window turns: each node's first estimate of w knows no count
		// in it, so each may admit its share of the limit.
		first := map[string]int64{}
		for name, n := range nodes {
			n.rebuild(now)
			first[name] = n.Estimate(k).AllowanceIn(w, limit)
			assert.InDelta(t, limit/4, first[name], 2, "%s: a quarter of the limit", name)
		}
		// An interval on, a has admitted 100 and b and c have reported 20
		// each so far; d's sync round has not reported w yet. b, c and d go
		// on admitting on their first estimates; a hears of the others an
		// interval later.
		a := nodes["a"]
		step := a.cfg.Interval
		counts := map[string]int64{"a": 100, "b": 20, "c": 20}
		for name, n := range nodes {
			if c, ok := counts[name]; ok {
				n.Report(k, w, 250, c, limit)
			} else {
				n.Report(k, w-1, 250, limit/4, limit)
			}
			n.publish(now.Add(step), step.Seconds())
		}
		for name, n := range nodes {
			if name != "a" {
				for _, r := range *n.own.Load() {
					require.True(t, a.receive(r, now.Add(2*step).UnixNano()))
				}
			}
		}
		a.rebuild(now.Add(2 * step))
		got := a.Estimate(k).AllowanceIn(w, limit)
		assert.LessOrEqual(t, got+first["b"]+first["c"]+first["d"], int64(limit),
			"a's allowance %d on top of the others' first ones %v", got, first)
		assert.InDelta(t, first["a"], got, 10, "a keeps about its own share")
	})

	t.Run("idle peers", func(t *testing.T) {
		nodes, now := claimCluster(t, k, w, limit, t0, func(name string) int64 {
			if name == "a" {
				return 1000
			}
			return 0
		})
		a := nodes["a"]
		for range 3 { // a's count is taken as old as its peers' records
			now = now.Add(a.cfg.Interval)
			a.Report(k, w, 1000, 900, limit)
			a.publish(now, a.cfg.Interval.Seconds())
			a.rebuild(now)
		}
		e := a.Estimate(k)
		// Idle peers hold nothing: a may take its share of what is left.
		got := e.AllowanceIn(w, limit)
		assert.GreaterOrEqual(t, got, int64(900)+int64(e.Share*100))
		assert.LessOrEqual(t, got, int64(limit))
		assert.Greater(t, e.Share, 0.95)
	})
}

// TestClaimWithinRoom: a node's claim on its share of the limit goes no
// further than the others' counts and claims leave, as when a peer
// admitted past its share under an earlier, larger one.
func TestClaimWithinRoom(t *testing.T) {
	const limit, w = 1000, 50
	k := digest{8}
	b := bare(t, "b", nil)
	b.mem["a"] = ""
	now := time.Unix(1000, 0)
	for range 3 {
		now = now.Add(b.cfg.Interval)
		b.Report(k, w, 10, 0, limit)
		b.publish(now, b.cfg.Interval.Seconds())
	}
	own := (*b.own.Load())[0]
	require.Positive(t, own.demand)
	a := record{origin: "a", key: k, window: w, seq: uint64(now.UnixNano()), consumed: 850, demand: 4 * own.demand}
	require.True(t, b.receive(a, now.UnixNano()))
	b.rebuild(now)
	e := b.Estimate(k)
	require.Greater(t, e.Share*limit, float64(limit-850), "b's share of the limit is more than a leaves")
	assert.Equal(t, int64(limit-850), e.AllowanceIn(w, limit), "b may admit what a leaves")
}
