package syncer

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/internal/redistest"
)

// globalAsk is an ask of lua/global.lua for region: its demand, the window
// x (1 s), what it holds and wants there, its standing share held, and the
// time of the read it comes from (seq).
type globalAsk struct {
	region                   string
	demand, held, want, seen int64
	seq                      int64
}

const (
	askL      = 1000
	askW      = 1_000_000
	askWindow = 1_900_000_000 * askW
	askFP     = "1:1000:1000000:0:0:0:0:0:0:0"
)

// run runs a, at time askWindow + 100 ms, and returns its answer: {now,
// part, part next, standing share, left, short, excess}.
func (a globalAsk) run(t *testing.T, ctx context.Context, key string) []int64 {
	t.Helper()
	c := redistest.Client(t, redistest.Addr(t))
	args := []any{fmt.Sprint(askWindow + 100_000), a.region, askFP, appendNumbers(nil, a.demand, askWindow, a.held, a.held, a.want,
		askWindow+askW, 0, 0, a.seen, 1, 300_000_000, 200_000, a.seq)}
	v, err := scriptGlobal.Run(ctx, c, []string{key}, args...).Int64Slice()
	require.NoError(t, err)
	require.Len(t, v, 7)
	return v
}

// TestGlobalScript: the store never lets the regions hold more than L in a
// window, keeps what the others' demands entitle them to, keeps standing
// shares that sum to at most L, and ignores an ask older than one it
// answered.
func TestGlobalScript(t *testing.T) {
	ctx := context.Background()
	key := redistest.Prefix(t) + ":{k}:m:g"
	a := globalAsk{region: "a", demand: 1500, want: askL, seq: 10}.run(t, ctx, key)
	assert.Equal(t, int64(askL), a[1], "a region alone may have all of L")
	b := globalAsk{region: "b", demand: 500, want: askL, seq: 10}.run(t, ctx, key)
	assert.LessOrEqual(t, a[1]+b[1], int64(askL), "the parts never sum past L")
	assert.Zero(t, b[4], "nothing left")
	// a gives back 400 it does not use: b may have its part by demand
	// (250), the rest is kept for a's (750) until the window's last
	// lookahead
	a = globalAsk{region: "a", demand: 1500, held: 600, want: 600, seen: a[3], seq: 20}.run(t, ctx, key)
	assert.Equal(t, int64(600), a[1], "a holds what it says")
	b = globalAsk{region: "b", demand: 500, held: b[1], want: askL, seen: b[3], seq: 20}.run(t, ctx, key)
	assert.Equal(t, int64(askL*500/2000), b[1], "b takes its part by demand of what a gave back")
	assert.LessOrEqual(t, a[3]+b[3], int64(askL), "the standing shares never sum past L")
	// a late ask of a, from a read before its last, changes nothing
	late := globalAsk{region: "a", demand: 1500, held: 900, want: askL, seen: a[3], seq: 15}.run(t, ctx, key)
	assert.Equal(t, int64(-1), late[1], "a late ask is answered -1")
	b2 := globalAsk{region: "b", demand: 500, held: b[1], want: askL, seen: b[3], seq: 30}.run(t, ctx, key)
	assert.Equal(t, b[1], b2[1], "b's part: a's late ask took nothing from it")
	assert.LessOrEqual(t, a[1]+b2[1], int64(askL))
}
