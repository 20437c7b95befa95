package syncer_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/hybridlimit/hybridlimit/internal/keyed"
	"github.com/hybridlimit/hybridlimit/internal/lease"
	"github.com/hybridlimit/hybridlimit/internal/redistest"
	"github.com/hybridlimit/hybridlimit/local"
	"github.com/hybridlimit/hybridlimit/syncer"
)

// TestFirstLeaseRounds: a new key asks for a first-lease round, not an
// ordinary early one; SyncFirstAt exchanges only the keys that asked, and
// takes each once; an ordinary round serves the keys still waiting, so
// that the list does not grow while no first-lease round runs (Redis out).
func TestFirstLeaseRounds(t *testing.T) {
	ctx := context.Background()
	c := redistest.Client(t, redistest.Addr(t))
	clk := &stepClock{time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)}
	s, err := syncer.NewSyncer(syncer.SyncConfig{
		Client: c, Keyspace: syncer.Keyspace{Prefix: redistest.Prefix(t)}, NodeID: "a", Nodes: 1,
		Clock: clk, PassTime: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	rule, err := syncer.NewRule("first", local.MustLimit(local.Params{Algorithm: local.FixedWindow, Limit: 1000, Window: time.Minute}))
	if err != nil {
		t.Fatal(err)
	}
	lr, err := s.LeaseRule(rule)
	if err != nil {
		t.Fatal(err)
	}
	store, err := keyed.New(keyed.Config{}, func(*lease.Lease, int64) bool { return false }, nil)
	if err != nil {
		t.Fatal(err)
	}
	decide := func(key string) {
		now := clk.Now().UnixMicro()
		e := store.Get(key, now)
		e.Lock()
		if _, signal := e.Value.Decide(lr, now, 1); signal.Sync() {
			lr.Notify(e)
		}
		e.Unlock()
	}
	decide("a")
	if s.Wanted() || !s.WantedFirst() {
		t.Fatal("a new key: want a first-lease round asked for, and no early round")
	}
	decide("a") // asked already: listed once
	decide("b")
	if n := syncer.FirstPending(s); n != 2 {
		t.Fatalf("%d keys wait for the first-lease round, want 2", n)
	}
	st, err := s.SyncFirstAt(ctx, clk.Now().UnixMicro())
	if err != nil {
		t.Fatal(err)
	}
	if !st.First || st.Synced != 2 {
		t.Errorf("first-lease round: %+v, want First and 2 keys synced", st)
	}
	if st, _ := s.SyncFirstAt(ctx, clk.Now().UnixMicro()); st.Synced != 0 {
		t.Errorf("a second first-lease round synced %d keys, want none asked", st.Synced)
	}
	// Keys that wait while only ordinary rounds run are served by them.
	for i := range 50 {
		decide(fmt.Sprintf("k%d", i))
	}
	st, err = s.SyncAt(ctx, clk.Now().UnixMicro())
	if err != nil {
		t.Fatal(err)
	}
	if n := syncer.FirstPending(s); n != 0 || st.Synced < 50 {
		t.Errorf("after an ordinary round: %d keys still wait for a first-lease round, %d synced; want 0 and at least 50", n, st.Synced)
	}
}
