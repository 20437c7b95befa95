package local

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// FuzzDecideWord holds the packed path to the general one: for a limit
// whose states pack, a Limiter decides a request sequence on one key, each
// request also one window earlier (time run back), and decide decides the
// same sequence on an unpacked state. The verdicts must agree, and the
// key's word must be the general state packed. Every word must also unpack
// and pack back to itself, and a rejection rejectWord decides on a word
// must be the general path's.
func FuzzDecideWord(f *testing.F) {
	for _, a := range allAlgorithms {
		f.Add([]byte{byte(a), 4, 0, 6, 1, 0, 1, 1, 0, 1, 0, 0xc0, 2, 0, 8, 1, 0xff, 0x0f, 3, 0, 0xc0, 1})
		f.Add([]byte{byte(a), 19, 1, 0, 0, 1, 5, 0, 1, 5, 0, 1, 9, 0x40, 0, 1, 0, 0xc0, 20})
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		lim, reqs, ok := decodeFuzz(data)
		if !ok || !lim.packed {
			return
		}
		l, err := New(lim.p, Config{NoBackgroundSweep: true})
		require.NoError(t, err)
		defer l.Close()
		var s state
		var w uint64
		for i, r := range reqs {
			for _, now := range []int64{max(r.at-lim.w, 0), r.at} {
				rv, rok := lim.rejectWord(w, now, r.n)
				want := lim.decide(&s, now, r.n, true).decision(lim.max)
				if rok {
					// rejectWord rejects only what the general path rejects, of a cost in [0, max].
					require.GreaterOrEqual(t, r.n, int64(0), "%v: step %d: %d at %d on %#x: rejectWord rejects a negative cost", lim, i, r.n, now, w)
					require.LessOrEqual(t, r.n, lim.max, "%v: step %d: %d at %d on %#x: rejectWord rejects a cost above the limit's", lim, i, r.n, now, w)
					require.False(t, want.Allowed(), "%v: step %d: %d at %d on %#x: rejectWord rejects, the general path admits: %v", lim, i, r.n, now, w, want)
					require.Equal(t, want.String(), rv.decision(lim.max).String(), "%v: step %d: %d at %d on %#x: rejectWord, want the general path's", lim, i, r.n, now, w)
				}
				w = lim.pack(&s, w)
				require.Equal(t, want.String(), l.AllowNAt(time.UnixMicro(now), "k", r.n).String(), "%v: step %d: %d at %d: Limiter, want the general path's", lim, i, r.n, now)
				got := l.store.Get("k", now).Value.word.Load()
				require.Equal(t, w, got, "%v: step %d: %d at %d: the key's word %#x, the general state's %#x", lim, i, r.n, now, got, w)
				got = lim.pack(new(lim.unpack(w)), w)
				require.Equal(t, w, got, "%v: step %d: word %#x packs back as %#x", lim, i, w, got)
			}
		}
	})
}

// TestPacking: the limits people write pack, the sliding window log never
// does, and limits whose states need more than a word fall back to the
// entry's lock.
func TestPacking(t *testing.T) {
	for _, c := range []struct {
		p    Limit
		want bool
	}{
		{Limit{Algorithm: FixedWindow, Quota: 10000, Window: time.Second}, true},
		{Limit{Algorithm: FixedWindow, Quota: 1 << 40, Window: time.Hour}, false},
		{Limit{Algorithm: SlidingWindowCounter, Quota: 10000, Window: time.Second}, true},
		{Limit{Algorithm: SlidingWindowCounter, Quota: 100000, Window: time.Minute}, true},
		{Limit{Algorithm: SlidingWindowCounter, Quota: 1 << 20, Window: time.Second}, false},
		{Limit{Algorithm: SlidingWindowLog, Quota: 10, Window: time.Second}, false},
		{Limit{Algorithm: GCRA, Quota: 10000, Window: time.Second}, true},
		{Limit{Algorithm: TokenBucket, Quota: 7, Window: time.Second, Burst: 100}, true},
		{Limit{Algorithm: LeakyBucket, Quota: 999983, Window: time.Second}, false}, // rl 999983
	} {
		assert.Equal(t, c.want, mustCompile(c.p).packed, "%v: packed", mustCompile(c.p))
	}
}
