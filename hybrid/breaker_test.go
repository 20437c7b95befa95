package hybrid_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/hybrid"
	"github.com/hybridlimit/hybridlimit/internal/clocktest"
	"github.com/hybridlimit/hybridlimit/internal/hybridsim"
	"github.com/hybridlimit/hybridlimit/internal/leakcheck"
	"github.com/hybridlimit/hybridlimit/internal/redistest"
	"github.com/hybridlimit/hybridlimit/local"
	"github.com/hybridlimit/hybridlimit/syncer"
)

// callCounter is a go-redis hook counting the commands a client sends for
// decisions (their context carries decisionCtx) and its probes (PING, or
// the write of Ping): what reached,
// or tried to reach, Redis. The syncer's own rounds are not counted.
type callCounter struct{ calls, pings atomic.Int64 }

type decisionMark struct{}

// decisionCtx marks the context of the decisions callCounter counts.
var decisionCtx = context.WithValue(context.Background(), decisionMark{}, true)

func (c *callCounter) count(ctx context.Context, n int) {
	if ctx.Value(decisionMark{}) != nil {
		c.calls.Add(int64(n))
	}
}

func (c *callCounter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (c *callCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if cmd.Name() == "ping" || cmd.Name() == "set" { // Ping's probe writes a key
			c.pings.Add(1)
		} else {
			c.count(ctx, 1)
		}
		return next(ctx, cmd)
	}
}

func (c *callCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		c.count(ctx, len(cmds))
		return next(ctx, cmds)
	}
}

// countedClient returns a client of addr whose commands cnt counts.
func countedClient(t *testing.T, addr string, cnt *callCounter) *redis.Client {
	c := redistest.Client(t, addr)
	c.AddHook(cnt)
	return c
}

// TestCircuitBreaker: once a central call finds Redis paused or killed, the
// next central decisions (single and AllowMulti) do not reach Redis at all:
// the failure policy decides at once, without error, Degraded. The first
// call waits at most its deadline. A Ping that Redis answers (the probe's
// PING, which hybridsim.Manual leaves to SyncAt and Ping) closes the breaker.
func TestCircuitBreaker(t *testing.T) {
	ctx := decisionCtx
	for _, outage := range []string{"paused", "killed"} {
		t.Run(outage, func(t *testing.T) {
			srv := redistest.Start(t)
			var cnt callCounter
			l := newNode(t, hybridsim.Manual(hybrid.Config{
				Redis: countedClient(t, srv.Addr, &cnt), Keyspace: syncer.Keyspace{Prefix: redistest.Prefix(t)},
				Mode: hybrid.Central, Timeout: 200 * time.Millisecond, Logger: quiet,
			}))
			rules := map[string]*hybrid.Rule{}
			for _, p := range policyRules {
				rules[p.name] = mustRegister(t, l, hybrid.Rule{Name: p.name, Limit: fixed(100, time.Minute), Policy: p.policy}, hybrid.Central)
				d, err := l.Allow(ctx, rules[p.name], "k")
				require.NoError(t, err)
				require.True(t, d.Allowed(), "before the outage: %v", d)
				require.False(t, d.Degraded(), "before the outage: %v", d)
			}
			if outage == "paused" {
				srv.Pause()
				defer srv.Resume()
			} else {
				srv.Kill()
			}
			// The first call meets the outage within its deadline (a
			// caller's 100ms here), and opens the breaker.
			before := cnt.calls.Load()
			c, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
			start := time.Now()
			d, err := l.Allow(c, rules["flocal"], "k")
			el := time.Since(start)
			cancel()
			checkPolicy(t, hybrid.FailLocal, d, err)
			assert.Less(t, el, time.Second+100*time.Millisecond, "the first decision outlived its deadline")
			require.Equal(t, before+1, cnt.calls.Load(), "the first decision did not ask Redis")

			// Open: nothing reaches Redis, whatever the rule or the call.
			before = cnt.calls.Load()
			for _, p := range policyRules {
				for range 100 {
					d, err := l.Allow(ctx, rules[p.name], "k")
					checkPolicy(t, p.policy, d, err)
				}
			}
			out := make([]hybrid.Decision, 2)
			ok, err := l.AllowMulti(ctx, []hybrid.Request{{Rule: rules["open"], Key: "m", N: 1}, {Rule: rules["closed"], Key: "m", N: 1}}, out)
			require.NoError(t, err)
			assert.False(t, ok, "AllowMulti with a FailClosed rule, Redis down")
			assert.True(t, out[0].Degraded() && out[1].Degraded(), "AllowMulti: %v", out)
			assert.Equal(t, before, cnt.calls.Load(), "bug: decisions reached Redis with the breaker open: each waits for the timeout")

			// Back: the PING closes the breaker, and decisions ask Redis again.
			if outage == "paused" {
				srv.Resume()
			} else {
				srv.Restart()
			}
			require.Eventually(t, func() bool { return l.Ping(ctx) == nil }, 10*time.Second, 10*time.Millisecond)
			before = cnt.calls.Load()
			d, err = l.Allow(ctx, rules["closed"], "k")
			require.NoError(t, err)
			assert.False(t, d.Degraded(), "after Ping: %v", d)
			assert.True(t, d.Allowed(), "after Ping: %v", d)
			assert.Greater(t, cnt.calls.Load(), before, "after Ping: the decision did not ask Redis")
		})
	}
}

// TestProbe: without hybridsim.Manual the Limiter's own probe finds Redis again
// after an outage, PINGing with backoff (a few PINGs, not one per
// decision); Close stops it, leaving no goroutine.
func TestProbe(t *testing.T) {
	leakcheck.Check(t)
	ctx := decisionCtx
	srv := redistest.Start(t)
	var cnt callCounter
	l, err := hybrid.New(hybrid.Config{
		Redis: countedClient(t, srv.Addr, &cnt), Keyspace: syncer.Keyspace{Prefix: redistest.Prefix(t)},
		Mode: hybrid.Central, Timeout: 100 * time.Millisecond, Logger: quiet,
	})
	require.NoError(t, err)
	r := mustRegister(t, l, hybrid.Rule{Name: "c", Limit: fixed(1000, time.Minute), Policy: hybrid.FailOpen}, hybrid.Central)
	srv.Kill()
	d, err := l.Allow(ctx, r, "k")
	checkPolicy(t, hybrid.FailOpen, d, err)
	before := cnt.calls.Load()
	// Decisions while Redis is down, until the probe has PINGed a few times.
	decisions := 0
	for cnt.pings.Load() < 3 {
		d, err := l.Allow(ctx, r, "k")
		checkPolicy(t, hybrid.FailOpen, d, err)
		decisions++
		time.Sleep(time.Millisecond)
	}
	assert.Equal(t, before, cnt.calls.Load(), "decisions reached Redis with the breaker open")
	assert.Greater(t, decisions, int(cnt.pings.Load()), "a PING per decision")
	srv.Restart()
	require.Eventually(t, func() bool {
		d, err := l.Allow(ctx, r, "k")
		return err == nil && !d.Degraded()
	}, 10*time.Second, 5*time.Millisecond, "the probe did not find Redis again")

	// An outage again, and Close while the probe waits: it stops.
	srv.Kill()
	d, err = l.Allow(ctx, r, "k")
	checkPolicy(t, hybrid.FailOpen, d, err)
	if err := l.Close(); err != nil {
		assert.ErrorIs(t, err, hybrid.ErrUnavailable, "Close with Redis down")
	}
}

// TestPing: Ping reports whether Redis answers, for a health endpoint, and
// RequireRedis makes New fail when it does not.
func TestPing(t *testing.T) {
	ctx := context.Background()
	srv := redistest.Start(t)
	cfg := hybridsim.Manual(hybrid.Config{
		Redis: redistest.Client(t, srv.Addr), Keyspace: syncer.Keyspace{Prefix: redistest.Prefix(t)}, Logger: quiet, RequireRedis: true, Timeout: 100 * time.Millisecond,
	})
	l := newNode(t, cfg)
	assert.NoError(t, l.Ping(ctx))

	srv.Kill()
	assert.ErrorIs(t, l.Ping(ctx), hybrid.ErrUnavailable)
	_, err := hybrid.New(cfg)
	assert.ErrorIs(t, err, hybrid.ErrUnavailable, "New with RequireRedis, Redis down")
	assert.ErrorContains(t, err, "RequireRedis")
	cfg.RequireRedis = false
	l2 := newNode(t, cfg)
	assert.ErrorIs(t, l2.Ping(ctx), hybrid.ErrUnavailable)

	srv.Restart()
	require.Eventually(t, func() bool { return l.Ping(ctx) == nil }, 10*time.Second, 10*time.Millisecond)
	require.NoError(t, l.Close())
	assert.ErrorIs(t, l.Ping(ctx), hybrid.ErrClosed)

	local, err := hybrid.New(hybrid.Config{Logger: quiet})
	require.NoError(t, err)
	defer local.Close()
	assert.NoError(t, local.Ping(ctx), "Ping without Redis")
}

// TestPingCluster: Ping PINGs every master of a Cluster.
func TestPingCluster(t *testing.T) {
	l := newNode(t, hybridsim.Manual(hybrid.Config{
		Redis: redistest.ClusterClient(t, redistest.ClusterAddrs(t)), Keyspace: syncer.Keyspace{Prefix: redistest.Prefix(t)}, Logger: quiet, RequireRedis: true,
	}))
	assert.NoError(t, l.Ping(context.Background()))
}

// TestPlainClientRefused: a go-redis client without ContextTimeoutEnabled
// gets a clear error from New, naming Redis and the option.
func TestPlainClientRefused(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer c.Close()
	_, err := hybrid.New(hybrid.Config{Redis: c, Logger: quiet})
	require.ErrorIs(t, err, hybrid.ErrInvalidConfig)
	assert.ErrorContains(t, err, "Redis")
	assert.ErrorContains(t, err, "ContextTimeoutEnabled")
}

// TestAfterShutdown: after Shutdown, central and hybrid rules go on
// deciding locally, each node on its part of the limit (the limit over the
// nodes), whatever their policy, Degraded, without asking Redis.
func TestAfterShutdown(t *testing.T) {
	ctx := decisionCtx
	srv := redistest.Start(t)
	prefix := redistest.Prefix(t)
	clk := clocktest.New(epoch2030.Add(100 * time.Millisecond))
	var cnt callCounter
	const L, nodes = 2000, 2
	W := time.Second
	a := newNode(t, nodeConfig(countedClient(t, srv.Addr, &cnt), prefix, clk, "a", nodes))
	b := newNode(t, nodeConfig(redistest.Client(t, srv.Addr), prefix, clk, "b", nodes))
	type ruleCase struct {
		r, rb *hybrid.Rule // on a, on b
		name  string
	}
	var rules []ruleCase
	for _, mode := range []hybrid.Mode{hybrid.Central, hybrid.Hybrid} {
		for _, p := range policyRules {
			name := mode.String() + "-" + p.name
			r := hybrid.Rule{Name: name, Limit: fixed(L, W), Policy: p.policy, Mode: mode}
			rules = append(rules, ruleCase{mustRegister(t, a, r, mode), mustRegister(t, b, r, mode), name})
		}
	}
	// Both nodes use the keys before the shutdown, so that the leases count
	// them.
	for range 3 {
		for _, rc := range rules {
			_, err := a.Allow(ctx, rc.r, "used")
			require.NoError(t, err)
			_, err = b.Allow(ctx, rc.rb, "used")
			require.NoError(t, err)
		}
		syncOK(t, a, clk)
		syncOK(t, b, clk)
		clk.Add(10 * time.Millisecond)
	}
	require.NoError(t, a.Shutdown(ctx))
	before := cnt.calls.Load()
	for _, rc := range rules {
		for _, key := range []string{"used", "fresh"} {
			admitted := 0
			for range 2 * L {
				d, err := a.Allow(ctx, rc.r, key)
				require.NoError(t, err, "%s after Shutdown", rc.name)
				if !d.Degraded() && d.Allowed() && rc.r.Mode == hybrid.Hybrid {
					admitted++ // on what is left of a lease, or a new key's allowance
					continue
				}
				require.True(t, d.Degraded(), "%s after Shutdown: %v", rc.name, d)
				require.NotEqual(t, local.ReasonNoLease, d.Reason(), "%s after Shutdown: %v", rc.name, d)
				if d.Allowed() {
					admitted++
				}
			}
			assert.Positive(t, admitted, "%s, key %s: nothing admitted after Shutdown", rc.name, key)
			assert.LessOrEqual(t, admitted, L/nodes, "%s, key %s: admitted %d after Shutdown, this node's part is %d", rc.name, key, admitted, L/nodes)
		}
	}
	assert.Equal(t, before, cnt.calls.Load(), "decisions after Shutdown asked Redis")
}

// BenchmarkCentralBreakerOpen: a central decision while the breaker is open
// (redis-server killed): the failure policy decides without a call, so a
// decision costs a local one, far below Config.Timeout.
func BenchmarkCentralBreakerOpen(b *testing.B) {
	srv := redistest.Start(b)
	l := newNode(b, hybridsim.Manual(hybrid.Config{
		Redis: redistest.Client(b, srv.Addr), Keyspace: syncer.Keyspace{Prefix: redistest.Prefix(b)},
		Mode: hybrid.Central, Timeout: 250 * time.Millisecond, Logger: quiet,
	}))
	r := mustRegister(b, l, hybrid.Rule{Name: "c", Limit: fixed(1<<40, time.Hour), Policy: hybrid.FailLocal}, hybrid.Central)
	srv.Kill()
	ctx := context.Background()
	if d, err := l.Allow(ctx, r, "k"); err != nil || !d.Degraded() {
		b.Fatalf("the first decision with Redis killed: %v, %v", d, err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		l.Allow(ctx, r, "k")
	}
}

// TestBreakerRoundStrikes: one sync round in which Redis answers nothing
// leaves the breaker closed (a busy machine misses a deadline now and
// then, and a policy's admissions would come on top of Redis's counts);
// the third in a row opens it, and a round Redis answers closes it.
func TestBreakerRoundStrikes(t *testing.T) {
	ctx := context.Background()
	srv := redistest.Start(t)
	clk := clocktest.New(epoch2030.Add(100 * time.Millisecond))
	l := newNode(t, nodeConfig(redistest.Client(t, srv.Addr), redistest.Prefix(t), clk, "a", 1))
	r := mustRegister(t, l, hybrid.Rule{Name: "r", Limit: fixed(10, time.Hour), Policy: hybrid.FailOpen}, hybrid.Hybrid)
	d, err := l.Allow(ctx, r, "warm")
	require.NoError(t, err)
	require.True(t, d.Allowed())
	syncOK(t, l, clk)

	// degraded reports whether a new key, past its cold-start allowance of
	// one, is decided by the policy (FailOpen: admitted, Degraded).
	fresh := 0
	degraded := func() bool {
		fresh++
		key := fmt.Sprintf("new-%d", fresh)
		var d hybrid.Decision
		for range 3 {
			d, err = l.Allow(ctx, r, key)
			require.NoError(t, err)
		}
		return d.Degraded()
	}
	require.False(t, degraded(), "Redis answering")

	srv.Pause()
	defer srv.Resume()
	for i := 1; i <= 3; i++ {
		clk.Add(10 * time.Millisecond)
		c, cancel := context.WithTimeout(ctx, 150*time.Millisecond)
		_, err := hybridsim.SyncAt(c, l, clk.Now())
		cancel()
		require.ErrorIs(t, err, hybrid.ErrUnavailable, "round %d", i)
		if i < 3 {
			assert.False(t, degraded(), "after %d failed round(s): the breaker opened", i)
		}
	}
	assert.True(t, degraded(), "after three failed rounds in a row: the breaker is closed")

	srv.Resume()
	syncUntilOK(t, l, clk, 10*time.Millisecond)
	assert.False(t, degraded(), "after a round Redis answered: the breaker is open")
}
