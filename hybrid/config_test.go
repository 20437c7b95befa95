package hybrid_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/hybrid"
	"github.com/hybridlimit/hybridlimit/internal/clocktest"
	"github.com/hybridlimit/hybridlimit/internal/leakcheck"
	"github.com/hybridlimit/hybridlimit/internal/redistest"
	"github.com/hybridlimit/hybridlimit/local"
)

// TestNewValidatesWithoutRedis: a bad field is reported, naming it, before
// anything is built, without Redis. (Sync is checked when the syncer starts,
// with Redis: TestNewInvalidConfig.)
func TestNewValidatesWithoutRedis(t *testing.T) {
	cases := []struct {
		name  string
		cfg   hybrid.Config
		field string
	}{
		{"negative Timeout", hybrid.Config{Timeout: -time.Second}, "Timeout"},
		{"negative MaxKeys", hybrid.Config{MaxKeys: -1}, "MaxKeys"},
		{"Shards above 65536", hybrid.Config{Shards: 1 << 17}, "Shards"},
		{"negative Shards", hybrid.Config{Shards: -4}, "Shards"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			leakcheck.Check(t)
			c.cfg.Logger = quiet
			l, err := hybrid.New(c.cfg)
			require.Error(t, err)
			assert.Nil(t, l)
			assert.ErrorIs(t, err, hybrid.ErrInvalidConfig)
			assert.Contains(t, err.Error(), c.field)
		})
	}
}

// TestAllowNoAllocs: a decision in Local and in Hybrid mode (holding its
// lease) allocates nothing.
func TestAllowNoAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	client := redistest.Client(t, redistest.Addr(t))
	clk := clocktest.New(epoch2030)
	l := newNode(t, nodeConfig(client, redistest.Prefix(t), clk, "a", 1))
	lim := hybrid.Limit{Algorithm: hybrid.FixedWindow, Quota: 1 << 40, Window: time.Hour}
	ctx := context.Background()
	for _, m := range []hybrid.Mode{hybrid.Local, hybrid.Hybrid} {
		t.Run(m.String(), func(t *testing.T) {
			r := mustRegister(t, l, hybrid.Rule{Name: "allocs-" + m.String(), Limit: lim, Mode: m}, m)
			l.Allow(ctx, r, "k")
			syncOK(t, l, clk)
			d, err := l.Allow(ctx, r, "k")
			require.NoError(t, err)
			require.Equal(t, local.ReasonOK, d.Reason(), "the key holds no lease")
			allocs := testing.AllocsPerRun(100, func() { l.Allow(ctx, r, "k") })
			assert.Zero(t, allocs)
		})
	}
}
