package syncer

import (
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/internal/doctable"
)

// TestDefaults holds docs/operating.md's rows for package syncer against
// the constants and against what withDefaults fills in: CentralConfig's,
// and hybrid.SyncConfig's (the Tuning of a syncConfig), whose defaults this
// package fills in.
func TestDefaults(t *testing.T) {
	cc := CentralConfig{}.withDefaults()
	sc := syncConfig{}.withDefaults()
	central := func(field, constant string, value, got any) doctable.Default {
		return doctable.Default{Config: "CentralConfig", Field: field, Const: constant, Value: value, Got: got}
	}
	sync := func(field, constant string, value any, doc string, got any) doctable.Default {
		return doctable.Default{Config: "hybrid.SyncConfig", Field: field, Const: constant, Value: value, Doc: doc, Got: got}
	}
	doctable.Check(t, doctable.Package{
		Name: "syncer",
		Defaults: []doctable.Default{
			central("Keyspace.Prefix", "defaultPrefix", defaultPrefix, cc.Keyspace.Prefix),
			central("Timeout", "defaultTimeout", defaultTimeout, cc.Timeout),
			{Config: "hybrid.SyncConfig", Field: "NodeID", Doc: "64 random bits, drawn by New", Got: sc.NodeID, Built: true},
			sync("Interval", "defaultInterval", defaultInterval, "", sc.Interval),
			sync("Horizon", "defaultHorizonIntervals", defaultHorizonIntervals, "2 × Interval (200ms)", sc.Horizon),
			sync("MinGap", "defaultMinGapsPerInterval", defaultMinGapsPerInterval, "Interval ÷ 10 (10ms)", sc.MinGap),
			sync("FirstGap", "defaultFirstGapsPerMinGap", defaultFirstGapsPerMinGap, "MinGap ÷ 10 (1ms)", sc.FirstGap),
			sync("PaceGap", "defaultPaceGapsPerMinGap", defaultPaceGapsPerMinGap, "MinGap ÷ 5 (2ms)", sc.PaceGap),
			sync("LeaseTTL", "defaultLeaseTTLIntervals", defaultLeaseTTLIntervals, "5 × Interval (500ms)", sc.LeaseTTL),
			sync("DemandTTL", "defaultDemandTTLIntervals", defaultDemandTTLIntervals, "5 × Interval (500ms)", sc.DemandTTL),
			sync("IdleRelease", "defaultIdleReleaseIntervals", defaultIdleReleaseIntervals, "3 × Interval (300ms)", sc.IdleRelease),
			sync("Safety", "", nil, "MinGap (10ms)", sc.Safety),
			sync("Epsilon", "defaultEpsilon", defaultEpsilon, "", sc.Epsilon),
			sync("Batch", "defaultBatch", defaultBatch, "", sc.Batch),
			sync("Timeout", "", nil, "Interval (100ms)", sc.Timeout),
		},
		Bounds: []doctable.Bound{
			{What: "rule name, hybrid.SyncConfig.NodeID", Const: "maxRuleName", Value: maxRuleName, Doc: "128 bytes"},
			{What: "hybrid.SyncConfig.Interval, at least", Const: "minInterval", Value: minInterval, Doc: "1ms"},
		},
		Filled: []doctable.Filled{
			{Config: "CentralConfig", Zero: CentralConfig{}, With: cc},
			{Config: "hybrid.SyncConfig", Zero: Tuning{}, With: sc.Tuning},
		},
	})

	// The durations follow Interval when it is set.
	set := syncConfig{Tuning: Tuning{Interval: time.Second}}.withDefaults()
	assert.Equal(t, 2*time.Second, set.Horizon)
	assert.Equal(t, 100*time.Millisecond, set.MinGap)
	assert.Equal(t, 100*time.Millisecond, set.Safety)
	assert.Equal(t, 10*time.Millisecond, set.FirstGap)
	assert.Equal(t, 20*time.Millisecond, set.PaceGap)
	assert.Equal(t, time.Second, set.Timeout)
}

// client is a client that validates: New makes no connection.
func client(t *testing.T) redis.UniversalClient {
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", ContextTimeoutEnabled: true})
	t.Cleanup(func() { c.Close() })
	return c
}

// TestSyncConfigValidate: withDefaults changes no field that is set, and a
// bad value is an error wrapping ErrInvalidConfig, in the package's form,
// naming the field and the range it must be in.
func TestSyncConfigValidate(t *testing.T) {
	c := client(t)
	set := syncConfig{
		Client: c, Keyspace: Keyspace{Prefix: "p"}, Tuning: Tuning{
			NodeID: "n", Interval: time.Second, Horizon: time.Second, MinGap: time.Second, FirstGap: time.Second,
			PaceGap: time.Second, LeaseTTL: 3 * time.Second, DemandTTL: time.Second, IdleRelease: time.Second,
			Safety: time.Second, Epsilon: 1, Nodes: 2, Batch: 1, Timeout: time.Second,
		},
	}
	assert.Equal(t, set, set.withDefaults(), "withDefaults changed a field that was set")
	require.NoError(t, set.validate())
	require.NoError(t, syncConfig{Client: c}.withDefaults().validate())
	bare := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	t.Cleanup(func() { bare.Close() })
	for _, tc := range []struct {
		name string
		cfg  syncConfig
		want string
	}{
		{"no client", syncConfig{}, "syncer: invalid config: Client <nil>: required"},
		{"client without context timeouts", syncConfig{Client: bare}, "syncer: invalid config: Client *redis.Client: set ContextTimeoutEnabled in its options, or deadlines will not bound syncs"},
		{"braces in the prefix", syncConfig{Client: c, Keyspace: Keyspace{Prefix: "a{b}"}}, `syncer: invalid config: Keyspace.Prefix "a{b}": must not contain '{' or '}'`},
		{"negative Interval", syncConfig{Client: c, Tuning: Tuning{Interval: -time.Second}}, "syncer: invalid config: Interval -1s: must be positive"},
		{"short Interval", syncConfig{Client: c, Tuning: Tuning{Interval: time.Microsecond, LeaseTTL: time.Second}}, "syncer: invalid config: Interval 1µs: must be at least 1ms"},
		{"negative Safety", syncConfig{Client: c, Tuning: Tuning{Safety: -time.Second}}, "syncer: invalid config: Safety -1s: must be positive"},
		{"PaceGap above MinGap", syncConfig{Client: c, Tuning: Tuning{PaceGap: time.Second}}, "syncer: invalid config: PaceGap 1s: must not pass MinGap 10ms"},
		{"short LeaseTTL", syncConfig{Client: c, Tuning: Tuning{LeaseTTL: 200 * time.Millisecond}}, "syncer: invalid config: LeaseTTL 200ms: must be more than twice Interval, or shares expire between renewals"},
		{"negative Epsilon", syncConfig{Client: c, Tuning: Tuning{Epsilon: -0.1}}, "syncer: invalid config: Epsilon -0.1: must be in [0, 1] (0 takes the default)"},
		{"Epsilon above 1", syncConfig{Client: c, Tuning: Tuning{Epsilon: 1.5}}, "syncer: invalid config: Epsilon 1.5: must be in [0, 1] (0 takes the default)"},
		{"negative Batch", syncConfig{Client: c, Tuning: Tuning{Batch: -1}}, "syncer: invalid config: Batch -1: must be at least 1"},
		{"negative Nodes", syncConfig{Client: c, Tuning: Tuning{Nodes: -1}}, "syncer: invalid config: Nodes -1: must not be negative"},
		{"bad NodeID", syncConfig{Client: c, Tuning: Tuning{NodeID: "a b"}}, `syncer: invalid config: NodeID "a b": byte ' ' at 1: only letters, digits and -_.:/ are allowed`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := tc.cfg
			err := tc.cfg.withDefaults().validate()
			assert.True(t, errors.Is(err, ErrInvalidConfig), "%v", err)
			assert.EqualError(t, err, tc.want)
			assert.Equal(t, in, tc.cfg, "withDefaults changed its receiver")
			s, err := newSyncer(tc.cfg)
			assert.Nil(t, s)
			assert.EqualError(t, err, tc.want, "newSyncer reports what validate does")
		})
	}
}

// TestCentralConfigValidate: as TestSyncConfigValidate, for CentralConfig.
func TestCentralConfigValidate(t *testing.T) {
	c := client(t)
	set := CentralConfig{Client: c, Keyspace: Keyspace{Prefix: "p"}, Timeout: time.Second}
	assert.Equal(t, set, set.withDefaults(), "withDefaults changed a field that was set")
	require.NoError(t, set.validate())
	for _, tc := range []struct {
		cfg  CentralConfig
		want string
	}{
		{CentralConfig{}, "syncer: invalid config: Client <nil>: required"},
		{CentralConfig{Client: c, Timeout: -time.Second}, "syncer: invalid config: Timeout -1s: must be positive"},
		{CentralConfig{Client: c, Keyspace: Keyspace{Prefix: "}"}}, `syncer: invalid config: Keyspace.Prefix "}": must not contain '{' or '}'`},
	} {
		err := tc.cfg.withDefaults().validate()
		assert.True(t, errors.Is(err, ErrInvalidConfig), "%v", err)
		assert.EqualError(t, err, tc.want)
		_, err = NewCentral(tc.cfg)
		assert.EqualError(t, err, tc.want, "NewCentral reports what validate does")
	}
}
