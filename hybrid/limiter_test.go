package hybrid_test

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/hybrid"
	"github.com/hybridlimit/hybridlimit/internal/clocktest"
	"github.com/hybridlimit/hybridlimit/internal/config"
	"github.com/hybridlimit/hybridlimit/internal/hybridsim"
	"github.com/hybridlimit/hybridlimit/internal/leakcheck"
	"github.com/hybridlimit/hybridlimit/internal/redistest"
	"github.com/hybridlimit/hybridlimit/internal/syncx"
	"github.com/hybridlimit/hybridlimit/local"
	"github.com/hybridlimit/hybridlimit/syncer"
)

var quiet = slog.New(slog.DiscardHandler)

// TestNewInvalidConfig: every bad field is an error wrapping
// ErrInvalidConfig that names it.
func TestNewInvalidConfig(t *testing.T) {
	noDeadlines := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer noDeadlines.Close()
	cases := []struct {
		name  string
		redis bool // needs a client
		cfg   func(c redis.UniversalClient) hybrid.Config
		field string
	}{
		{"unknown Mode", false, func(redis.UniversalClient) hybrid.Config { return hybrid.Config{Mode: hybrid.Mode(9)} }, "Mode"},
		{"unknown Policy", false, func(redis.UniversalClient) hybrid.Config { return hybrid.Config{Policy: hybrid.Policy(9)} }, "Policy"},
		{"Central without Redis", false, func(redis.UniversalClient) hybrid.Config { return hybrid.Config{Mode: hybrid.Central} }, "Mode"},
		{"Hybrid without Redis", false, func(redis.UniversalClient) hybrid.Config { return hybrid.Config{Mode: hybrid.Hybrid} }, "Mode"},
		{"RequireRedis without Redis", false, func(redis.UniversalClient) hybrid.Config { return hybrid.Config{RequireRedis: true} }, "RequireRedis"},
		{"unknown Mode with Redis", true, func(c redis.UniversalClient) hybrid.Config {
			return hybrid.Config{Redis: c, Mode: hybrid.Mode(4)}
		}, "Mode"},
		{"Keyspace.Prefix with a brace", true, func(c redis.UniversalClient) hybrid.Config {
			return hybrid.Config{Redis: c, Keyspace: syncer.Keyspace{Prefix: "a{b"}}
		}, "Prefix"},
		{"negative Timeout", true, func(c redis.UniversalClient) hybrid.Config {
			return hybrid.Config{Redis: c, Timeout: -time.Second}
		}, "Timeout"},
		{"negative Sync.Interval", true, func(c redis.UniversalClient) hybrid.Config {
			return hybrid.Config{Redis: c, Sync: hybrid.SyncConfig{Interval: -time.Second}}
		}, "Interval"},
		{"Sync.Epsilon above 1", true, func(c redis.UniversalClient) hybrid.Config {
			return hybrid.Config{Redis: c, Sync: hybrid.SyncConfig{Epsilon: 2}}
		}, "Epsilon"},
		{"Sync.PaceGap above MinGap", true, func(c redis.UniversalClient) hybrid.Config {
			return hybrid.Config{Redis: c, Sync: hybrid.SyncConfig{MinGap: 10 * time.Millisecond, PaceGap: 11 * time.Millisecond}}
		}, "PaceGap"},
		{"negative Sync.PaceGap", true, func(c redis.UniversalClient) hybrid.Config {
			return hybrid.Config{Redis: c, Sync: hybrid.SyncConfig{PaceGap: -time.Millisecond}}
		}, "PaceGap"},
		{"bad Sync.NodeID", true, func(c redis.UniversalClient) hybrid.Config {
			return hybrid.Config{Redis: c, Sync: hybrid.SyncConfig{NodeID: "a b"}}
		}, "NodeID"},
		{"client without ContextTimeoutEnabled", true, func(redis.UniversalClient) hybrid.Config {
			return hybrid.Config{Redis: noDeadlines}
		}, "ContextTimeoutEnabled"},
		{"Shards not a power of two", false, func(redis.UniversalClient) hybrid.Config {
			return hybrid.Config{Shards: 3}
		}, "Shards"},
		{"MaxKeys negative", false, func(redis.UniversalClient) hybrid.Config {
			return hybrid.Config{MaxKeys: -1}
		}, "MaxKeys"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			leakcheck.Check(t)
			var client redis.UniversalClient
			if c.redis {
				client = redistest.Client(t, redistest.Addr(t))
			}
			cfg := c.cfg(client)
			cfg.Logger = quiet
			l, err := hybrid.New(cfg)
			if err == nil {
				l.Close()
			}
			require.Error(t, err, "New accepted it")
			assert.Nil(t, l, "New returned a Limiter with the error")
			assert.ErrorIs(t, err, hybrid.ErrInvalidConfig)
			assert.ErrorContains(t, err, c.field, "the error names the field")
		})
	}
}

// TestNewCopiesConfig: New neither changes the caller's Config nor keeps
// what the caller may change afterwards (the Keyspace's Secret).
func TestNewCopiesConfig(t *testing.T) {
	client := redistest.Client(t, redistest.Addr(t))
	prefix := redistest.Prefix(t)
	clk := clocktest.New(epoch2030.Add(100 * time.Millisecond))
	secret := []byte("secret-one")
	cfg := hybridsim.Virtual(hybrid.Config{
		Redis: client, Keyspace: syncer.Keyspace{Prefix: prefix, Secret: secret},
		Clock: clk,
		Sync:  hybrid.SyncConfig{Interval: testInterval, NodeID: "a"},
	})
	before := cfg
	before.Keyspace.Secret = bytes.Clone(secret)
	l := newNode(t, cfg)
	require.Equal(t, before, cfg, "New changed the Config")
	// The defaults it filled in are its own: the caller's zero fields stay
	// zero, and a second Limiter from the same value works.
	require.Equal(t, hybrid.Mode(0), cfg.Mode, "Config changed")
	require.Equal(t, hybrid.Policy(0), cfg.Policy, "Config changed")
	require.Nil(t, cfg.Logger, "Config changed")
	require.Equal(t, testInterval, cfg.Sync.Interval, "Config changed")
	// The caller overwrites the secret's bytes: the Limiter keeps the copy.
	copy(cfg.Keyspace.Secret, "XXXXXXXXXX")
	ks := syncer.Keyspace{Prefix: prefix, Secret: []byte("secret-one")}
	ctx := context.Background()
	cen := mustRegister(t, l, hybrid.Rule{Name: "c", Limit: fixed(10, time.Second), Mode: hybrid.Central}, hybrid.Central)
	hyb := mustRegister(t, l, hybrid.Rule{Name: "h", Limit: fixed(1000, time.Second)}, hybrid.Hybrid)
	_, err := l.Allow(ctx, cen, "user")
	require.NoError(t, err)
	_, err = l.Allow(ctx, hyb, "user")
	require.NoError(t, err)
	syncOK(t, l, clk)
	for _, name := range []string{redisKeyBase(ks, "c", "user") + "s", redisKeyBase(ks, "h", "user") + "m"} {
		n, err := client.Exists(ctx, name).Result()
		if assert.NoError(t, err, "EXISTS %s", name) {
			assert.Equal(t, int64(1), n, "%s exists: the Limiter keeps the secret it was given", name)
		}
	}
}

// TestRegisterInvalid: a bad rule is an error wrapping ErrInvalidRule that
// names the field.
func TestRegisterInvalid(t *testing.T) {
	noRedis, err := hybrid.New(hybrid.Config{Logger: quiet})
	require.NoError(t, err)
	defer noRedis.Close()
	ok := fixed(10, time.Second)
	cases := []struct {
		name  string
		rule  hybrid.Rule
		field string
	}{
		{"empty name", hybrid.Rule{Limit: ok}, "Name"},
		{"brace in name", hybrid.Rule{Name: "a{b}", Limit: ok}, "Name"},
		{"space in name", hybrid.Rule{Name: "a b", Limit: ok}, "Name"},
		{"non-ASCII name", hybrid.Rule{Name: "ü", Limit: ok}, "Name"},
		{"name too long", hybrid.Rule{Name: strings.Repeat("a", config.MaxRuleName+1), Limit: ok}, "Name"},
		{"zero Limit", hybrid.Rule{Name: "z"}, "Limit"},
		{"negative KeyTTL", hybrid.Rule{Name: "k", Limit: ok, KeyTTL: -time.Second}, "KeyTTL"},
		{"unknown Mode", hybrid.Rule{Name: "m", Limit: ok, Mode: hybrid.Mode(9)}, "Mode"},
		{"unknown Policy", hybrid.Rule{Name: "p", Limit: ok, Policy: hybrid.Policy(9)}, "Policy"},
		{"Central without Redis", hybrid.Rule{Name: "c", Limit: ok, Mode: hybrid.Central}, "Mode"},
		{"Hybrid without Redis", hybrid.Rule{Name: "h", Limit: ok, Mode: hybrid.Hybrid}, "Mode"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r, err := noRedis.Register(c.rule)
			require.Error(t, err, "Register accepted it: %+v", r)
			assert.Nil(t, r, "Register returned a rule with the error")
			assert.ErrorIs(t, err, hybrid.ErrInvalidRule)
			assert.ErrorContains(t, err, c.field, "the error names the field")
		})
	}
	t.Run("again", func(t *testing.T) {
		ctx := context.Background()
		r1, err := noRedis.Register(hybrid.Rule{Name: "again", Limit: fixed(3, time.Minute)})
		require.NoError(t, err)
		// The same limit: the same rule, sharing its state.
		r2, err := noRedis.Register(hybrid.Rule{Name: "again", Limit: fixed(3, time.Minute)})
		require.NoError(t, err, "the same rule again")
		for range 3 {
			d, _ := noRedis.Allow(ctx, r1, "k")
			require.True(t, d.Allowed(), "refused: %+v", d)
		}
		d, err := noRedis.Allow(ctx, r2, "k")
		assert.NoError(t, err)
		assert.False(t, d.Allowed(), "the second registration shares the first's state: %+v", d)
		// Another limit: an error naming the rule, pointing to SetLimit.
		_, err = noRedis.Register(hybrid.Rule{Name: "again", Limit: fixed(4, time.Minute)})
		assert.ErrorIs(t, err, hybrid.ErrInvalidRule, "another limit under the same name")
		assert.ErrorContains(t, err, "again", "the error names the rule")
		assert.ErrorContains(t, err, "SetLimit", "the error points to SetLimit")
	})
	t.Run("SetLimit zero", func(t *testing.T) {
		r, err := noRedis.Register(hybrid.Rule{Name: "set", Limit: ok})
		require.NoError(t, err)
		assert.ErrorIs(t, noRedis.SetLimit(r, hybrid.Limit{}), hybrid.ErrInvalidRule, "SetLimit(zero)")
	})
	t.Run("after Close", func(t *testing.T) {
		l, err := hybrid.New(hybrid.Config{Logger: quiet})
		require.NoError(t, err)
		require.NoError(t, l.Close())
		_, err = l.Register(hybrid.Rule{Name: "late", Limit: ok})
		assert.ErrorIs(t, err, hybrid.ErrClosed, "Register after Close")
	})
}

// TestRegisterModes: the mode a rule runs in, by its own Mode, the
// Limiter's, and whether its limit can be leased. Hybrid runs every
// leasable limit, however small and on however many nodes; a limit with no
// lease runs Central when Hybrid is only the default, and is refused when
// the rule asks for Hybrid.
func TestRegisterModes(t *testing.T) {
	client := redistest.Client(t, redistest.Addr(t))
	bigBucket := local.Limit{Algorithm: local.TokenBucket, Quota: 1_000_000, Window: time.Hour, Burst: 1_000_000}
	slidingLog := local.Limit{Algorithm: local.SlidingWindowLog, Quota: 1000, Window: time.Second}
	cases := []struct {
		name    string
		redis   bool
		limiter hybrid.Mode // Config.Mode
		nodes   int         // Config.Sync.Nodes
		rule    hybrid.Rule
		want    hybrid.Mode // the zero Mode: Register fails with ErrInvalidRule
	}{
		{"no Redis: local", false, hybrid.Mode(0), 0, hybrid.Rule{Limit: fixed(10, time.Second)}, hybrid.Local},
		{"Redis: hybrid", true, hybrid.Mode(0), 0, hybrid.Rule{Limit: fixed(1000, time.Second)}, hybrid.Hybrid},
		{"GCRA: hybrid", true, hybrid.Mode(0), 0, hybrid.Rule{Limit: local.Limit{Algorithm: local.GCRA, Quota: 1000, Window: time.Second}}, hybrid.Hybrid},
		{"counter: hybrid", true, hybrid.Mode(0), 0, hybrid.Rule{Limit: local.Limit{Algorithm: local.SlidingWindowCounter, Quota: 1000, Window: time.Second}}, hybrid.Hybrid},
		{"sliding log: central", true, hybrid.Mode(0), 0, hybrid.Rule{Limit: slidingLog}, hybrid.Central},
		{"asked hybrid, sliding log: error", true, hybrid.Mode(0), 0, hybrid.Rule{Mode: hybrid.Hybrid, Limit: slidingLog}, hybrid.Mode(0)},
		{"bucket past 2^51: central", true, hybrid.Mode(0), 0, hybrid.Rule{Limit: bigBucket}, hybrid.Central},
		{"asked hybrid, bucket past 2^51: error", true, hybrid.Mode(0), 0, hybrid.Rule{Mode: hybrid.Hybrid, Limit: bigBucket}, hybrid.Mode(0)},
		{"99/s, 1 node: hybrid", true, hybrid.Mode(0), 1, hybrid.Rule{Limit: fixed(99, time.Second)}, hybrid.Hybrid},
		{"100/s, 2 nodes: hybrid", true, hybrid.Mode(0), 2, hybrid.Rule{Limit: fixed(100, time.Second)}, hybrid.Hybrid},
		{"1000/min, 1 node: hybrid", true, hybrid.Mode(0), 1, hybrid.Rule{Limit: fixed(1000, time.Minute)}, hybrid.Hybrid},
		{"token bucket 10/s, 1 node: hybrid", true, hybrid.Mode(0), 1, hybrid.Rule{Limit: local.Limit{Algorithm: local.TokenBucket, Quota: 10, Window: time.Second}}, hybrid.Hybrid},
		{"GCRA 100/s burst 20, 4 nodes: hybrid", true, hybrid.Mode(0), 4, hybrid.Rule{Limit: local.Limit{Algorithm: local.GCRA, Quota: 100, Window: time.Second, Burst: 20}}, hybrid.Hybrid},
		{"leaky bucket 5/s, 8 nodes, asked hybrid: hybrid", true, hybrid.Mode(0), 8, hybrid.Rule{Mode: hybrid.Hybrid, Limit: local.Limit{Algorithm: local.LeakyBucket, Quota: 5, Window: time.Second}}, hybrid.Hybrid},
		{"counter 10/min, 10 nodes: hybrid", true, hybrid.Mode(0), 10, hybrid.Rule{Limit: local.Limit{Algorithm: local.SlidingWindowCounter, Quota: 10, Window: time.Minute}}, hybrid.Hybrid},
		{"explicit local with Redis", true, hybrid.Mode(0), 0, hybrid.Rule{Mode: hybrid.Local, Limit: fixed(1000, time.Second)}, hybrid.Local},
		{"explicit central", true, hybrid.Mode(0), 0, hybrid.Rule{Mode: hybrid.Central, Limit: fixed(1000, time.Second)}, hybrid.Central},
		{"explicit central, small limit", true, hybrid.Mode(0), 4, hybrid.Rule{Mode: hybrid.Central, Limit: fixed(5, time.Second)}, hybrid.Central},
		{"limiter default central", true, hybrid.Central, 0, hybrid.Rule{Limit: fixed(1000, time.Second)}, hybrid.Central},
		{"limiter default local", true, hybrid.Local, 0, hybrid.Rule{Limit: fixed(1000, time.Second)}, hybrid.Local},
		{"limiter default local, rule hybrid", true, hybrid.Local, 0, hybrid.Rule{Mode: hybrid.Hybrid, Limit: fixed(1000, time.Second)}, hybrid.Hybrid},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg := hybridsim.Manual(hybrid.Config{Mode: c.limiter, Logger: quiet, Sync: hybrid.SyncConfig{Interval: testInterval, Nodes: c.nodes}})
			if c.redis {
				cfg.Redis, cfg.Keyspace = client, syncer.Keyspace{Prefix: redistest.Prefix(t)}
			}
			l := newNode(t, cfg)
			c.rule.Name = "r"
			r, err := l.Register(c.rule)
			if c.want == hybrid.Mode(0) {
				require.ErrorIs(t, err, hybrid.ErrInvalidRule)
				assert.ErrorIs(t, err, syncx.ErrNotLeasable)
				assert.Contains(t, err.Error(), "Mode hybrid", "the error names the field")
				return
			}
			require.NoError(t, err)
			assert.Equal(t, c.want, r.Mode)
		})
	}
	// A central rule is exact across nodes, however small its limit: a
	// second Limiter sees the first's use at once.
	t.Run("small central limit is shared at once", func(t *testing.T) {
		prefix := redistest.Prefix(t)
		clk := clocktest.New(epoch2030.Add(100 * time.Millisecond))
		a := newNode(t, nodeConfig(client, prefix, clk, "a", 2))
		b := newNode(t, nodeConfig(client, prefix, clk, "b", 2))
		ra := mustRegister(t, a, hybrid.Rule{Name: "small", Mode: hybrid.Central, Limit: fixed(5, time.Second)}, hybrid.Central)
		rb := mustRegister(t, b, hybrid.Rule{Name: "small", Mode: hybrid.Central, Limit: fixed(5, time.Second)}, hybrid.Central)
		n, d := exhaust(t, a, ra, "k", 100)
		require.Equal(t, int64(5), n, "node a admits the limit")
		require.Equal(t, local.ReasonLimited, d.Reason())
		d, err := b.Allow(context.Background(), rb, "k")
		require.NoError(t, err)
		assert.False(t, d.Allowed(), "node b after a used the limit: %+v", d)
	})
}

// TestUnknownRule: a rule registered elsewhere, or not at all, is
// ErrUnknownRule everywhere a rule is taken.
func TestUnknownRule(t *testing.T) {
	ctx := context.Background()
	l1, err := hybrid.New(hybrid.Config{Logger: quiet})
	require.NoError(t, err)
	defer l1.Close()
	l2, err := hybrid.New(hybrid.Config{Logger: quiet})
	require.NoError(t, err)
	defer l2.Close()
	mine, err := l1.Register(hybrid.Rule{Name: "r", Limit: fixed(10, time.Second)})
	require.NoError(t, err)
	other, err := l2.Register(hybrid.Rule{Name: "r", Limit: fixed(10, time.Second)})
	require.NoError(t, err)
	copied := *mine // a copy of a registered rule is that rule
	d, err := l1.Allow(ctx, &copied, "k")
	assert.NoError(t, err, "a copy of a registered rule")
	assert.True(t, d.Allowed(), "a copy of a registered rule: %+v", d)
	for name, r := range map[string]*hybrid.Rule{
		"nil":           nil,
		"never":         {Name: "r", Limit: fixed(10, time.Second)},
		"other limiter": other,
	} {
		t.Run(name, func(t *testing.T) {
			d, err := l1.Allow(ctx, r, "k")
			assert.ErrorIs(t, err, hybrid.ErrUnknownRule, "Allow")
			assert.False(t, d.Allowed(), "Allow: %+v", d)
			d, err = l1.AllowN(ctx, r, "k", 2)
			assert.ErrorIs(t, err, hybrid.ErrUnknownRule, "AllowN")
			assert.False(t, d.Allowed(), "AllowN: %+v", d)
			assert.ErrorIs(t, l1.SetLimit(r, fixed(5, time.Second)), hybrid.ErrUnknownRule, "SetLimit")
			out := make([]local.Decision, 2)
			ok, err := l1.AllowMulti(ctx, []hybrid.Request{{Rule: mine, Key: "k", N: 1}, {Rule: r, Key: "k", N: 1}}, out)
			assert.ErrorIs(t, err, hybrid.ErrUnknownRule, "AllowMulti")
			assert.False(t, ok, "AllowMulti")
		})
	}
	// Nothing was charged by the refused AllowMulti calls: 10 − the one
	// admitted above remain.
	d, _ = l1.AllowN(ctx, mine, "k", 0)
	assert.Equal(t, int64(9), d.Remaining(), "remaining after refused multi calls")
}

// TestLifecycle: Shutdown and Close are idempotent and stop every goroutine,
// in every configuration.
func TestLifecycle(t *testing.T) {
	ctx := context.Background()
	cases := []struct {
		name  string
		redis bool
		cfg   func(c redis.UniversalClient, prefix string) hybrid.Config
		mode  hybrid.Mode
	}{
		{"no Redis, own clock", false, func(redis.UniversalClient, string) hybrid.Config { return hybrid.Config{} }, hybrid.Local},
		{"no Redis, given clock", false, func(redis.UniversalClient, string) hybrid.Config {
			return hybrid.Config{Clock: clocktest.Wall{}}
		}, hybrid.Local},
		{"Redis, sync loop, own clock", true, func(c redis.UniversalClient, prefix string) hybrid.Config {
			return hybrid.Config{Redis: c, Keyspace: syncer.Keyspace{Prefix: prefix}, Sync: hybrid.SyncConfig{Interval: 20 * time.Millisecond}}
		}, hybrid.Hybrid},
		{"Redis, manual sync", true, func(c redis.UniversalClient, prefix string) hybrid.Config {
			return hybridsim.Manual(hybrid.Config{Redis: c, Keyspace: syncer.Keyspace{Prefix: prefix}})
		}, hybrid.Hybrid},
		{"Redis, central", true, func(c redis.UniversalClient, prefix string) hybrid.Config {
			return hybrid.Config{Redis: c, Keyspace: syncer.Keyspace{Prefix: prefix}, Mode: hybrid.Central}
		}, hybrid.Central},
	}
	for _, c := range cases {
		for _, closeFirst := range []bool{false, true} {
			name := c.name + "/Shutdown"
			if closeFirst {
				name = c.name + "/Close"
			}
			t.Run(name, func(t *testing.T) {
				leakcheck.Check(t)
				var client redis.UniversalClient
				if c.redis {
					client = redistest.Client(t, redistest.Addr(t))
				}
				cfg := c.cfg(client, redistest.Prefix(t))
				cfg.Logger = quiet
				l, err := hybrid.New(cfg)
				require.NoError(t, err)
				r := mustRegister(t, l, hybrid.Rule{Name: "r", Limit: fixed(100_000, time.Minute)}, c.mode)
				for i := range 50 {
					_, err := l.Allow(ctx, r, string(rune('a'+i%5)))
					require.NoError(t, err)
				}
				if manual, _ := hybridsim.Simulated(cfg); !manual && c.redis {
					time.Sleep(60 * time.Millisecond) // a few rounds of the loop
				}
				var first error
				if closeFirst {
					first = l.Close()
				} else {
					first = l.Shutdown(ctx)
				}
				require.NoError(t, first, "first")
				assert.NoError(t, l.Shutdown(ctx), "Shutdown again")
				assert.NoError(t, l.Close(), "Close again")
				_, err = l.Register(hybrid.Rule{Name: "late", Limit: fixed(1, time.Second)})
				assert.ErrorIs(t, err, hybrid.ErrClosed, "Register after Shutdown")
				// Decisions remain possible afterwards.
				done := make(chan struct{})
				go func() {
					defer close(done)
					for range 10 {
						l.Allow(ctx, r, "after")
					}
				}()
				select {
				case <-done:
				case <-time.After(5 * time.Second):
					require.FailNow(t, "Allow after Shutdown hangs")
				}
				if c.mode == hybrid.Local {
					d, err := l.Allow(ctx, r, "after-local")
					assert.NoError(t, err, "local decision after Shutdown")
					assert.True(t, d.Allowed(), "local decision after Shutdown: %+v", d)
				}
			})
		}
	}
	// A Shutdown whose flush cannot reach Redis returns within its context
	// with ErrUnavailable, and still stops everything.
	t.Run("paused Redis", func(t *testing.T) {
		leakcheck.Check(t)
		srv := redistest.Start(t)
		client := redistest.Client(t, srv.Addr)
		clk := clocktest.New(epoch2030.Add(100 * time.Millisecond))
		cfg := nodeConfig(client, redistest.Prefix(t), clk, "a", 1)
		cfg.Logger = quiet
		l, err := hybrid.New(cfg)
		require.NoError(t, err)
		r := mustRegister(t, l, hybrid.Rule{Name: "r", Limit: fixed(1000, time.Second)}, hybrid.Hybrid)
		l.Allow(ctx, r, "k")
		srv.Pause()
		defer srv.Resume()
		sctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		defer cancel()
		start := time.Now()
		err = l.Shutdown(sctx)
		assert.LessOrEqual(t, time.Since(start), 2*time.Second, "Shutdown's time with a 200ms deadline")
		assert.ErrorIs(t, err, hybrid.ErrUnavailable, "Shutdown")
		if err2 := l.Close(); err2 != nil {
			assert.ErrorIs(t, err2, hybrid.ErrUnavailable, "Close after")
		}
	})
}

// TestShutdownFlushes: Shutdown reports what a node admitted and did not
// report (cold-start debt, use within a grant) and gives its unused grants
// back, so another node can be granted the whole rest of the window.
func TestShutdownFlushes(t *testing.T) {
	client := redistest.Client(t, redistest.Addr(t))
	const L = 1000
	W := time.Second
	for _, c := range []struct {
		name   string
		steps  int // sync rounds node a runs, 10ms apart, admitting 20 before each
		before int // then admitted without a sync
	}{
		{"debt only", 0, 20},
		{"within a small grant", 1, 3},
		{"within a large grant", 3, 5},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx := context.Background()
			prefix := redistest.Prefix(t)
			ks := syncer.Keyspace{Prefix: prefix}
			start := epoch2030.Add(100 * time.Millisecond)
			clk := clocktest.New(start)
			a := newNode(t, nodeConfig(client, prefix, clk, "a", 2))
			b := newNode(t, nodeConfig(client, prefix, clk, "b", 2))
			ra := mustRegister(t, a, hybrid.Rule{Name: "r", Limit: fixed(L, W)}, hybrid.Hybrid)
			rb := mustRegister(t, b, hybrid.Rule{Name: "r", Limit: fixed(L, W)}, hybrid.Hybrid)
			var usedA int64
			allowA := func(n int) {
				for range n {
					d, err := a.Allow(ctx, ra, "k")
					require.NoError(t, err)
					require.True(t, d.Allowed(), "node a refused: %+v", d)
					usedA++
				}
			}
			for range c.steps {
				allowA(20)
				syncOK(t, a, clk)
				clk.Add(10 * time.Millisecond)
			}
			allowA(c.before)
			wid := windowStart(clk, W)
			held := readWindow(t, client, ks, "r", "k", W, wid)
			t.Logf("before Shutdown: a admitted %d; Redis: g=%d u=%d R=%d", usedA, held.g["a"], held.u["a"], held.R)
			require.NoError(t, a.Shutdown(ctx), "Shutdown")
			st := readWindow(t, client, ks, "r", "k", W, wid)
			require.True(t, st.ok, "after Shutdown, Redis holds the window")
			require.Equal(t, usedA, st.u["a"], "after Shutdown, Redis holds u, what a admitted")
			require.Equal(t, usedA, st.R, "after Shutdown, Redis holds R, what a admitted")
			require.LessOrEqual(t, st.g["a"], usedA, "after Shutdown, Redis holds g ≤ u")
			// Node b can now be granted everything a did not use, and no more.
			var gotB int64
			for i := 0; i < 40 && windowStart(clk, W) == wid; i++ {
				n, _ := exhaust(t, b, rb, "k", 2*L)
				gotB += n
				syncOK(t, b, clk)
				clk.Add(10 * time.Millisecond)
			}
			require.Equal(t, wid, windowStart(clk, W), "the window ended before node b was done")
			assert.Equal(t, L-usedA, gotB, "node b's admissions after a's Shutdown: the limit less a's %d", usedA)
			assert.LessOrEqual(t, readWindow(t, client, ks, "r", "k", W, wid).R, int64(L), "R, the budget committed, within the limit")
		})
	}
}
