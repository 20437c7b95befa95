package syncer_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/internal/localx"
	"github.com/hybridlimit/hybridlimit/internal/redistest"
	"github.com/hybridlimit/hybridlimit/local"
	"github.com/hybridlimit/hybridlimit/syncer"
)

// decider is one way of asking Redis: a single rule, a multi-rule decision
// in one script, or one reserved across "nodes" (a client syncer takes for a
// Cluster, so the pipelined reserve-then-commit path runs).
type decider struct {
	name   string
	decide func(ctx context.Context) error
}

func deciders(t *testing.T, addr string, ks syncer.Keyspace, timeout time.Duration) []decider {
	t.Helper()
	single, err := syncer.NewCentral(syncer.CentralConfig{Client: redistest.Client(t, addr), Keyspace: ks, Timeout: timeout})
	require.NoError(t, err)
	hc := &hookClient{UniversalClient: redis.NewClient(redistest.Options(addr))}
	t.Cleanup(func() { hc.Close() })
	split, err := syncer.NewCentral(syncer.CentralConfig{Client: hc, Keyspace: ks, Timeout: timeout})
	require.NoError(t, err)
	a := mustRule(t, "a", local.Limit{Algorithm: local.FixedWindow, Quota: 100, Window: time.Second})
	b := mustRule(t, "b", local.Limit{Algorithm: local.GCRA, Quota: 100, Window: time.Second})
	reqs := []syncer.Request{{Rule: a, Key: "k", N: 1}, {Rule: b, Key: "k", N: 1}}
	out := make([]local.Decision, 2)
	return []decider{
		{"AllowN", func(ctx context.Context) error { _, err := single.AllowN(ctx, a, "k", 1); return err }},
		{"AllowMulti one script", func(ctx context.Context) error {
			_, err := syncer.AllowMulti(ctx, single, time.Time{}, reqs, out)
			return err
		}},
		{"AllowMulti reserve", func(ctx context.Context) error {
			_, err := syncer.AllowMulti(ctx, split, time.Time{}, reqs, out)
			return err
		}},
	}
}

// TestKilledServer: with Redis gone (connection refused), every call
// returns ErrUnavailable within its deadline.
func TestKilledServer(t *testing.T) {
	srv := redistest.Start(t)
	ds := deciders(t, srv.Addr, syncer.Keyspace{Prefix: redistest.Prefix(t)}, 5*time.Second)
	for _, d := range ds { // connections in the pools, to be reset
		require.NoError(t, d.decide(context.Background()), "%s before the kill", d.name)
	}
	srv.Kill()
	for _, d := range ds {
		t.Run(d.name, func(t *testing.T) {
			for i := range 2 { // a pooled connection, then a new one
				const deadline = 2 * time.Second
				ctx, cancel := context.WithTimeout(context.Background(), deadline)
				start := time.Now()
				err := d.decide(ctx)
				cancel()
				assert.LessOrEqual(t, time.Since(start), deadline+time.Second, "call %d: the time it took to return, deadline %v", i, deadline)
				assert.ErrorIs(t, err, syncer.ErrUnavailable, "call %d", i)
				assert.NotErrorIs(t, err, syncer.ErrRedis, "call %d", i)
			}
		})
	}
}

// TestPausedServer: a server that accepts and never answers (SIGSTOP).
func TestPausedServer(t *testing.T) {
	srv := redistest.Start(t)
	ks := syncer.Keyspace{Prefix: redistest.Prefix(t)}
	ds := deciders(t, srv.Addr, ks, 5*time.Second)
	short := deciders(t, srv.Addr, ks, 300*time.Millisecond) // Config.Timeout
	for _, d := range append(ds, short...) {
		require.NoError(t, d.decide(context.Background()), "%s before the pause", d.name)
	}
	srv.Pause()
	resumed := false
	defer func() {
		if !resumed {
			srv.Resume()
		}
	}()
	const deadline = 300 * time.Millisecond
	for _, d := range ds {
		t.Run("deadline/"+d.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), deadline)
			defer cancel()
			start := time.Now()
			err := d.decide(ctx)
			assert.LessOrEqual(t, time.Since(start), deadline+time.Second, "the time it took to return, deadline %v", deadline)
			assert.ErrorIs(t, err, syncer.ErrUnavailable)
			assert.ErrorIs(t, err, context.DeadlineExceeded)
		})
	}
	for _, d := range short {
		t.Run("Config.Timeout/"+d.name, func(t *testing.T) {
			start := time.Now()
			err := d.decide(context.Background()) // no deadline: Config.Timeout bounds it
			assert.LessOrEqual(t, time.Since(start), 300*time.Millisecond+time.Second, "the time it took to return, Config.Timeout 300ms")
			assert.ErrorIs(t, err, syncer.ErrUnavailable)
			assert.ErrorIs(t, err, context.DeadlineExceeded)
		})
	}
	// Cancelled in flight: the call returns at its deadline, the context's
	// (3s) capped by Config.Timeout (300ms), with the context's error.
	t.Run("cancelled", func(t *testing.T) {
		d := short[0]
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		time.AfterFunc(100*time.Millisecond, cancel)
		start := time.Now()
		err := d.decide(ctx)
		assert.LessOrEqual(t, time.Since(start), 300*time.Millisecond+time.Second, "the time it took to return, cancelled at 100ms, Config.Timeout 300ms")
		assert.ErrorIs(t, err, syncer.ErrUnavailable)
		assert.ErrorIs(t, err, context.Canceled)
	})
	// Cancelled before: no call at all.
	t.Run("cancelled before", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		for _, d := range ds {
			start := time.Now()
			err := d.decide(ctx)
			assert.LessOrEqual(t, time.Since(start), 50*time.Millisecond, "%s: the time it took to return, its context cancelled before the call", d.name)
			assert.ErrorIs(t, err, syncer.ErrUnavailable, d.name)
			assert.ErrorIs(t, err, context.Canceled, d.name)
		}
	})
	srv.Resume()
	resumed = true
	for _, d := range append(ds, short...) {
		assert.NoError(t, d.decide(context.Background()), "%s after resuming", d.name)
	}
}

// TestWrongType: another value under a rule's key name (another
// application sharing the prefix) is a Redis error, not unavailability, and
// a multi-rule decision that meets it charges nothing.
func TestWrongType(t *testing.T) {
	topologies(t, func(t *testing.T, c redis.UniversalClient) {
		ctx := context.Background()
		ks := syncer.Keyspace{Prefix: redistest.Prefix(t)}
		cen := newCentral(t, c, ks)
		for _, a := range localx.Algorithms() {
			t.Run(a.String(), func(t *testing.T) {
				p := local.Limit{Algorithm: a, Quota: 10, Window: time.Second}
				r := mustRule(t, "w-"+a.String(), p)
				state, _ := syncer.Keys(syncer.CentralKeyspace(cen), r, "k")
				// Short, and longer than a bucket state's 24 bytes of numbers.
				for _, v := range []string{"not a hash", "another application's value, under the rule's name"} {
					require.NoError(t, c.Set(ctx, state, v, time.Minute).Err())
					_, err := cen.AllowN(ctx, r, "k", 1)
					assert.ErrorIs(t, err, syncer.ErrRedis, "AllowN over %q", v)
					assert.NotErrorIs(t, err, syncer.ErrUnavailable, "AllowN over %q", v)
					got, err := c.Get(ctx, state).Result()
					assert.NoError(t, err, "the value after AllowN")
					assert.Equal(t, v, got, "the value after AllowN, want it untouched")
				}
				// With another rule of the same key, which must stay uncharged.
				other := mustRule(t, "o-"+a.String(), local.Limit{Algorithm: local.FixedWindow, Quota: 10, Window: time.Hour})
				_, err := syncer.AllowMulti(ctx, cen, time.Time{}, []syncer.Request{{Rule: other, Key: "k", N: 1}, {Rule: r, Key: "k", N: 1}}, make([]local.Decision, 2))
				assert.ErrorIs(t, err, syncer.ErrRedis, "AllowMulti")
				assert.NotErrorIs(t, err, syncer.ErrUnavailable, "AllowMulti")
				d, err := cen.AllowN(ctx, other, "k", 0)
				if assert.NoError(t, err, "the other rule after the failed multi call") {
					assert.Equal(t, int64(10), d.Remaining(), "the other rule after the failed multi call: %+v, want it uncharged", d)
				}
			})
		}
		t.Run("log list", func(t *testing.T) {
			r := mustRule(t, "wl", local.Limit{Algorithm: local.SlidingWindowLog, Quota: 10, Window: time.Minute})
			_, err := cen.AllowN(ctx, r, "k", 1)
			require.NoError(t, err)
			_, lg := syncer.Keys(syncer.CentralKeyspace(cen), r, "k")
			require.NoError(t, c.Set(ctx, lg, "not a list", time.Minute).Err())
			_, err = cen.AllowN(ctx, r, "k", 1)
			assert.ErrorIs(t, err, syncer.ErrRedis, "AllowN")
			assert.NotErrorIs(t, err, syncer.ErrUnavailable, "AllowN")
		})
	})
}

// TestPingWrites: Ping takes a write on every master, so a server that
// answers PING but refuses writes (out of memory under noeviction) reports
// ErrUnavailable; on a Cluster, each master holds a probe key afterwards.
func TestPingWrites(t *testing.T) {
	ctx := context.Background()
	t.Run("single", func(t *testing.T) {
		srv := redistest.Start(t, "--maxmemory-policy", "noeviction")
		c := redistest.Client(t, srv.Addr)
		central, err := syncer.NewCentral(syncer.CentralConfig{Client: c, Keyspace: syncer.Keyspace{Prefix: redistest.Prefix(t)}})
		require.NoError(t, err)
		require.NoError(t, central.Ping(ctx), "Ping of a healthy server")
		require.NoError(t, c.ConfigSet(ctx, "maxmemory", "1").Err())
		require.NoError(t, c.Ping(ctx).Err(), "PING out of memory")
		assert.ErrorIs(t, central.Ping(ctx), syncer.ErrUnavailable, "Ping out of memory")
	})
	t.Run("cluster", func(t *testing.T) {
		cc := redistest.ClusterClient(t, redistest.ClusterAddrs(t))
		prefix := redistest.Prefix(t)
		central, err := syncer.NewCentral(syncer.CentralConfig{Client: cc, Keyspace: syncer.Keyspace{Prefix: prefix}})
		require.NoError(t, err)
		require.NoError(t, central.Ping(ctx), "Ping of the Cluster")
		var masters, probed atomic.Int64 // ForEachMaster runs the masters concurrently
		err = cc.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
			keys, err := m.Keys(ctx, prefix+":probe:*").Result()
			if err != nil {
				return err
			}
			masters.Add(1)
			if len(keys) > 0 {
				probed.Add(1)
			}
			return nil
		})
		require.NoError(t, err)
		assert.GreaterOrEqual(t, masters.Load(), int64(3), "masters")
		assert.Equal(t, masters.Load(), probed.Load(), "masters holding a probe key, want every one")
	})
}
