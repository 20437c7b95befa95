package hybrid_test

import (
	"context"
	"encoding/binary"
	"math"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/hybrid"
	"github.com/hybridlimit/hybridlimit/internal/clocktest"
	"github.com/hybridlimit/hybridlimit/internal/redistest"
	"github.com/hybridlimit/hybridlimit/local"
	"github.com/hybridlimit/hybridlimit/syncer"
)

// doubles reads v as little-endian doubles, as lease_bucket.lua packs them.
func doubles(t *testing.T, v string) []float64 {
	t.Helper()
	require.Zero(t, len(v)%8, "%q is not a whole number of doubles", v)
	out := make([]float64, len(v)/8)
	for i := range out {
		out[i] = math.Float64frombits(binary.LittleEndian.Uint64([]byte(v[8*i:])))
	}
	return out
}

// TestBucketLeaseLayout: a bucket rule's lease state is a hash of the
// rule's fingerprint fp, the epoch and pool h, and one field n.<node> per
// node, of packed numbers. A hash of the earlier layout, text fields per
// node (ep, pt, l.<node>...), starts afresh under a new epoch, without an
// error: its key then runs as a new key does. (Read as it is, it would say
// another node holds the whole rate and burst and the pool is empty.)
func TestBucketLeaseLayout(t *testing.T) {
	client := redistest.Client(t, redistest.Addr(t))
	prefix := redistest.Prefix(t)
	ks := syncer.Keyspace{Prefix: prefix}
	clk := clocktest.New(epoch2030.Add(100 * time.Millisecond))
	ctx := context.Background()
	lim := local.Limit{Algorithm: local.GCRA, Quota: 100, Window: time.Second, Burst: 10}
	l := newNode(t, nodeConfig(client, prefix, clk, "a", 1))
	r := mustRegister(t, l, hybrid.Rule{Name: "r", Limit: lim}, hybrid.Hybrid)

	// The rule's fingerprint, from a key of today's layout.
	_, err := l.Allow(ctx, r, "warm")
	require.NoError(t, err)
	syncOK(t, l, clk)
	fp, err := client.HGet(ctx, redisKeyBase(ks, "r", "warm")+"s", "fp").Result()
	require.NoError(t, err)

	name, fresh := redisKeyBase(ks, "r", "k")+"s", redisKeyBase(ks, "r", "new")+"s"
	clk.Add(time.Millisecond)
	start := clk.Micros()
	us := func(t int64) string { return strconv.FormatInt(t, 10) }
	require.NoError(t, client.HSet(ctx, name, "ep", us(start-time.Second.Microseconds()), "fp", fp,
		"pt", "0", "pr", "0", "pn", us(start), "l.z", "100", "b.z", "10", "x.z", us(start+time.Hour.Microseconds()),
		"d.z", "1000", "t.z", us(start), "q.z", "7").Err())
	require.NoError(t, client.Expire(ctx, name, time.Hour).Err())

	decidesAsNew(t, l, r, clk, "k", "new")
	h, err := client.HGetAll(ctx, name).Result()
	require.NoError(t, err)
	want, err := client.HGetAll(ctx, fresh).Result()
	require.NoError(t, err)
	assert.Equal(t, want, h, "the state of the earlier layout's key is a new key's")
	fields := make([]string, 0, len(h))
	for f := range h {
		fields = append(fields, f)
	}
	slices.Sort(fields)
	require.Equal(t, []string{"fp", "h", "n.a"}, fields, "the earlier layout's fields are gone")
	assert.Equal(t, fp, h["fp"])
	pool := doubles(t, h["h"]) // ep, pt, pr, pn
	require.Len(t, pool, 4)
	assert.Equal(t, float64(start), pool[0], "a new epoch, the time of the first exchange")
	node := doubles(t, h["n.a"]) // l, b, x, d, t, q (and ol, ob, ox while it holds one)
	require.Contains(t, []int{6, 9}, len(node))
	assert.Equal(t, pool[3], node[4], "the node's demand reported at the last exchange")
}
