package hybrid_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/hybrid"
	"github.com/hybridlimit/hybridlimit/internal/clocktest"
	"github.com/hybridlimit/hybridlimit/internal/redistest"
	"github.com/hybridlimit/hybridlimit/syncer"
)

// TestWindowLeaseLayout: a window rule's lease state is one string at part
// m (lease_window.lua). A state of the earlier layout, a hash at m and a
// hash per window slot at w0, w1, w2, starts afresh under a new epoch,
// without an error, and its keys are deleted: the key then runs as a new key
// does. (Read as it is, it would say another node holds the whole window.)
func TestWindowLeaseLayout(t *testing.T) {
	const L, W = 100, time.Second
	client := redistest.Client(t, redistest.Addr(t))
	ks := syncer.Keyspace{Prefix: redistest.Prefix(t)}
	clk := clocktest.New(epoch2030.Add(100 * time.Millisecond))
	ctx := context.Background()
	l := newNode(t, nodeConfig(client, ks.Prefix, clk, "a", 1))
	r := mustRegister(t, l, hybrid.Rule{Name: "r", Limit: fixed(L, W)}, hybrid.Hybrid)

	// The rule's fingerprint, from a key of today's layout.
	_, err := l.Allow(ctx, r, "warm")
	require.NoError(t, err)
	syncOK(t, l, clk)
	fp := redistest.WindowLease(t, client, redisKeyBase(ks, "r", "warm")+"m")["m"]["fp"]
	require.NotEmpty(t, fp)

	base := redisKeyBase(ks, "r", "k")
	clk.Add(time.Millisecond)
	start := clk.Micros()
	us := func(t int64) string { return strconv.FormatInt(t, 10) }
	wt := start - start%W.Microseconds()
	require.NoError(t, client.HSet(ctx, base+"m", "ep", us(start-time.Hour.Microseconds()), "fp", fp,
		"d.z", "1000", "t.z", us(start)).Err())
	slot := base + "w" + us((wt/W.Microseconds())%3)
	require.NoError(t, client.HSet(ctx, slot, "id", us(wt), "R", us(L), "g.z", us(L), "u.z", "0").Err())
	for _, k := range []string{base + "m", slot} {
		require.NoError(t, client.Expire(ctx, k, time.Hour).Err())
	}

	decidesAsNew(t, l, r, clk, "k", "new")
	typ, err := client.Type(ctx, base+"m").Result()
	require.NoError(t, err)
	assert.Equal(t, "string", typ)
	n, err := client.Exists(ctx, base+"w0", base+"w1", base+"w2").Result()
	require.NoError(t, err)
	assert.Zero(t, n, "the earlier layout's slot keys are gone")
	got := redistest.WindowLease(t, client, base+"m")
	assert.Equal(t, redistest.WindowLease(t, client, redisKeyBase(ks, "r", "new")+"m"), got,
		"the state of the earlier layout's key is a new key's")
	assert.Equal(t, us(start), got["m"]["ep"], "a new epoch, the time of the first exchange")
	assert.NotContains(t, got["m"], "d.z", "the earlier layout's nodes are gone")
}
