package syncer_test

import (
	"context"
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

// algoParams is a small limit of every algorithm.
func algoParams(a local.Algorithm) local.Limit {
	p := local.Limit{Algorithm: a, Quota: 3, Window: time.Hour}
	if a == local.TokenBucket || a == local.LeakyBucket || a == local.GCRA {
		p.Burst = 4
	}
	return p
}

func scriptFlush(t testing.TB, c *redis.Client) {
	t.Helper()
	require.NoError(t, c.ScriptFlush(context.Background()).Err(), "SCRIPT FLUSH")
}

func scriptExists(t testing.TB, c *redis.Client, sha string) bool {
	t.Helper()
	ex, err := c.ScriptExists(context.Background(), sha).Result()
	require.NoError(t, err, "SCRIPT EXISTS")
	require.Len(t, ex, 1, "SCRIPT EXISTS of one script")
	return ex[0]
}

// sameAsLocal decides reqs as one, in Redis and in package local, and
// fails t unless both agree on everything but ResetAfter (which a refused
// reservation on the split path reports with the reservation: see
// TestMultiDecisions).
func sameAsLocal(t *testing.T, cen *syncer.Central, now time.Time, reqs []syncer.Request, lims map[*syncer.Rule]*local.Limiter) bool {
	t.Helper()
	lreqs := make([]local.Request, len(reqs))
	for i, q := range reqs {
		lreqs[i] = local.Request{Limiter: lims[q.Rule], Key: q.Key, N: q.N}
	}
	got, want := make([]local.Decision, len(reqs)), make([]local.Decision, len(reqs))
	ok, err := syncer.AllowMulti(context.Background(), cen, now, reqs, got)
	require.NoError(t, err, "AllowMultiAt")
	wok := local.AllowMultiAt(now, lreqs, want)
	assert.Equal(t, wok, ok, "AllowMultiAt: redis, want local's verdict")
	for i := range reqs {
		g, w := localx.OutcomeOf(got[i]), localx.OutcomeOf(want[i])
		g.ResetAfter, w.ResetAfter = 0, 0
		assert.Equal(t, w, g, "request %d: redis, want local's decision (ResetAfter aside)", i)
	}
	// And the state left behind.
	for _, q := range reqs {
		d, err := syncer.AllowNAt(context.Background(), cen, now, q.Rule, q.Key, 0)
		require.NoError(t, err)
		w := lims[q.Rule].AllowNAt(now, q.Key, 0)
		assert.Equal(t, localx.OutcomeOf(w), localx.OutcomeOf(d), "rule %s after: redis, want local's state", syncer.RuleName(q.Rule))
	}
	return ok
}

// TestNoScriptSingleServer: scripts run by SHA; after SCRIPT FLUSH (a
// restart, a failover) every path loads them again and decides as before.
func TestNoScriptSingleServer(t *testing.T) {
	srv := redistest.Start(t)
	c := redistest.Client(t, srv.Addr)
	ks := syncer.Keyspace{Prefix: redistest.Prefix(t)}
	cen := newCentral(t, c, ks)
	hc := &hookClient{UniversalClient: redis.NewClient(redistest.Options(srv.Addr))}
	t.Cleanup(func() { hc.Close() })
	split, err := syncer.NewCentral(syncer.CentralConfig{Client: hc, Keyspace: ks, Timeout: 5 * time.Second})
	require.NoError(t, err)
	sha := syncer.ScriptHashes()
	now := time.Now().Truncate(time.Hour).Add(time.Hour + time.Minute)
	ctx := context.Background()
	for _, a := range localx.Algorithms() {
		t.Run("AllowN/"+a.String(), func(t *testing.T) {
			r := mustRule(t, "n-"+a.String(), algoParams(a))
			lim := newLocal(t, syncer.RuleLimit(r))
			for i := range syncer.RuleLimit(r).MaxCost() + 2 {
				scriptFlush(t, c)
				require.False(t, scriptExists(t, c, syncer.ScriptHash(r)), "script still there after SCRIPT FLUSH")
				got, err := syncer.AllowNAt(ctx, cen, now, r, "k", 1)
				require.NoError(t, err, "call %d after SCRIPT FLUSH", i)
				want := lim.AllowNAt(now, "k", 1)
				assert.Equal(t, localx.OutcomeOf(want), localx.OutcomeOf(got), "call %d: redis, want local's decision", i)
				assert.True(t, scriptExists(t, c, syncer.ScriptHash(r)), "call %d: the script was not loaded again", i)
			}
		})
	}
	lims := map[*syncer.Rule]*local.Limiter{}
	rule := func(name string, p local.Limit) *syncer.Rule {
		r := mustRule(t, name, p)
		lims[r] = newLocal(t, syncer.RuleLimit(r))
		return r
	}
	a := rule("a", local.Limit{Algorithm: local.FixedWindow, Quota: 5, Window: time.Hour})
	b := rule("b", local.Limit{Algorithm: local.GCRA, Quota: 1, Window: time.Hour, Burst: 3})
	full := rule("full", local.Limit{Algorithm: local.SlidingWindowLog, Quota: 1, Window: time.Hour})
	t.Run("AllowMulti one script", func(t *testing.T) {
		scriptFlush(t, c)
		assert.True(t, sameAsLocal(t, cen, now, []syncer.Request{{Rule: a, Key: "m", N: 1}, {Rule: b, Key: "m", N: 1}}, lims), "refused")
		assert.True(t, scriptExists(t, c, sha["multi"]), "the multi script was not loaded again")
	})
	t.Run("AllowMulti reserve, pipelined", func(t *testing.T) {
		scriptFlush(t, c)
		assert.True(t, sameAsLocal(t, split, now, []syncer.Request{{Rule: a, Key: "p", N: 1}, {Rule: b, Key: "p", N: 1}}, lims), "refused")
		assert.True(t, scriptExists(t, c, sha["fixed"]), "the pipelined fixed window script was not loaded again")
		assert.True(t, scriptExists(t, c, sha["bucket"]), "the pipelined bucket script was not loaded again")
	})
	t.Run("AllowMulti reserve then refund, pipelined", func(t *testing.T) {
		sameAsLocal(t, cen, now, []syncer.Request{{Rule: full, Key: "p", N: 1}}, lims)
		scriptFlush(t, c)
		assert.False(t, sameAsLocal(t, split, now, []syncer.Request{{Rule: a, Key: "p", N: 1}, {Rule: b, Key: "p", N: 1}, {Rule: full, Key: "p", N: 1}}, lims), "admitted past a full rule")
		assert.True(t, scriptExists(t, c, sha["refund"]), "the refund script was not loaded")
	})
	t.Run("AllowMulti read only, pipelined", func(t *testing.T) {
		scriptFlush(t, c)
		assert.False(t, sameAsLocal(t, split, now, []syncer.Request{{Rule: a, Key: "p", N: 1}, {Rule: b, Key: "p", N: 4}}, lims), "admitted a cost above the burst")
	})
}

// TestNoScriptRestart: a restarted server has no scripts, no state, and the
// pooled connections are dead; after at most a few ErrUnavailable, calls
// succeed again.
func TestNoScriptRestart(t *testing.T) {
	srv := redistest.Start(t)
	c := redistest.Client(t, srv.Addr)
	ks := syncer.Keyspace{Prefix: redistest.Prefix(t)}
	cen := newCentral(t, c, ks)
	hc := &hookClient{UniversalClient: redis.NewClient(redistest.Options(srv.Addr))}
	t.Cleanup(func() { hc.Close() })
	split, err := syncer.NewCentral(syncer.CentralConfig{Client: hc, Keyspace: ks, Timeout: 5 * time.Second})
	require.NoError(t, err)
	now := time.Now().Truncate(time.Hour).Add(time.Hour + time.Minute)
	type call struct {
		name string
		do   func() (bool, error)
	}
	var calls []call
	var rules []*syncer.Rule
	for _, a := range localx.Algorithms() {
		r := mustRule(t, "r-"+a.String(), algoParams(a))
		rules = append(rules, r)
		calls = append(calls, call{"AllowN/" + a.String(), func() (bool, error) {
			d, err := syncer.AllowNAt(context.Background(), cen, now, r, "k", syncer.RuleLimit(r).MaxCost())
			return d.Allowed(), err
		}})
	}
	multi := func(cen *syncer.Central, key string) func() (bool, error) {
		reqs := []syncer.Request{{Rule: rules[0], Key: key, N: 3}, {Rule: rules[3], Key: key, N: 4}}
		return func() (bool, error) {
			return syncer.AllowMulti(context.Background(), cen, now, reqs, make([]local.Decision, 2))
		}
	}
	calls = append(calls, call{"AllowMulti one script", multi(cen, "m")}, call{"AllowMulti reserve", multi(split, "s")})
	for _, cl := range calls { // each takes all there is
		ok, err := cl.do()
		require.NoError(t, err, "%s before the restart", cl.name)
		require.True(t, ok, "%s before the restart: refused", cl.name)
		ok, err = cl.do()
		require.NoError(t, err, "%s before the restart, again", cl.name)
		require.False(t, ok, "%s before the restart, again: want a refusal", cl.name)
	}
	srv.Restart()
	for _, cl := range calls {
		t.Run(cl.name, func(t *testing.T) {
			var ok bool
			var err error
			for i := 0; i < 5; i++ {
				if ok, err = cl.do(); err == nil {
					break
				}
				require.ErrorIs(t, err, syncer.ErrUnavailable, "attempt %d after the restart: want ErrUnavailable (or success)", i)
			}
			require.NoError(t, err, "still failing after 5 attempts")
			assert.True(t, ok, "refused: the restarted server should hold no state")
		})
	}
}

// TestNoScriptCluster: on the shared Cluster, after SCRIPT FLUSH on every
// master, and on one master only (a node that never saw the scripts: new,
// or failed over), the single-rule and the pipelined multi-rule paths
// decide as package local does.
func TestNoScriptCluster(t *testing.T) {
	cc := redistest.ClusterClient(t, redistest.ClusterAddrs(t))
	ctx := context.Background()
	ks := syncer.Keyspace{Prefix: redistest.Prefix(t)}
	cen := newCentral(t, cc, ks)
	flushAll := func(t *testing.T) {
		t.Helper()
		require.NoError(t, cc.ForEachMaster(ctx, func(ctx context.Context, n *redis.Client) error {
			return n.ScriptFlush(ctx).Err()
		}), "SCRIPT FLUSH on every master")
	}
	rules := apartRules(t, cc, ks, "k",
		local.Limit{Algorithm: local.FixedWindow, Quota: 5, Window: time.Hour},
		local.Limit{Algorithm: local.TokenBucket, Quota: 1, Window: time.Hour, Burst: 4},
		local.Limit{Algorithm: local.SlidingWindowLog, Quota: 1, Window: time.Hour})
	lims := map[*syncer.Rule]*local.Limiter{}
	for _, r := range rules {
		lims[r] = newLocal(t, syncer.RuleLimit(r))
	}
	now := time.Now().Truncate(time.Hour).Add(time.Hour + time.Minute)
	t.Run("every master flushed", func(t *testing.T) {
		flushAll(t)
		assert.True(t, sameAsLocal(t, cen, now, []syncer.Request{{Rule: rules[0], Key: "k", N: 1}, {Rule: rules[1], Key: "k", N: 1}, {Rule: rules[2], Key: "k", N: 1}}, lims), "refused")
		flushAll(t) // reserve, refused by the log, refund
		assert.False(t, sameAsLocal(t, cen, now, []syncer.Request{{Rule: rules[0], Key: "k", N: 1}, {Rule: rules[1], Key: "k", N: 1}, {Rule: rules[2], Key: "k", N: 1}}, lims), "admitted past a full rule")
		flushAll(t) // read only
		assert.False(t, sameAsLocal(t, cen, now, []syncer.Request{{Rule: rules[0], Key: "k", N: 1}, {Rule: rules[1], Key: "k", N: 9}}, lims), "admitted a cost above the burst")
	})
	t.Run("one master flushed", func(t *testing.T) {
		state, _ := syncer.Keys(syncer.CentralKeyspace(cen), rules[0], "k")
		node, err := cc.MasterForKey(ctx, state)
		require.NoError(t, err)
		for i := range 3 {
			scriptFlush(t, node)
			got, err := syncer.AllowNAt(ctx, cen, now, rules[0], "k", 1)
			require.NoError(t, err, "call %d", i)
			want := lims[rules[0]].AllowNAt(now, "k", 1)
			assert.Equal(t, localx.OutcomeOf(want), localx.OutcomeOf(got), "call %d on %s: redis, want local's decision", i, node.Options().Addr)
			assert.True(t, scriptExists(t, node, syncer.ScriptHash(rules[0])), "the script was not loaded on %s", node.Options().Addr)
			scriptFlush(t, node)
			sameAsLocal(t, cen, now, []syncer.Request{{Rule: rules[0], Key: "k", N: 1}, {Rule: rules[1], Key: "k", N: 1}}, lims)
			assert.True(t, scriptExists(t, node, syncer.ScriptHashes()["fixed"]), "the pipelined script was not loaded on %s", node.Options().Addr)
		}
	})
}
