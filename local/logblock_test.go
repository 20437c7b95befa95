package local

import (
	"testing"
	"time"
)

// logAt admits n requests for key at distinct microseconds from at, and
// fails the test if one is rejected.
func logAt(t *testing.T, l *Limiter, key string, at time.Time, n int) {
	t.Helper()
	for i := range n {
		if d := l.AllowAt(at.Add(time.Duration(i)*time.Microsecond), key); !d.Allowed() {
			t.Fatalf("%s: request %d rejected: %+v", key, i, d)
		}
	}
}

// inPlace reports whether key's log is in the room its entry was allocated
// with (logBlock), and whether its pairs are too.
func inPlace(t *testing.T, l *Limiter, key string, now int64) (state, pairs bool) {
	t.Helper()
	v := &l.store.Get(key, now).Value
	if v.spare == nil || v.st == nil {
		return false, false
	}
	r := v.st.log
	return v.st == &v.spare.s && r == &v.spare.r, r != nil && &r.buf[0] == &v.spare.r.room[0]
}

// TestLogInItsEntry checks that a sliding window log lives in its key's
// entry, as allocated, and moves to the new entry when a new limit carries
// it over, so that the old entry is not kept alive by it.
func TestLogInItsEntry(t *testing.T) {
	logLimit := func(n int64) Limit {
		return MustLimit(Params{Algorithm: SlidingWindowLog, Limit: n, Window: time.Minute})
	}
	at := time.UnixMicro(1 << 40)
	now := at.UnixMicro()
	l, err := New(logLimit(8), Config{NoBackgroundSweep: true})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()

	logAt(t, l, "small", at, 2) // within the first pairs
	logAt(t, l, "grown", at, 6) // past them: the ring moves to a buffer of its own
	if st, pairs := inPlace(t, l, "small", now); !st || !pairs {
		t.Fatalf("small: state in place %v, pairs in place %v; want both", st, pairs)
	}
	if st, pairs := inPlace(t, l, "grown", now); !st || pairs {
		t.Fatalf("grown: state in place %v, pairs in place %v; want the state only", st, pairs)
	}

	old := l.store.Get("small", now)
	if err := l.SetLimit(logLimit(10)); err != nil {
		t.Fatal(err)
	}
	for key, held := range map[string]int64{"small": 2, "grown": 6} {
		if d := l.AllowNAt(at, key, 0); d.Remaining() != 10-held {
			t.Fatalf("%s after SetLimit: remaining %d, want %d", key, d.Remaining(), 10-held)
		}
	}
	if l.store.Get("small", now) == old {
		t.Fatal("small: the new limit did not give the key a new entry")
	}
	if st, pairs := inPlace(t, l, "small", now); !st || !pairs {
		t.Fatalf("small after SetLimit: state in place %v, pairs in place %v; want both", st, pairs)
	}
	if st, _ := inPlace(t, l, "grown", now); !st {
		t.Fatal("grown after SetLimit: its state stayed in the old entry")
	}

	// A key under a packed limit has a plain entry; carried over to a log,
	// it starts afresh in the room of its new entry.
	fw := MustLimit(Params{Algorithm: FixedWindow, Limit: 8, Window: time.Minute})
	if err := l.SetLimit(fw); err != nil {
		t.Fatal(err)
	}
	logAt(t, l, "packed", at, 3)
	if v := &l.store.Get("packed", now).Value; v.spare != nil || v.st != nil {
		t.Fatalf("packed: spare %p, st %p; want neither", v.spare, v.st)
	}
	if err := l.SetLimit(logLimit(8)); err != nil {
		t.Fatal(err)
	}
	if d := l.AllowAt(at.Add(time.Second), "packed"); !d.Allowed() || d.Remaining() != 7 {
		t.Fatalf("packed after SetLimit: %+v, want admitted with 7 remaining", d)
	}
	if st, pairs := inPlace(t, l, "packed", now); !st || !pairs {
		t.Fatalf("packed after SetLimit: state in place %v, pairs in place %v; want both", st, pairs)
	}
}
