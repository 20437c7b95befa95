package local

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// logAt admits n requests for key at distinct microseconds from at, and
// fails the test if one is rejected.
func logAt(t *testing.T, l *Limiter, key string, at time.Time, n int) {
	t.Helper()
	for i := range n {
		d := l.AllowNAt(at.Add(time.Duration(i)*time.Microsecond), key, 1)
		require.True(t, d.Allowed(), "%s: request %d rejected: %+v", key, i, d)
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
		return Limit{Algorithm: SlidingWindowLog, Quota: n, Window: time.Minute}
	}
	at := time.UnixMicro(1 << 40)
	now := at.UnixMicro()
	l, err := New(logLimit(8), Config{NoBackgroundSweep: true})
	require.NoError(t, err)
	defer l.Close()

	logAt(t, l, "small", at, 2) // within the first pairs
	logAt(t, l, "grown", at, 6) // past them: the ring moves to a buffer of its own
	st, pairs := inPlace(t, l, "small", now)
	assert.Equal(t, [2]bool{true, true}, [2]bool{st, pairs}, "small: state and pairs in place; want both")
	st, pairs = inPlace(t, l, "grown", now)
	assert.Equal(t, [2]bool{true, false}, [2]bool{st, pairs}, "grown: state and pairs in place; want the state only")

	old := l.store.Get("small", now)
	require.NoError(t, l.SetLimit(logLimit(10)))
	for key, held := range map[string]int64{"small": 2, "grown": 6} {
		assert.Equal(t, 10-held, l.AllowNAt(at, key, 0).Remaining(), "%s after SetLimit: remaining", key)
	}
	assert.NotSame(t, old, l.store.Get("small", now), "small: the new limit did not give the key a new entry")
	st, pairs = inPlace(t, l, "small", now)
	assert.Equal(t, [2]bool{true, true}, [2]bool{st, pairs}, "small after SetLimit: state and pairs in place; want both")
	st, _ = inPlace(t, l, "grown", now)
	assert.True(t, st, "grown after SetLimit: its state stayed in the old entry")

	// A key under a packed limit has a plain entry; carried over to a log,
	// it starts afresh in the room of its new entry.
	fw := Limit{Algorithm: FixedWindow, Quota: 8, Window: time.Minute}
	require.NoError(t, l.SetLimit(fw))
	logAt(t, l, "packed", at, 3)
	v := &l.store.Get("packed", now).Value
	assert.Nil(t, v.spare, "packed: a spare; want none")
	assert.Nil(t, v.st, "packed: a state; want none")
	require.NoError(t, l.SetLimit(logLimit(8)))
	d := l.AllowNAt(at.Add(time.Second), "packed", 1)
	assert.True(t, d.Allowed(), "packed after SetLimit: %+v, want admitted", d)
	assert.Equal(t, int64(7), d.Remaining(), "packed after SetLimit: remaining")
	st, pairs = inPlace(t, l, "packed", now)
	assert.Equal(t, [2]bool{true, true}, [2]bool{st, pairs}, "packed after SetLimit: state and pairs in place; want both")
}
