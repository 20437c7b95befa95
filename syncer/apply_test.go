package syncer

import (
	"testing"
	"time"

	"github.com/hybridlimit/hybridlimit/internal/redistest"
	"github.com/hybridlimit/hybridlimit/local"
)

// TestApplyClockAhead: a node whose estimate of Redis's clock runs a little
// ahead sends, just after a window boundary by its clock, an exchange that
// Redis runs just before it, in a window whose budget is spent. The reply's
// "exhausted" speaks of that window, the node's previous one: the node's
// new window must not be refused for it (it was, for the whole window, in
// the multi-process benchmark: 1 to 3 windows in 30 lost a node's part).
func TestApplyClockAhead(t *testing.T) {
	c := redistest.Client(t, redistest.Addr(t))
	s, err := NewSyncer(SyncConfig{Client: c, Keyspace: Keyspace{Prefix: redistest.Prefix(t)}, NodeID: "a", Nodes: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	rule, err := NewRule("ahead", local.MustLimit(local.Params{Algorithm: local.FixedWindow, Limit: 1000, Window: time.Second}))
	if err != nil {
		t.Fatal(err)
	}
	lr, err := s.LeaseRule(rule)
	if err != nil {
		t.Fatal(err)
	}
	const w = int64(1e6)
	start := int64(1_900_000_000) * w // a window's start, node time = Redis time (offset 0)
	for _, tc := range []struct {
		name      string
		rnow      int64 // Redis's time in the reply
		exhausted bool
		cur, prev bool // the node's flags after it
	}{
		{"ahead, previous window exhausted", start - 300, true, false, true},
		{"ahead, previous window open", start - 300, false, false, false},
		{"same window, exhausted", start + 400, true, true, false},
		{"same window, open", start + 400, false, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var k Lease
			k.flags = flagSynced
			now := start + 500 // 0.5ms into the node's window
			k.Decide(lr, now, 1)
			if k.wid != start {
				t.Fatalf("the node's window %d, want %d", k.wid, start)
			}
			p := &pending{rule: lr, sentAt: now, wid: k.wid, used: k.used}
			ex := int64(0)
			if tc.exhausted {
				ex = 1
			}
			// {now, wt, epoch, gcur, ucur, Rcur, gnext, Rprev, revoked, exhausted, live, room, paced}
			wt := tc.rnow - tc.rnow%w
			s.apply(&k, p, []int64{tc.rnow, wt, 1, 0, 0, 1000, 100, 1000, 0, ex, 1, 0, 0}, now)
			if got := k.flags&flagExhausted != 0; got != tc.cur {
				t.Errorf("the node's window exhausted: %v, want %v", got, tc.cur)
			}
			if got := k.flags&flagExhaustedPrev != 0; got != tc.prev {
				t.Errorf("its previous window exhausted: %v, want %v", got, tc.prev)
			}
		})
	}
}
