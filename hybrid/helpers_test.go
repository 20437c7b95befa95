package hybrid_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/hybrid"
	"github.com/hybridlimit/hybridlimit/internal/clocktest"
	"github.com/hybridlimit/hybridlimit/internal/hybridsim"
	"github.com/hybridlimit/hybridlimit/internal/redistest"
	"github.com/hybridlimit/hybridlimit/internal/synchook"
	"github.com/hybridlimit/hybridlimit/internal/syncx"
	"github.com/hybridlimit/hybridlimit/local"
	"github.com/hybridlimit/hybridlimit/syncer"
)

// Helpers shared by the Limiter's tests: nodes on a virtual clock, and
// a reader of the lease state Redis keeps per window.

// windowStart returns the start, in µs, of the window of length w that
// holds clk's time.
func windowStart(clk *clocktest.Clock, w time.Duration) int64 {
	us := clk.Micros()
	return us - us%w.Microseconds()
}

// epoch2030 is a window-aligned virtual start, far from the real time.
var epoch2030 = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)

const testInterval = 100 * time.Millisecond

// nodeConfig is the Config of a simulated node: manual rounds, the scripts on
// the virtual clock.
func nodeConfig(c redis.UniversalClient, prefix string, clk local.Clock, id string, nodes int) hybrid.Config {
	return hybridsim.Virtual(hybrid.Config{
		Redis: c, Keyspace: syncer.Keyspace{Prefix: prefix}, Clock: clk, Logger: quiet,
		Sync: hybrid.SyncConfig{Interval: testInterval, NodeID: id, Nodes: nodes},
	})
}

// newNode returns a Limiter for cfg, closed when t ends.
func newNode(t testing.TB, cfg hybrid.Config) *hybrid.Limiter {
	t.Helper()
	l, err := hybrid.New(cfg)
	require.NoError(t, err, "New")
	t.Cleanup(func() { l.Close() })
	return l
}

// mustRegister registers r on l and checks the mode it runs in.
func mustRegister(t testing.TB, l *hybrid.Limiter, r hybrid.Rule, want hybrid.Mode) *hybrid.Rule {
	t.Helper()
	rr, err := l.Register(r)
	require.NoError(t, err, "Register %q", r.Name)
	if want != hybrid.Mode(0) {
		require.Equal(t, want, rr.Mode, "the mode rule %q runs in", r.Name)
	}
	return rr
}

func fixed(limit int64, w time.Duration) hybrid.Limit {
	return local.Limit{Algorithm: local.FixedWindow, Quota: limit, Window: w}
}

// syncOK runs a round on l at the clock's time and fails t on an error.
func syncOK(t testing.TB, l *hybrid.Limiter, clk local.Clock) synchook.RoundStats {
	t.Helper()
	st, err := hybridsim.SyncAt(context.Background(), l, clk.Now())
	require.NoError(t, err, "SyncAt")
	return st
}

// syncUntilOK runs rounds until one succeeds (after a restart the pooled
// connections fail once), advancing the clock by step before each retry.
func syncUntilOK(t testing.TB, l *hybrid.Limiter, clk *clocktest.Clock, step time.Duration) {
	t.Helper()
	for i := 0; ; i++ {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, err := hybridsim.SyncAt(ctx, l, clk.Now())
		cancel()
		if err == nil {
			return
		}
		require.ErrorIs(t, err, hybrid.ErrUnavailable, "SyncAt: only Redis's unavailability is retried")
		require.Less(t, i, 20, "SyncAt still fails after %d retries: %v", i, err)
		clk.Add(step)
	}
}

// winState is one window's lease state in Redis: per node, granted (g) and
// used as reported (u), and R = Σ max(g, u).
type winState struct {
	ok   bool // the slot holds this window
	R    int64
	g, u map[string]int64
}

func (s winState) sumU() int64 {
	var t int64
	for _, v := range s.u {
		t += v
	}
	return t
}

// redisKeyBase is the prefix of the Redis keys of a hybrid (rule, key):
// <prefix>:{<rule>:<digest>}: (see syncer.Keyspace).
func redisKeyBase(ks syncer.Keyspace, rule, key string) string {
	return ks.Prefix + ":{" + rule + ":" + syncx.Digest(&ks, key) + "}:"
}

// readWindow reads the window starting at wid (µs) of a fixed-window or
// counter rule's key, from its slot among the three Redis keeps.
func readWindow(t testing.TB, c redis.UniversalClient, ks syncer.Keyspace, rule, key string, w time.Duration, wid int64) winState {
	t.Helper()
	part := "w" + strconv.FormatInt((wid/w.Microseconds())%3, 10)
	h := redistest.WindowLease(t, c, redisKeyBase(ks, rule, key)+"m")[part]
	st := winState{g: map[string]int64{}, u: map[string]int64{}}
	if h["id"] != strconv.FormatInt(wid, 10) {
		return st
	}
	st.ok = true
	for f, v := range h {
		n, err := strconv.ParseInt(v, 10, 64)
		require.NoError(t, err, "%s %s = %q", part, f, v)
		switch {
		case f == "R":
			st.R = n
		case len(f) > 2 && f[:2] == "g.":
			st.g[f[2:]] = n
		case len(f) > 2 && f[:2] == "u.":
			st.u[f[2:]] = n
		}
	}
	return st
}

// snapshot returns every field of a key's Redis state (meta and window
// slots), for comparisons.
func snapshot(t testing.TB, c redis.UniversalClient, ks syncer.Keyspace, rule, key string) map[string]map[string]string {
	t.Helper()
	return redistest.WindowLease(t, c, redisKeyBase(ks, rule, key)+"m")
}

// exhaust admits requests of cost 1 for key on l at the clock's time until
// one is refused, and returns how many were admitted and the refusal.
func exhaust(t testing.TB, l *hybrid.Limiter, r *hybrid.Rule, key string, max int) (int64, local.Decision) {
	t.Helper()
	var n int64
	for range max {
		d, err := l.Allow(context.Background(), r, key)
		require.NoError(t, err, "Allow")
		if !d.Allowed() {
			return n, d
		}
		n++
	}
	require.FailNow(t, "the limit holds", "still admitting after %d requests", max)
	return n, local.Decision{}
}

// syncWanted reports, and clears, whether a key of l asked for a round of
// either kind: the steppers, in 10ms steps, run a full round for both.
func syncWanted(l *hybrid.Limiter) bool {
	early, first := hybridsim.SyncWanted(l), hybridsim.SyncFirstWanted(l)
	return early || first
}

// twoNodes returns nodes a and b (two nodes in all) on one Redis, each with
// rule "r" of lim under policy.
func twoNodes(t *testing.T, addr, prefix string, clk *clocktest.Clock, lim hybrid.Limit, policy hybrid.Policy) ([]*hybrid.Limiter, []*hybrid.Rule) {
	t.Helper()
	nodes := []*hybrid.Limiter{
		newNode(t, nodeConfig(redistest.Client(t, addr), prefix, clk, "a", 2)),
		newNode(t, nodeConfig(redistest.Client(t, addr), prefix, clk, "b", 2)),
	}
	rules := make([]*hybrid.Rule, 2)
	for i, l := range nodes {
		rules[i] = mustRegister(t, l, hybrid.Rule{Name: "r", Limit: lim, Policy: policy}, hybrid.Hybrid)
	}
	return nodes, rules
}

// tally counts what a test's nodes admit of key "k", and how much of it
// their failure policies decided.
type tally struct{ total, byPolicy int64 }

// allow decides one request for "k" on l's rule r and counts it; a decision
// returns no error, Redis down or not.
func (c *tally) allow(t *testing.T, l *hybrid.Limiter, r *hybrid.Rule) bool {
	t.Helper()
	d, err := l.Allow(context.Background(), r, "k")
	require.NoError(t, err, "%+v: decisions return no error while Redis is down", d)
	if d.Allowed() {
		c.total++
		if d.Degraded() {
			c.byPolicy++
		}
	}
	return d.Allowed()
}

// decidesAsNew checks that key old, whose state was left in an earlier
// layout, decides as key fresh, a new one, over 20 sync rounds of three
// requests each.
func decidesAsNew(t *testing.T, l *hybrid.Limiter, r *hybrid.Rule, clk *clocktest.Clock, old, fresh string) {
	t.Helper()
	for i := range 20 {
		for range 3 {
			d, err := l.Allow(context.Background(), r, old)
			require.NoError(t, err)
			want, err := l.Allow(context.Background(), r, fresh)
			require.NoError(t, err)
			require.Equal(t, want, d, "step %d: the key of the earlier layout decides as a new key", i)
		}
		syncOK(t, l, clk)
		clk.Add(10 * time.Millisecond)
	}
}
