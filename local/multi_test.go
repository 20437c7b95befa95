package local_test

import (
	"sync"
	"testing"
	"time"

	"github.com/hybridlimit/hybridlimit/local"
)

func TestAllowMultiAllOrNone(t *testing.T) {
	perSecond := newLimiter(t, local.MustLimit(local.Params{Algorithm: local.TokenBucket, Limit: 10, Window: time.Second, Burst: 2}), local.Config{})
	perMinute := newLimiter(t, local.MustLimit(local.Params{Algorithm: local.FixedWindow, Limit: 3, Window: time.Minute}), local.Config{})
	reqs := []local.Request{{perSecond, "u1", 1}, {perMinute, "u1", 1}}
	out := make([]local.Decision, 2)

	if !local.AllowMultiAt(t0, reqs, out) || !out[0].Allowed() || !out[1].Allowed() || out[0].Remaining() != 1 || out[1].Remaining() != 2 {
		t.Fatalf("first: %+v", out)
	}
	if !local.AllowMultiAt(t0, reqs, out) {
		t.Fatalf("second: %+v", out)
	}
	// The per-second bucket is empty: nothing is charged, the per-minute
	// window keeps its last unit.
	if local.AllowMultiAt(t0, reqs, out) {
		t.Fatal("third admitted")
	}
	if out[0].Allowed() || out[0].Reason() != local.ReasonLimited || out[0].RetryAfter() != 100*time.Millisecond {
		t.Fatalf("third, bucket: %+v", out[0])
	}
	if out[1].Allowed() || out[1].Reason() != local.ReasonOK || out[1].Remaining() != 1 {
		t.Fatalf("third, window (had room, not charged): %+v", out[1])
	}
	if d := perMinute.AllowNAt(t0, "u1", 0); d.Remaining() != 1 {
		t.Fatalf("window was charged by a refused multi: %+v", d)
	}
	later := t0.Add(100 * time.Millisecond)
	if !local.AllowMultiAt(later, reqs, out) || out[1].Remaining() != 0 {
		t.Fatalf("after retry-after: %+v", out)
	}
}

func TestAllowMultiSameKeyTwice(t *testing.T) {
	l := newLimiter(t, local.MustLimit(local.Params{Algorithm: local.FixedWindow, Limit: 5, Window: time.Minute}), local.Config{})
	out := make([]local.Decision, 2)
	reqs := []local.Request{{l, "k", 2}, {l, "k", 3}}
	if !local.AllowMultiAt(t0, reqs, out) || out[0].Remaining() != 0 || out[1].Remaining() != 0 {
		t.Fatalf("2 + 3 of 5: %+v", out)
	}
	if local.AllowMultiAt(t0, []local.Request{{l, "j", 3}, {l, "j", 3}}, out) {
		t.Fatal("3 + 3 of 5 admitted")
	}
	if d := l.AllowNAt(t0, "j", 0); d.Remaining() != 5 {
		t.Fatalf("refused multi charged: %+v", d)
	}
}

func TestAllowMultiBadCostChargesNothing(t *testing.T) {
	a := newLimiter(t, local.MustLimit(local.Params{Algorithm: local.FixedWindow, Limit: 5, Window: time.Minute}), local.Config{})
	out := make([]local.Decision, 3)
	if local.AllowMultiAt(t0, []local.Request{{a, "k", 1}, {a, "x", 6}, {a, "y", -1}}, out) {
		t.Fatal("admitted")
	}
	if out[1].Reason() != local.ReasonCostTooHigh || out[2].Reason() != local.ReasonInvalidCost || out[0].Reason() != local.ReasonOK || out[0].Allowed() {
		t.Fatalf("%+v", out)
	}
	if d := a.AllowNAt(t0, "k", 0); d.Remaining() != 5 {
		t.Fatalf("charged: %+v", d)
	}
	if !local.AllowMultiAt(t0, nil, nil) || !local.AllowMulti(nil, nil) {
		t.Fatal("no requests must be admitted")
	}
	defer func() {
		if recover() == nil {
			t.Fatal("short out did not panic")
		}
	}()
	local.AllowMultiAt(t0, []local.Request{{a, "k", 1}}, nil)
}

func TestAllowMultiManyRules(t *testing.T) {
	var reqs []local.Request
	for i := range 20 {
		l := newLimiter(t, local.MustLimit(local.Params{Algorithm: local.GCRA, Limit: int64(i + 1), Window: time.Second}), local.Config{})
		reqs = append(reqs, local.Request{l, "k", 1})
	}
	out := make([]local.Decision, len(reqs))
	if !local.AllowMultiAt(t0, reqs, out) {
		t.Fatalf("%+v", out)
	}
	if local.AllowMultiAt(t0, reqs, out) { // the first rule allows one per second
		t.Fatalf("second admitted: %+v", out[0])
	}
	if out[0].Reason() != local.ReasonLimited || out[1].Reason() != local.ReasonOK {
		t.Fatalf("%+v %+v", out[0], out[1])
	}
}

// TestAllowMultiConcurrentNoDeadlockNoPartialCharge: goroutines take the same
// two keys in opposite orders. Nothing deadlocks, and both keys end charged
// exactly the same: no multi ever charged one rule without the other.
func TestAllowMultiConcurrentNoDeadlockNoPartialCharge(t *testing.T) {
	a := newLimiter(t, local.MustLimit(local.Params{Algorithm: local.FixedWindow, Limit: 1000, Window: time.Minute}), local.Config{})
	b := newLimiter(t, local.MustLimit(local.Params{Algorithm: local.SlidingWindowLog, Limit: 700, Window: time.Minute}), local.Config{})
	var wg sync.WaitGroup
	var mu sync.Mutex
	admitted := 0
	for g := range 8 {
		wg.Go(func() {
			reqs := []local.Request{{a, "k", 1}, {b, "k", 1}}
			if g%2 == 1 {
				reqs[0], reqs[1] = reqs[1], reqs[0]
			}
			out := make([]local.Decision, 2)
			n := 0
			for range 200 {
				if local.AllowMultiAt(t0, reqs, out) {
					n++
				}
			}
			mu.Lock()
			admitted += n
			mu.Unlock()
		})
	}
	wg.Wait()
	if admitted != 700 {
		t.Fatalf("admitted %d of 1600, want 700", admitted)
	}
	if da, db := a.AllowNAt(t0, "k", 0), b.AllowNAt(t0, "k", 0); da.Remaining() != 300 || db.Remaining() != 0 {
		t.Fatalf("a %+v, b %+v", da, db)
	}
}
