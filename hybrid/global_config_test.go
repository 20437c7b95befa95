package hybrid_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/hybrid"
	"github.com/hybridlimit/hybridlimit/internal/leakcheck"
	"github.com/hybridlimit/hybridlimit/internal/redistest"
	"github.com/hybridlimit/hybridlimit/syncer"
)

// requireConfigError checks that New refuses cfg, building nothing, with an
// error wrapping ErrInvalidConfig that names field and says why.
func requireConfigError(t *testing.T, cfg hybrid.Config, field, reason string) {
	t.Helper()
	leakcheck.Check(t)
	cfg.Logger = quiet
	l, err := hybrid.New(cfg)
	require.Error(t, err)
	assert.Nil(t, l)
	assert.ErrorIs(t, err, hybrid.ErrInvalidConfig)
	assert.Contains(t, err.Error(), ": "+field+" ", "the message names the field")
	assert.Contains(t, err.Error(), reason)
}

// TestGlobalConfigErrors: New refuses a Region without Global, a Global
// without the region's own Redis, and a Region no region may be named.
func TestGlobalConfigErrors(t *testing.T) {
	t.Run("Region without Global", func(t *testing.T) {
		requireConfigError(t, hybrid.Config{Region: "eu-west"}, "Region", "needs Global")
	})
	addr := redistest.Addr(t)
	global := redistest.Client(t, addr)
	t.Run("Global without Redis", func(t *testing.T) {
		requireConfigError(t, hybrid.Config{Global: global, Region: "eu-west"}, "Global", "needs Redis")
	})
	for name, region := range map[string]string{
		"no Region": "",
		"space":     "eu west",
		"brace":     "eu{west}",
		"slash":     "eu/west",
		"65 bytes":  strings.Repeat("r", 65),
		"not ASCII": "région",
		"newline":   "eu-west\n",
	} {
		t.Run("Region "+name, func(t *testing.T) {
			cfg := hybrid.Config{Redis: redistest.Client(t, addr), Global: global, Region: region}
			requireConfigError(t, cfg, "Region", "must be 1 to 64 bytes of letters, digits and -_.:")
		})
	}
	t.Run("64 bytes", func(t *testing.T) {
		leakcheck.Check(t)
		newNode(t, hybrid.Config{
			Redis: redistest.Client(t, addr), Global: global, Region: strings.Repeat("r", 64),
			Keyspace: syncer.Keyspace{Prefix: redistest.Prefix(t)}, Logger: quiet,
		})
	})
}

// globalLimit is a limit a rule of global reach may have.
var globalLimit = hybrid.Limit{Algorithm: hybrid.FixedWindow, Quota: 100, Window: time.Minute}

// TestGlobalRegisterErrors: Register refuses a rule of global reach on a
// Limiter without Config.Global, in a mode other than Hybrid, or for an
// algorithm other than the fixed window, with an error wrapping
// ErrInvalidRule that names the rule and what it needs.
func TestGlobalRegisterErrors(t *testing.T) {
	t.Run("no Config.Global, no Redis", func(t *testing.T) {
		l := newNode(t, hybrid.Config{Logger: quiet})
		_, err := l.Register(hybrid.Rule{Name: "g", Limit: globalLimit, Global: true})
		require.ErrorIs(t, err, hybrid.ErrInvalidRule)
		assert.Contains(t, err.Error(), `rule "g": Global needs Config.Global`)
		assert.Zero(t, l.Stats().Rules)
	})
	addr := redistest.Addr(t)
	t.Run("no Config.Global", func(t *testing.T) {
		l := newNode(t, hybrid.Config{Redis: redistest.Client(t, addr), Keyspace: syncer.Keyspace{Prefix: redistest.Prefix(t)}, Logger: quiet})
		_, err := l.Register(hybrid.Rule{Name: "g", Limit: globalLimit, Mode: hybrid.Hybrid, Global: true})
		require.ErrorIs(t, err, hybrid.ErrInvalidRule)
		assert.Contains(t, err.Error(), `rule "g": Global needs Config.Global`)
	})
	l := newNode(t, hybrid.Config{
		Redis: redistest.Client(t, addr), Global: redistest.Client(t, addr), Region: "eu-west",
		Keyspace: syncer.Keyspace{Prefix: redistest.Prefix(t)}, Logger: quiet,
	})
	for _, tc := range []struct {
		name   string
		rule   hybrid.Rule
		reason string
	}{
		{"central", hybrid.Rule{Mode: hybrid.Central}, "Global needs Mode hybrid, not central"},
		{"local", hybrid.Rule{Mode: hybrid.Local}, "Global needs Mode hybrid, not local"},
		{"gcra", hybrid.Rule{Limit: hybrid.Limit{Algorithm: hybrid.GCRA, Quota: 10, Window: time.Second}}, "Global needs the fixed window, not gcra"},
		{"sliding window counter", hybrid.Rule{Limit: hybrid.Limit{Algorithm: hybrid.SlidingWindowCounter, Quota: 10, Window: time.Second}}, "Global needs the fixed window, not sliding_window_counter"},
		{"sub-window counter", hybrid.Rule{Limit: hybrid.Limit{Algorithm: hybrid.SubWindowCounter, Quota: 10, Window: time.Second}}, "Global needs the fixed window, not sub_window_counter"},
		{"sliding window log", hybrid.Rule{Limit: hybrid.Limit{Algorithm: hybrid.SlidingWindowLog, Quota: 10, Window: time.Second}}, "Global needs the fixed window, not sliding_window_log"},
		{"token bucket", hybrid.Rule{Limit: hybrid.Limit{Algorithm: hybrid.TokenBucket, Quota: 10, Window: time.Second}}, "Global needs the fixed window, not token_bucket"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := tc.rule
			r.Name, r.Global = "g-"+strings.ReplaceAll(tc.name, " ", "-"), true
			if r.Limit == (hybrid.Limit{}) {
				r.Limit = globalLimit
			}
			_, err := l.Register(r)
			require.ErrorIs(t, err, hybrid.ErrInvalidRule)
			assert.Contains(t, err.Error(), `rule "`+r.Name+`": `+tc.reason)
		})
	}
	assert.Zero(t, l.Stats().Rules, "nothing registered")
}

// TestGlobalRegister: a rule of global reach registers on a Limiter with
// Config.Global, in Hybrid mode by default; its Wait defaults to
// WaitInFlight, and a rule of the same name must have the same reach.
func TestGlobalRegister(t *testing.T) {
	addr := redistest.Addr(t)
	l := newNode(t, hybrid.Config{
		Redis: redistest.Client(t, addr), Global: redistest.Client(t, addr), Region: "eu-west",
		Keyspace: syncer.Keyspace{Prefix: redistest.Prefix(t)}, Logger: quiet,
	})
	g := mustRegister(t, l, hybrid.Rule{Name: "g", Limit: globalLimit, Global: true}, hybrid.Hybrid)
	assert.True(t, g.Global)

	same, err := l.Register(hybrid.Rule{Name: "g", Limit: globalLimit, Global: true, Wait: hybrid.WaitInFlight})
	require.NoError(t, err, "the default Wait is WaitInFlight")
	assert.True(t, same.Global)
	for name, r := range map[string]hybrid.Rule{
		"WaitNever":  {Name: "g", Limit: globalLimit, Global: true, Wait: hybrid.WaitNever},
		"not global": {Name: "g", Limit: globalLimit},
	} {
		_, err := l.Register(r)
		require.ErrorIs(t, err, hybrid.ErrInvalidRule, name)
		assert.Contains(t, err.Error(), "Wait or reach", name)
	}
	mustRegister(t, l, hybrid.Rule{Name: "regional", Limit: globalLimit}, hybrid.Hybrid)
	assert.Equal(t, 2, l.Stats().Rules)
}

// TestGlobalSetLimit: a rule of global reach keeps its reach through
// SetLimit: its keys are still leased from the region's part (listed in
// the region's set for its exchanger), and a limit of another algorithm is
// refused.
func TestGlobalSetLimit(t *testing.T) {
	addr := redistest.Addr(t)
	c := redistest.Client(t, addr)
	prefix := redistest.Prefix(t)
	l := newNode(t, hybrid.Config{
		Redis: c, Global: redistest.Client(t, addr), Region: "eu-west",
		Keyspace: syncer.Keyspace{Prefix: prefix}, Logger: quiet,
	})
	g := mustRegister(t, l, hybrid.Rule{Name: "g", Limit: globalLimit, Global: true}, hybrid.Hybrid)
	counter := hybrid.Limit{Algorithm: hybrid.SlidingWindowCounter, Quota: 100, Window: time.Minute}
	require.ErrorIs(t, l.SetLimit(g, counter), hybrid.ErrInvalidRule, "a global rule keeps the fixed window")
	raised := globalLimit
	raised.Quota = 200
	require.NoError(t, l.SetLimit(g, raised))
	set := prefix + ":{region}:active"
	require.Eventually(t, func() bool {
		l.Allow(context.Background(), g, "after")
		return c.ZCard(context.Background(), set).Val() > 0
	}, 5*time.Second, 20*time.Millisecond, "the key is leased as one of global reach: listed in the region's set")
}
