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
	s := windowSyncer(t)
	lr := windowRule(t, s, local.FixedWindow)
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

// TestDecideOffsetBack: a reply may move a key's offset back across a
// window boundary the lease has already crossed. A decision then still
// counts in the lease's window, and its reset-after says so (it ran to the
// end of the window before, whose grant it did not use: the multi-process
// benchmark, which reads each decision's window from it, counted up to 0.3%
// of a window's admissions in the window before).
func TestDecideOffsetBack(t *testing.T) {
	s := windowSyncer(t)
	for _, alg := range []local.Algorithm{local.FixedWindow, local.SlidingWindowCounter} {
		lr := windowRule(t, s, alg)
		const w = int64(1e6)
		start := int64(1_900_000_000) * w
		var k Lease
		k.flags = flagSynced
		k.Decide(lr, start+200, 1) // 0.2ms into a window, offset 0
		k.granted = 100
		k.offset = -500 // a reply moves the offset back: node time start+300 reads as start-200
		v, _ := k.Decide(lr, start+300, 1)
		if k.wid != start || v.Reason != local.ReasonOK {
			t.Fatalf("%v: window %d, reason %v; want %d, admitted", alg, k.wid, v.Reason, start)
		}
		// The window the decision names: the boundary nearest to now + reset.
		if end := start + 300 + k.offset + v.Reset; (end+w/2)/w*w != start+w || v.Reset > w {
			t.Errorf("%v: reset %dus names the window ending near %d, want the lease's, ending at %d", alg, v.Reset, end, start+w)
		}
		if v.Remaining > 1000 {
			t.Errorf("%v: remaining %d > the limit", alg, v.Remaining)
		}
	}
}

// windowSyncer is a Syncer of one node, for tests that drive a Lease by hand.
func windowSyncer(t *testing.T) *Syncer {
	t.Helper()
	c := redistest.Client(t, redistest.Addr(t))
	s, err := NewSyncer(SyncConfig{Client: c, Keyspace: Keyspace{Prefix: redistest.Prefix(t)}, NodeID: "a", Nodes: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// windowRule is s's lease rule of alg at 1,000 per second.
func windowRule(t *testing.T, s *Syncer, alg local.Algorithm) *LeaseRule {
	t.Helper()
	rule, err := NewRule("w", local.MustLimit(local.Params{Algorithm: alg, Limit: 1000, Window: time.Second}))
	if err != nil {
		t.Fatal(err)
	}
	lr, err := s.LeaseRule(rule)
	if err != nil {
		t.Fatal(err)
	}
	return lr
}
