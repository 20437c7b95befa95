package hybrid_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/internal/clocktest"
	"github.com/hybridlimit/hybridlimit/internal/localx"
	"github.com/hybridlimit/hybridlimit/internal/redistest"
	"github.com/hybridlimit/hybridlimit/local"
	"github.com/hybridlimit/hybridlimit/syncer"
)

// TestCounterCarry: a sliding window counter's grant that a node holds
// unused as its window ends carries into the next window, whose count
// starts with the one just over at full weight: the node admits on it
// before its first exchange there, instead of opening the window dry
// (there is no cold-start allowance here). Until that exchange moves it,
// Redis weighs it in full in the new window's budget, so another node
// granted all it can late in the window, where the previous one weighs
// little, leaves room for it: the counter's estimate stays within the
// limit. The exchange then moves it in Redis to the new window.
func TestCounterCarry(t *testing.T) {
	const limit = 1000
	w := time.Second
	lim := local.Limit{Algorithm: local.SlidingWindowCounter, Quota: limit, Window: w}
	client := redistest.Client(t, redistest.Addr(t))
	ks := syncer.Keyspace{Prefix: redistest.Prefix(t)}
	clk := clocktest.New(epoch2030.Add(w / 3))
	const nodes = 2
	ls, _, allow := leasingNodes(t, client, ks.Prefix, clk, "carry", lim, nodes)
	minGap := testInterval / 10

	// The first window: both nodes lease, at 200 a second each.
	w0 := windowStart(clk, w)
	var used [nodes]int // admitted in the first window
	for range 10 {
		for i := range nodes {
			used[i] += allow(i, 2)
			syncOK(t, ls[i], clk)
		}
		clk.Add(minGap)
	}
	st := readWindow(t, client, ks, "carry", "k", w, w0)
	require.True(t, st.ok)
	held := int(st.g["n0"]) - used[0] // use within a grant goes unreported
	require.Positive(t, held, "n0 holds a grant unused at the end of its window: %+v, used %v", st, used)

	// Late in the next window, n1 asks for all it can get.
	w1 := w0 + w.Microseconds()
	clk.Set(time.UnixMicro(w1 + 3*w.Microseconds()/4))
	a1 := 0
	for range 10 {
		a1 += allow(1, 500)
		syncOK(t, ls[1], clk)
		clk.Add(minGap)
	}
	require.Positive(t, a1, "n1 admits in the new window")

	// n0, without an exchange in the new window, admits what it carried.
	a0 := allow(0, held+50)
	assert.Equal(t, held, a0, "n0 admits its grant carried from the window before, no more")

	// The counter's estimate at n0's admissions: the previous window's
	// count weighted by the steps of it still inside, plus this window's.
	step, ws := localx.MustLimit(lim).Counter()
	left := ws - (clk.Micros()-w1)/step
	prev := used[0] + used[1]
	est := float64(prev)*float64(left)/float64(ws) + float64(a0+a1)
	assert.LessOrEqual(t, est, float64(limit), "the counter's estimate: %d before × %d/%d + %d + %d now", prev, left, ws, a0, a1)

	// n0's exchange moves its carried grant to the new window in Redis.
	syncOK(t, ls[0], clk)
	st0 := readWindow(t, client, ks, "carry", "k", w, w0)
	st1 := readWindow(t, client, ks, "carry", "k", w, w1)
	assert.Equal(t, int64(used[0]), st0.g["n0"], "n0's grant in the window over is what it used there")
	assert.Equal(t, int64(used[0]), st0.u["n0"], "n0's use in the window over, reported")
	assert.Equal(t, int64(a0), st1.u["n0"], "n0's use in the new window, reported")
	assert.GreaterOrEqual(t, st1.g["n0"], int64(a0), "n0's grant in the new window covers what it carried")
	assert.LessOrEqual(t, float64(st0.R)*float64(left)/float64(ws)+float64(st1.R), float64(limit), "Redis's commitments within the counter's limit")
}
