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
// x (1 s), what it holds and wants there, its standing share held, the
// time of the read it comes from (seq), whether what it holds is its
// opening, and the regions it counts.
type globalAsk struct {
	region                   string
	demand, held, want, seen int64
	seq                      int64
	opening                  bool
	regions                  int64
	after                    int64 // µs after the usual time of the asks
}

const (
	askL      = 1000
	askW      = 1_000_000
	askWindow = 1_900_000_000 * askW
	askFP     = "1:1000:1000000:0:0:0:0:0:0:0"
)

// run runs a, at time askWindow + 100 ms, and returns its answer: {now,
// part, part next, standing share, left, short, excess, announce}.
func (a globalAsk) run(t *testing.T, ctx context.Context, key string) []int64 {
	t.Helper()
	c := redistest.Client(t, redistest.Addr(t))
	args := []any{fmt.Sprint(askWindow + 100_000 + a.after), a.region, askFP, appendNumbers(nil, a.demand, askWindow, a.held, a.held, a.want,
		askWindow+askW, 0, 0, a.seen, 1, 300_000_000, 200_000, a.seq, int64(boolFlag(a.opening)), a.regions, 1)}
	v, err := scriptGlobal.Run(ctx, c, []string{key}, args...).Int64Slice()
	require.NoError(t, err)
	require.Len(t, v, 8)
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

// TestGlobalOpening: a new key opens in each region at L ÷ regions before
// its first answer; in the key's first moments the store keeps that much
// for each region yet to ask, so the first to ask is never granted what
// the others admitted, and the part stays open (not final) while it keeps
// it. A key the store has known longer than that is not kept for a
// region that opens it late: the store records what it admitted.
func TestGlobalOpening(t *testing.T) {
	ctx := context.Background()
	key := redistest.Prefix(t) + ":{k}:m:g"
	o := int64(askL / 3)
	a := globalAsk{region: "a", demand: 1000, held: o, want: askL, seq: 10, opening: true, regions: 3}.run(t, ctx, key)
	assert.Equal(t, askL-2*o, a[1], "a is granted all but the openings kept for b and c")
	assert.GreaterOrEqual(t, a[6], 2*o, "the openings kept may come back: a's part is not final")
	assert.Equal(t, int64(1), a[7], "a key born is announced")
	b := globalAsk{region: "b", demand: 1000, held: o, want: askL, seq: 10, opening: true, regions: 3}.run(t, ctx, key)
	c := globalAsk{region: "c", demand: 1000, held: o, want: askL, seq: 10, opening: true, regions: 3}.run(t, ctx, key)
	assert.GreaterOrEqual(t, b[1], o, "b holds its opening")
	assert.Zero(t, b[7], "announced once, not at every ask")
	assert.GreaterOrEqual(t, c[1], o, "c holds its opening")
	assert.LessOrEqual(t, a[1]+b[1]+c[1], int64(askL), "the parts never sum past L")

	// A fourth region opens the key once the store's first moments (1 µs
	// here, as long as a restarted store stays young): nothing was kept for it, and the store records what
	// it may have admitted, past L, and tells it nothing is left.
	d := globalAsk{region: "d", demand: 1000, held: o, want: askL, seq: 10, opening: true, regions: 3, after: 1000}.run(t, ctx, key)
	assert.Equal(t, o, d[1], "d holds its opening, as debt")
	assert.Negative(t, d[4], "nothing is left")

	// Held beyond an opening on a key new to the store: the store lost
	// the key, and grants nothing beyond what the regions hold while it
	// hears from them.
	lost := redistest.Prefix(t) + ":{lost}:m:g"
	a = globalAsk{region: "a", demand: 1000, held: 500, want: askL, seq: 10, regions: 3}.run(t, ctx, lost)
	assert.Equal(t, int64(500), a[1], "a young state grants nothing more")
}
