package syncer

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/internal/redistest"
)

// TestBirths: a key announced is read once by each reader, from its last
// read on; a side written for it does not replace one the region holds,
// and lasts as long again.
func TestBirths(t *testing.T) {
	ctx := context.Background()
	c := redistest.Client(t, redistest.Addr(t))
	born := redistest.Prefix(t) + ":born"
	keep := time.Minute.Microseconds()
	read := func(since int64, announce ...any) (int64, []any) {
		t.Helper()
		v, err := scriptBirths.Run(ctx, c, []string{born}, append([]any{since, keep}, announce...)...).Slice()
		require.NoError(t, err)
		require.Len(t, v, 2)
		return v[0].(int64), v[1].([]any)
	}
	now, keys := read(0, "a:m", "b:m")
	assert.ElementsMatch(t, []any{"a:m", "b:m"}, keys, "a first read has every key announced within keep")
	now, keys = read(now)
	assert.Empty(t, keys, "nothing new since")
	_, keys = read(now, "c:m")
	assert.Equal(t, []any{"c:m"}, keys, "a key announced since")
	ttl, err := c.PTTL(ctx, born).Result()
	require.NoError(t, err)
	assert.Greater(t, ttl, time.Duration(0), "the births expire")

	side := redistest.Prefix(t) + ":{k}:g"
	require.NoError(t, scriptSide.Run(ctx, c, []string{side}, 5000).Err())
	v, err := c.Get(ctx, side).Result()
	require.NoError(t, err)
	empty := v
	require.NoError(t, c.Set(ctx, side, "held", time.Second).Err())
	require.NoError(t, scriptSide.Run(ctx, c, []string{side}, 60_000).Err())
	v, err = c.Get(ctx, side).Result()
	require.NoError(t, err)
	assert.Equal(t, "held", v, "a side the region holds keeps its share")
	assert.NotEqual(t, empty, v)
	ttl, err = c.PTTL(ctx, side).Result()
	require.NoError(t, err)
	assert.Greater(t, ttl, 30*time.Second, "and lasts as long again")
}
