package httplimit

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/hybrid"
	"github.com/hybridlimit/hybridlimit/internal/leakcheck"
	"github.com/hybridlimit/hybridlimit/internal/redistest"
)

// parsed returns the rules of rulesWithQuota(n).
func parsed(t *testing.T, n int) []Rule {
	t.Helper()
	rules, err := ParseRules(rulesWithQuota(n))
	require.NoError(t, err)
	return rules
}

// nodes returns n clients of the same Redis, one per node, on a single
// server or on the Cluster.
func nodes(t *testing.T, cluster bool, n int) []redis.UniversalClient {
	t.Helper()
	out := make([]redis.UniversalClient, n)
	for i := range out {
		if cluster {
			out[i] = redistest.ClusterClient(t, redistest.ClusterAddrs(t))
		} else {
			out[i] = redistest.Client(t, redistest.Addr(t))
		}
	}
	return out
}

func TestRedisRulesReachEveryNode(t *testing.T) {
	for _, cluster := range []bool{false, true} {
		t.Run(map[bool]string{false: "single", true: "cluster"}[cluster], func(t *testing.T) {
			leakcheck.Check(t)
			c := nodes(t, cluster, 3)
			ks := hybrid.Keyspace{Prefix: redistest.Prefix(t)}
			ctx := t.Context()

			v, err := PublishRules(ctx, c[0], ks, parsed(t, 1))
			require.NoError(t, err)
			require.EqualValues(t, 1, v)

			// Two nodes; the poll waits a minute, so only pub/sub can be
			// quick enough.
			var a [2]applied
			for i := range a {
				src, err := WatchRedis(ctx, c[i+1], ks, a[i].apply, WatchConfig{PollInterval: time.Minute})
				require.NoError(t, err)
				defer src.Close()
				require.EqualValues(t, 1, a[i].quota(), "the published version is applied before WatchRedis returns")
			}

			for n := 2; n <= 3; n++ {
				start := time.Now()
				v, err := PublishRules(ctx, c[0], ks, parsed(t, n))
				require.NoError(t, err)
				require.EqualValues(t, n, v)
				require.Eventually(t, func() bool { return a[0].quota() == int64(n) && a[1].quota() == int64(n) }, waitFor, tick)
				assert.Less(t, time.Since(start), time.Second, "version %d reached both nodes within a second", n)
			}
			assert.Equal(t, 3, a[0].count())
			assert.Equal(t, 3, a[1].count())

			keys, err := redistest.Keys(ctx, c[0], ks.Prefix)
			require.NoError(t, err)
			assert.ElementsMatch(t, []string{ks.Prefix + ":{rules}:doc"}, keys, "one key, under the keyspace")
		})
	}
}

// clientKill closes the server's pub/sub connections, as a network fault
// or a proxy restart would.
func clientKill(t *testing.T, c *redis.Client) {
	t.Helper()
	n, err := c.Do(t.Context(), "CLIENT", "KILL", "TYPE", "pubsub").Int64()
	require.NoError(t, err)
	require.Positive(t, n, "a subscription was killed")
}

func TestRedisRulesAfterDisconnect(t *testing.T) {
	leakcheck.Check(t)
	srv := redistest.Start(t) // private: CLIENT KILL TYPE pubsub must touch no one else's
	admin := redistest.Client(t, srv.Addr)
	node := redistest.Client(t, srv.Addr)
	ks := hybrid.Keyspace{}
	ctx := t.Context()

	var a applied
	src, err := WatchRedis(ctx, node, ks, a.apply, WatchConfig{PollInterval: 200 * time.Millisecond})
	require.NoError(t, err)
	defer src.Close()
	require.Zero(t, a.count(), "nothing published yet")

	// A version published while the subscription is down is not heard;
	// the check on resubscribing, or the poll, finds it.
	for n := 1; n <= 3; n++ {
		clientKill(t, admin)
		_, err := PublishRules(ctx, admin, ks, parsed(t, n))
		require.NoError(t, err)
		require.Eventually(t, func() bool { return a.quota() == int64(n) }, waitFor, tick)
	}

	// A message lost with the subscription up (stored, never announced):
	// only the poll can find it.
	data, err := marshalRules(parsed(t, 4))
	require.NoError(t, err)
	require.NoError(t, admin.HSet(ctx, "hl:{rules}:doc", "rules", data, "version", 4).Err())
	require.Eventually(t, func() bool { return a.quota() == 4 }, waitFor, tick)
	assert.Equal(t, 4, a.count())

}

// TestRedisRulesLost checks what happens when Redis loses the rules (a
// flush, a restart without persistence): the rules in force stay, and the
// next version is applied though its number, 1, was seen before.
func TestRedisRulesLost(t *testing.T) {
	leakcheck.Check(t)
	c := nodes(t, false, 1)[0]
	ks := hybrid.Keyspace{Prefix: redistest.Prefix(t)}
	ctx := t.Context()
	_, err := PublishRules(ctx, c, ks, parsed(t, 1))
	require.NoError(t, err)
	var a applied
	src, err := WatchRedis(ctx, c, ks, a.apply, WatchConfig{PollInterval: 10 * time.Millisecond})
	require.NoError(t, err)
	defer src.Close()
	require.EqualValues(t, 1, a.quota())

	require.NoError(t, c.Del(ctx, ks.Prefix+":{rules}:doc").Err())
	require.Never(t, func() bool { return a.count() > 1 }, 100*time.Millisecond, tick)

	v, err := PublishRules(ctx, c, ks, parsed(t, 2))
	require.NoError(t, err)
	require.EqualValues(t, 1, v)
	require.Eventually(t, func() bool { return a.quota() == 2 }, waitFor, tick)
	assert.Equal(t, 2, a.count())
}

func TestRedisRulesBadVersion(t *testing.T) {
	leakcheck.Check(t)
	mp, reloads := reloadMetrics(t)
	c := nodes(t, false, 1)[0]
	ks := hybrid.Keyspace{Prefix: redistest.Prefix(t)}
	ctx := t.Context()
	hash := ks.Prefix + ":{rules}:doc"

	var a applied
	src, err := WatchRedis(ctx, c, ks, a.apply, WatchConfig{PollInterval: time.Minute, MeterProvider: mp})
	require.NoError(t, err)
	defer src.Close()
	_, err = PublishRules(ctx, c, ks, parsed(t, 1))
	require.NoError(t, err)
	require.Eventually(t, func() bool { return a.quota() == 1 }, waitFor, tick)

	// PublishRules refuses bad rules and writes nothing.
	bad := parsed(t, 2)
	bad[0].Window = 0
	_, err = PublishRules(ctx, c, ks, bad)
	require.ErrorAs(t, err, new(*RuleError))
	v, err := c.HGet(ctx, hash, "version").Int64()
	require.NoError(t, err)
	assert.EqualValues(t, 1, v)

	// A bad document written by hand is rejected, counted, and the
	// previous rules keep serving.
	require.NoError(t, c.HSet(ctx, hash, "rules", "version: 1\nrules: [{id: x}]", "version", 2).Err())
	require.NoError(t, c.Publish(ctx, ks.Prefix+":{rules}:changed", "2").Err())
	require.Eventually(t, func() bool { return reloads("redis", "rejected") == 1 }, waitFor, tick)
	assert.Equal(t, 1, a.count())
	assert.EqualValues(t, 1, a.quota())
	// Its version is remembered: announced again, it is not read again.
	require.NoError(t, c.Publish(ctx, ks.Prefix+":{rules}:changed", "2").Err())
	require.Never(t, func() bool { return reloads("redis", "rejected") > 1 }, 100*time.Millisecond, tick)

	// The next version counts on from it and is applied.
	v, err = PublishRules(ctx, c, ks, parsed(t, 3))
	require.NoError(t, err)
	assert.EqualValues(t, 3, v)
	require.Eventually(t, func() bool { return a.quota() == 3 }, waitFor, tick)
	assert.EqualValues(t, 2, reloads("redis", "applied"))
	assert.EqualValues(t, 1, reloads("redis", "rejected"))
}

func TestRedisRulesStart(t *testing.T) {
	leakcheck.Check(t)
	c := nodes(t, false, 1)[0]
	ctx := t.Context()
	var a applied

	// A bad published version at the start is an error.
	ks := hybrid.Keyspace{Prefix: redistest.Prefix(t)}
	require.NoError(t, c.HSet(ctx, ks.Prefix+":{rules}:doc", "rules", "{}", "version", 1).Err())
	_, err := WatchRedis(ctx, c, ks, a.apply, WatchConfig{})
	assert.ErrorAs(t, err, new(*RuleError))

	// Redis down at the start is not: the watcher keeps trying.
	down := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1, DialTimeout: 100 * time.Millisecond})
	defer down.Close()
	src, err := WatchRedis(ctx, down, ks, a.apply, WatchConfig{PollInterval: 20 * time.Millisecond})
	require.NoError(t, err)
	require.Never(t, func() bool { return a.count() > 0 }, 100*time.Millisecond, tick)
	require.NoError(t, src.Close())
	require.NoError(t, src.Close(), "Close is idempotent")

	for _, tc := range []struct {
		name string
		c    redis.UniversalClient
		ks   hybrid.Keyspace
		fn   func([]Rule) error
	}{
		{"no client", nil, hybrid.Keyspace{}, a.apply},
		{"no apply", c, hybrid.Keyspace{}, nil},
		{"braces", c, hybrid.Keyspace{Prefix: "a{b"}, a.apply},
	} {
		_, err := WatchRedis(ctx, tc.c, tc.ks, tc.fn, WatchConfig{})
		assert.ErrorIs(t, err, ErrInvalidConfig, tc.name)
	}
	_, err = PublishRules(ctx, c, hybrid.Keyspace{Prefix: "}"}, parsed(t, 1))
	assert.ErrorIs(t, err, ErrInvalidConfig)
	assert.Zero(t, a.count())
}

// TestRedisRulesContext checks that ending the context stops a watcher
// without Close.
func TestRedisRulesContext(t *testing.T) {
	leakcheck.Check(t)
	c := nodes(t, false, 1)[0]
	ks := hybrid.Keyspace{Prefix: redistest.Prefix(t)}
	ctx, cancel := context.WithCancel(t.Context())
	var a applied
	_, err := WatchRedis(ctx, c, ks, a.apply, WatchConfig{PollInterval: 10 * time.Millisecond})
	require.NoError(t, err)
	cancel()
	_, err = PublishRules(t.Context(), c, ks, parsed(t, 1))
	require.NoError(t, err)
	require.Never(t, func() bool { return a.count() > 0 }, 100*time.Millisecond, tick)
}
