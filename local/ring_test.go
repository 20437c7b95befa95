package local

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestRingResizes follows one log's ring through a burst and its end: it
// doubles while the pairs fill it, shrinks to the least power of two they
// fill half of once they fill a quarter or less, never below minShrunk, and
// keeps its pairs in order through both.
func TestRingResizes(t *testing.T) {
	lim := mustCompile(Limit{Algorithm: SlidingWindowLog, Quota: 1000, Window: time.Minute})
	at, w := int64(1<<40), lim.w
	var s state
	admit := func(now int64, wantRemaining int64) {
		t.Helper()
		v := lim.decide(&s, now, 1, true)
		require.Equal(t, ReasonOK, v.reason, "at %d: %+v, want admitted", now-at, v)
		require.Equal(t, wantRemaining, v.remaining, "at %d: %+v, remaining", now-at, v)
	}
	expect := func(size int, times ...int64) {
		t.Helper()
		r := s.log
		require.Equal(t, size, len(r.buf), "the ring's buffer length")
		require.Equal(t, len(times), r.n, "pairs in the ring")
		require.Equal(t, int64(len(times)), r.sum, "the ring's pairs' total")
		for i, tm := range times {
			e := r.at(i)
			require.Equal(t, [2]int64{tm - at, 1}, [2]int64{e.t - at, e.n}, "pair %d", i)
		}
	}
	span := func(from, to int64) []int64 { // from, from+1, …, to−1
		var ts []int64
		for tm := from; tm < to; tm++ {
			ts = append(ts, tm)
		}
		return ts
	}

	for i := range int64(1000) {
		admit(at+i, 999-i)
	}
	expect(1024, span(at, at+1000)...)

	// 900 pairs leave the window: 101 after this request, which fill a
	// quarter of 1,024 or less: the ring shrinks to 256, half filled or less.
	now := at + w + 899
	admit(now, 1000-101)
	expect(256, append(span(at+900, at+1000), now)...)

	// Every pair leaves: the ring shrinks to minShrunk, not into its room.
	now2 := now + w
	admit(now2, 999)
	expect(minShrunk, now2)

	// It grows again when full.
	for i := range int64(minShrunk) {
		admit(now2+1+i, 998-i)
	}
	expect(2*minShrunk, span(now2, now2+minShrunk+1)...)
}
