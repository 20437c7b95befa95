package syncer_test

import (
	"context"
	"testing"
	"time"

	"github.com/hybridlimit/hybridlimit/internal/redistest"
	"github.com/hybridlimit/hybridlimit/local"
	"github.com/hybridlimit/hybridlimit/syncer"
)

type stepClock struct{ t time.Time }

func (c *stepClock) Now() time.Time { return c.t }

// TestRegistry: each Syncer registers as live at its rounds (every
// DemandTTL ÷ 2); Nodes counts the live ones, never fewer than
// SyncConfig.Nodes; a node that shuts down leaves at once, and one that
// stops syncing drops out after DemandTTL.
func TestRegistry(t *testing.T) {
	ctx := context.Background()
	c := redistest.Client(t, redistest.Addr(t))
	prefix := redistest.Prefix(t)
	clk := &stepClock{time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)}
	newSyncer := func(id string, hint int) *syncer.Syncer {
		s, err := syncer.NewSyncer(syncer.SyncConfig{
			Client: c, Keyspace: syncer.Keyspace{Prefix: prefix}, NodeID: id, Nodes: hint,
			Clock: clk, PassTime: true,
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	round := func(s *syncer.Syncer) syncer.RoundStats {
		t.Helper()
		st, err := s.SyncAt(ctx, clk.Now().UnixMicro())
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	a, b, d := newSyncer("a", 0), newSyncer("b", 0), newSyncer("d", 5)
	if n := a.Nodes(); n != 0 {
		t.Errorf("before any round: Nodes = %d, want 0 (unknown)", n)
	}
	if n := d.Nodes(); n != 5 {
		t.Errorf("before any round, SyncConfig.Nodes 5: Nodes = %d, want 5", n)
	}
	if st := round(a); !st.Registered {
		t.Errorf("first round: %+v, want Registered", st)
	}
	if n := a.Nodes(); n != 1 {
		t.Errorf("a alone: Nodes = %d, want 1", n)
	}
	round(b)
	if n := b.Nodes(); n != 2 {
		t.Errorf("a and b: b counts %d, want 2", n)
	}
	// a registers again only DemandTTL ÷ 2 (250ms) after its last time.
	clk.t = clk.t.Add(100 * time.Millisecond)
	if st := round(a); st.Registered {
		t.Errorf("a round 100ms after registering registered again: %+v", st)
	}
	clk.t = clk.t.Add(200 * time.Millisecond)
	if st := round(a); !st.Registered || a.Nodes() != 2 {
		t.Errorf("a round 300ms after registering: %+v, Nodes %d; want Registered, 2", st, a.Nodes())
	}
	round(d)
	if n := d.Nodes(); n != 5 {
		t.Errorf("3 live, SyncConfig.Nodes 5: Nodes = %d, want 5", n)
	}
	// b leaves at Shutdown; d stops syncing and drops out after DemandTTL.
	if err := b.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	clk.t = clk.t.Add(300 * time.Millisecond)
	round(a)
	if n := a.Nodes(); n != 2 {
		t.Errorf("after b left: a counts %d, want 2 (a and d)", n)
	}
	clk.t = clk.t.Add(300 * time.Millisecond)
	round(a)
	if n := a.Nodes(); n != 1 {
		t.Errorf("after d stopped for 600ms: a counts %d, want 1", n)
	}
}

var _ local.Clock = (*stepClock)(nil)
