package hybrid

import (
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/metric/noop"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/hybridlimit/hybridlimit/internal/clocktest"
	"github.com/hybridlimit/hybridlimit/internal/doctable"
)

// TestDefaults holds docs/operating.md's rows for package hybrid against
// the constants and against what withDefaults fills in.
func TestDefaults(t *testing.T) {
	c := Config{}.withDefaults()
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", ContextTimeoutEnabled: true})
	t.Cleanup(func() { client.Close() })
	withRedis := Config{Redis: client}.withDefaults()
	withGossip := Config{Gossip: &GossipConfig{}}.withDefaults()
	def := func(field, constant string, value, got any) doctable.Default {
		return doctable.Default{Config: "Config", Field: field, Const: constant, Value: value, Got: got}
	}
	doctable.Check(t, doctable.Package{
		Name: "hybrid",
		Defaults: []doctable.Default{
			def("Keyspace.Prefix", "defaultPrefix", defaultPrefix, c.Keyspace.Prefix),
			{Config: "Config", Field: "Mode", Doc: "Local; Hybrid with Redis", Got: c.Mode},
			{Config: "Config", Field: "Policy", Const: "defaultPolicy", Value: defaultPolicy, Doc: "FailLocal; Gossip with Config.Gossip", Got: c.Policy},
			{Config: "Config", Field: "Gossip.Logger", Doc: "Logger", Got: withGossip.Gossip.Logger},
			{Config: "Config", Field: "Clock", Const: "defaultResolution", Value: defaultResolution, Doc: "a coarse clock of 1ms that New starts and Shutdown stops", Got: c.Clock, Built: true},
			def("Shards", "defaultShards", defaultShards, c.Shards),
			def("MaxKeys", "defaultMaxKeys", defaultMaxKeys, c.MaxKeys),
			def("Timeout", "defaultTimeout", defaultTimeout, c.Timeout),
			{Config: "Config", Field: "MeterProvider", Doc: "otel.GetMeterProvider()", Got: c.MeterProvider},
			{Config: "Config", Field: "TracerProvider", Doc: "otel.GetTracerProvider()", Got: c.TracerProvider},
			{Config: "Config", Field: "Logger", Doc: "slog.Default()", Got: c.Logger},
		},
		Bounds: []doctable.Bound{
			{What: "Config.Shards", Const: "maxShards", Value: maxShards, Doc: "65,536, a power of two"},
		},
		Filled: []doctable.Filled{
			{Config: "Config", Zero: Config{}, With: c},
			{Config: "Config", Zero: Config{Redis: client}, With: withRedis},
		},
	})
	assert.Equal(t, Local, c.Mode, "Mode without Redis")
	assert.Equal(t, Hybrid, withRedis.Mode, "Mode with Redis")
	assert.Equal(t, Gossip, withGossip.Policy, "Policy with Gossip")
	assert.Equal(t, otel.GetMeterProvider(), c.MeterProvider)
	assert.Equal(t, otel.GetTracerProvider(), c.TracerProvider)
	assert.Same(t, slog.Default(), c.Logger)
	assert.Same(t, c.Logger, withGossip.Gossip.Logger, "Gossip logs to Logger")
	assert.Equal(t, SyncConfig{}, c.Sync, "Sync's defaults are package syncer's, filled in when New starts the syncer")
}

// TestConfigValidate: withDefaults changes neither its receiver nor a field
// that is set, and validate names the bad field in the package's form,
// building nothing.
func TestConfigValidate(t *testing.T) {
	quiet := slog.New(slog.DiscardHandler)
	g := &GossipConfig{Insecure: true}
	set := Config{
		Keyspace: Keyspace{Prefix: "p"}, Mode: Local, Policy: FailClosed, Gossip: &GossipConfig{Logger: quiet},
		Clock: clocktest.Wall{}, Shards: 8, MaxKeys: 10, Timeout: time.Second, MeterProvider: noop.NewMeterProvider(),
		TracerProvider: tracenoop.NewTracerProvider(), Logger: quiet, Sync: SyncConfig{Interval: time.Second},
	}
	assert.Equal(t, set, set.withDefaults(), "withDefaults changed a field that was set")
	in := Config{Gossip: g}
	out := in.withDefaults()
	assert.Nil(t, g.Logger, "withDefaults changed the caller's Gossip")
	assert.NotSame(t, g, out.Gossip)
	require.NoError(t, out.validate())
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{Mode: Mode(9)}, "hybrid: invalid config: Mode 9: unknown"},
		{Config{Mode: Hybrid}, "hybrid: invalid config: Mode hybrid: needs Redis"},
		{Config{RequireRedis: true}, "hybrid: invalid config: RequireRedis true: needs Redis"},
		{Config{Policy: Policy(9)}, "hybrid: invalid config: Policy 9: unknown"},
		{Config{Timeout: -time.Second}, "hybrid: invalid config: Timeout -1s: must be positive"},
		{Config{Shards: 3}, "hybrid: invalid config: Shards 3: must be a power of two from 1 to 65536"},
		{Config{MaxKeys: -1}, "hybrid: invalid config: MaxKeys -1: must be positive"},
	} {
		err := tc.cfg.withDefaults().validate()
		assert.True(t, errors.Is(err, ErrInvalidConfig), "%v", err)
		assert.EqualError(t, err, tc.want)
	}
}
