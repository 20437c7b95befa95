package local_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/hybridlimit/hybridlimit/local"
)

func TestReserveSpacesRequests(t *testing.T) {
	// A shaper: 10 per second (100ms apart), burst 2, queue of up to 1s.
	lim := local.MustLimit(local.Params{Algorithm: local.LeakyBucket, Limit: 10, Window: time.Second, Burst: 2})
	l := newLimiter(t, lim, local.Config{})
	var delays []time.Duration
	for {
		r, err := l.ReserveAt(t0, "k", 1, time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if !r.OK {
			if r.Reason != local.ReasonLimited || r.Delay <= time.Second {
				t.Fatalf("refused with %+v", r)
			}
			break
		}
		if !r.TimeToAct.Equal(t0.Add(r.Delay)) {
			t.Fatalf("time to act %v, delay %v", r.TimeToAct, r.Delay)
		}
		delays = append(delays, r.Delay)
	}
	// Two at once (the burst), then one every 100ms up to 1s: 12 in all.
	if len(delays) != 12 || delays[0] != 0 || delays[1] != 0 || delays[2] != 100*time.Millisecond || delays[11] != time.Second {
		t.Fatalf("delays %v", delays)
	}
	// The meter sees the queue as consumed.
	if d := l.AllowNAt(t0, "k", 1); d.Allowed() {
		t.Fatalf("Allow admitted past a full queue: %+v", d)
	}
	if r, _ := l.ReserveAt(t0, "k", 3, time.Hour); r.OK || r.Reason != local.ReasonCostTooHigh {
		t.Fatalf("cost above burst: %+v", r)
	}
	if r, _ := l.ReserveAt(t0, "k", -1, time.Hour); r.OK || r.Reason != local.ReasonInvalidCost {
		t.Fatalf("negative cost: %+v", r)
	}
}

func TestReserveCancel(t *testing.T) {
	lim := local.MustLimit(local.Params{Algorithm: local.GCRA, Limit: 1, Window: time.Second})
	l := newLimiter(t, lim, local.Config{})
	first, _ := l.ReserveAt(t0, "k", 1, time.Minute)
	second, _ := l.ReserveAt(t0, "k", 1, time.Minute)
	third, _ := l.ReserveAt(t0, "k", 1, time.Minute)
	if third.Delay != 2*time.Second {
		t.Fatalf("third %+v", third)
	}
	// The last one is given back exactly: the next takes its slot.
	third.CancelAt(t0)
	if again, _ := l.ReserveAt(t0, "k", 1, time.Minute); again.Delay != 2*time.Second {
		t.Fatalf("after cancelling the last: %+v", again)
	}
	// One with others behind it keeps its slot (reusing it would break the
	// spacing promised to the later ones).
	second.CancelAt(t0)
	if next, _ := l.ReserveAt(t0, "k", 1, time.Minute); next.Delay != 3*time.Second {
		t.Fatalf("after cancelling a middle one: %+v", next)
	}
	// Past its time to act, a reservation is spent.
	first.CancelAt(t0)
	if d := l.AllowNAt(t0.Add(4*time.Second), "k", 1); !d.Allowed() {
		t.Fatalf("%+v", d)
	}
}

func TestReserveNeedsABucket(t *testing.T) {
	l := newLimiter(t, local.MustLimit(local.Params{Algorithm: local.FixedWindow, Limit: 1, Window: time.Second}), local.Config{})
	if _, err := l.ReserveAt(t0, "k", 1, time.Second); !errors.Is(err, local.ErrNotShaper) {
		t.Fatalf("err = %v", err)
	}
	if err := l.Wait(context.Background(), "k", 1); !errors.Is(err, local.ErrNotShaper) {
		t.Fatalf("Wait err = %v", err)
	}
}

func TestWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		lim := local.MustLimit(local.Params{Algorithm: local.LeakyBucket, Limit: 1, Window: time.Second})
		l, err := local.New(lim, local.Config{Clock: local.SystemClock{}, NoBackgroundSweep: true})
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		ctx := context.Background()
		start := time.Now()
		for range 3 {
			if err := l.Wait(ctx, "k", 1); err != nil {
				t.Fatal(err)
			}
		}
		if waited := time.Since(start); waited != 2*time.Second {
			t.Fatalf("three waits at 1/s took %v, want 2s", waited)
		}

		// A deadline too near fails at once, consuming nothing.
		short, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
		defer cancel()
		before := time.Now()
		if err := l.Wait(short, "k", 1); !errors.Is(err, local.ErrLimitExceeded) {
			t.Fatalf("err = %v", err)
		}
		if time.Since(before) != 0 {
			t.Fatal("Wait slept before failing on its deadline")
		}

		// A cancelled wait gives its reservation back.
		cctx, cancelWait := context.WithCancel(ctx)
		done := make(chan error)
		go func() { done <- l.Wait(cctx, "k", 1) }()
		synctest.Wait()
		cancelWait()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Fatalf("err = %v", err)
		}
		if d := l.AllowN("k", 0); d.ResetAfter() != time.Second {
			t.Fatalf("cancelled reservation kept: %+v", d)
		}
		if err := l.Wait(ctx, "k", 2); !errors.Is(err, local.ErrLimitExceeded) {
			t.Fatalf("cost above burst: %v", err)
		}
		cancelled, c := context.WithCancel(ctx)
		c()
		if err := l.Wait(cancelled, "k", 1); !errors.Is(err, context.Canceled) {
			t.Fatalf("done context: %v", err)
		}
	})
}
