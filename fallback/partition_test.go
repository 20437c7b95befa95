package fallback

import (
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/stretchr/testify/assert"
)

// TestPartitionSplit: four nodes with even demand, Redis out of reach, and
// memberlist on each side of a partition declaring the far side dead. The
// split counts the absent members on, at the live members' mean demand, so
// each side may admit its members' part of the limit in the next window
// and the sides the limit between them; were the dead dropped (Redis
// reachable, as the split has always been), each side would take the whole
// limit. A member that announced it was leaving is dropped: the living
// take its share.
func TestPartitionSplit(t *testing.T) {
	const limit, w = 1000, 50
	k := digest{9}
	t0 := time.Unix(1000, 0)
	for _, c := range []struct {
		name   string
		outage bool
		sides  [][]string
		left   string // a member that left before the split
		want   map[string]int64
	}{
		{name: "2|2", outage: true, sides: [][]string{{"a", "b"}, {"c", "d"}},
			want: map[string]int64{"a": limit / 4, "b": limit / 4, "c": limit / 4, "d": limit / 4}},
		{name: "3|1", outage: true, sides: [][]string{{"a", "b", "c"}, {"d"}},
			want: map[string]int64{"a": limit / 4, "b": limit / 4, "c": limit / 4, "d": limit / 4}},
		{name: "2|2 dead dropped", outage: false, sides: [][]string{{"a", "b"}, {"c", "d"}},
			want: map[string]int64{"a": limit / 2, "b": limit / 2, "c": limit / 2, "d": limit / 2}},
		{name: "d left, then 2|1", outage: true, sides: [][]string{{"a", "b"}, {"c"}}, left: "d",
			want: map[string]int64{"a": limit / 3, "b": limit / 3, "c": limit / 3}},
	} {
		t.Run(c.name, func(t *testing.T) {
			nodes, now := claimCluster(t, k, w, limit, t0, func(string) int64 { return 250 })
			for _, n := range nodes {
				n.Outage(c.outage, 0)
			}
			if c.left != "" {
				for name, n := range nodes {
					if name != c.left {
						ev := events{n: n}
						ev.NotifyUpdate(&memberlist.Node{Name: c.left, Meta: metaLeaving})
						ev.NotifyLeave(&memberlist.Node{Name: c.left})
					}
				}
			}
			for i, side := range c.sides {
				for j, far := range c.sides {
					if i == j {
						continue
					}
					for _, name := range side {
						for _, gone := range far {
							events{n: nodes[name]}.NotifyLeave(&memberlist.Node{Name: gone})
						}
					}
				}
			}
			var sum int64
			for name, want := range c.want {
				n := nodes[name]
				n.rebuild(now)
				got := n.Estimate(k).AllowanceIn(w, limit)
				assert.InDelta(t, want, got, 2, "%s: its part of the limit in the next window", name)
				sum += got
			}
			t.Logf("allowances sum to %d (limit %d)", sum, limit)
		})
	}
}
