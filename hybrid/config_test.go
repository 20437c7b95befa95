package hybrid_test

import (
	"context"
	tracenoop "go.opentelemetry.io/otel/trace/noop"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/sdk/metric"

	"github.com/hybridlimit/hybridlimit/hybrid"
	"github.com/hybridlimit/hybridlimit/internal/clocktest"
	"github.com/hybridlimit/hybridlimit/internal/leakcheck"
	"github.com/hybridlimit/hybridlimit/internal/redistest"
)

// TestConfigWithDefaults: the zero fields take the documented defaults, the
// set ones are kept, and the receiver is not changed.
func TestConfigWithDefaults(t *testing.T) {
	var zero hybrid.Config
	got := zero.WithDefaults()
	assert.Equal(t, hybrid.Config{}, zero, "WithDefaults changed its receiver")
	assert.Equal(t, hybrid.Local, got.Mode, "Mode without Redis")
	assert.Equal(t, hybrid.DefaultPolicy, got.Policy)
	assert.Equal(t, hybrid.FailLocal, got.Policy)
	assert.Equal(t, hybrid.DefaultTimeout, got.Timeout)
	assert.NotNil(t, got.Logger)
	assert.NotNil(t, got.MeterProvider)
	assert.NotNil(t, got.TracerProvider)
	assert.Nil(t, got.Clock, "New starts its own clock")
	assert.Equal(t, hybrid.SyncConfig{}.WithDefaults(), got.Sync, "Sync's defaults")
	assert.Equal(t, 100*time.Millisecond, got.Sync.Interval)

	client := redistest.Client(t, redistest.Addr(t))
	got = hybrid.Config{Redis: client}.WithDefaults()
	assert.Equal(t, hybrid.Hybrid, got.Mode, "Mode with Redis")

	mp := metric.NewMeterProvider()
	set := hybrid.Config{Mode: hybrid.Central, Policy: hybrid.FailClosed, Timeout: time.Second, Logger: quiet, MeterProvider: mp,
		TracerProvider: tracenoop.NewTracerProvider(), Sync: hybrid.SyncConfig{}.WithDefaults()}
	got = set.WithDefaults()
	assert.Equal(t, set, got, "WithDefaults changed a field that was set")
}

// TestNewValidatesWithoutRedis: a bad field is reported, naming it, before
// anything is built, Redis or not.
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
		{"Sync.Epsilon above 1", hybrid.Config{Sync: hybrid.SyncConfig{Epsilon: 2}}, "Epsilon"},
		{"bad Sync.NodeID", hybrid.Config{Sync: hybrid.SyncConfig{NodeID: "a b"}}, "NodeID"},
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
	lim := hybrid.MustLimit(hybrid.Params{Algorithm: hybrid.FixedWindow, Limit: 1 << 40, Window: time.Hour})
	ctx := context.Background()
	for _, m := range []hybrid.Mode{hybrid.Local, hybrid.Hybrid} {
		t.Run(m.String(), func(t *testing.T) {
			r := mustRegister(t, l, hybrid.Rule{Name: "allocs-" + m.String(), Limit: lim, Mode: m}, m)
			l.Allow(ctx, r, "k")
			syncOK(t, l, clk)
			d, err := l.Allow(ctx, r, "k")
			require.NoError(t, err)
			require.Equal(t, hybrid.ReasonOK, d.Reason(), "the key holds no lease")
			allocs := testing.AllocsPerRun(100, func() { l.Allow(ctx, r, "k") })
			assert.Zero(t, allocs)
		})
	}
}
