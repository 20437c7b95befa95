package httplimit_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/hybrid"
	"github.com/hybridlimit/hybridlimit/hybrid/httplimit"
	"github.com/hybridlimit/hybridlimit/internal/clocktest"
	"github.com/hybridlimit/hybridlimit/internal/hybridsim"
	"github.com/hybridlimit/hybridlimit/internal/leakcheck"
	"github.com/hybridlimit/hybridlimit/internal/redistest"
)

// TestMixedRuleSet: one rule set holding a per-IP Local rule, a per-user
// Hybrid quota and a per-API-key Central one, put in force by SetRules over
// a real listener and Redis. Each rule in turn refuses a request: 429 with
// the refusing rule's headers and problem, and the other rules are not
// charged for it.
func TestMixedRuleSet(t *testing.T) {
	leakcheck.Check(t)
	clk := clocktest.New(t0)
	l, err := hybrid.New(hybridsim.Virtual(hybrid.Config{
		Redis: redistest.Client(t, redistest.Addr(t)), Keyspace: hybrid.Keyspace{Prefix: redistest.Prefix(t)},
		Clock: clk, Sync: hybrid.SyncConfig{NodeID: "a", Nodes: 1},
	}))
	require.NoError(t, err)
	t.Cleanup(func() { l.Close() })
	sync := func() {
		t.Helper()
		_, err := hybridsim.SyncAt(t.Context(), l, clk.Now())
		require.NoError(t, err)
	}

	rule := func(id string, key httplimit.KeyType, limit int64, mode hybrid.Mode) httplimit.Rule {
		return httplimit.Rule{ID: id, Key: key, Endpoint: "/api/", Algorithm: hybrid.FixedWindow, Quota: limit, Window: time.Minute, Mode: mode}
	}
	ip := rule("ip", httplimit.KeyIP, 5, hybrid.Local)
	user := rule("user", httplimit.KeyUser, 2, hybrid.Hybrid)
	apiKey := rule("key", httplimit.KeyAPIKey, 3, hybrid.Central)
	m, err := httplimit.New(l, httplimit.Config{
		Rules:            []httplimit.Rule{ip},
		RateLimitHeaders: true,
		UserFunc:         func(r *http.Request) (string, bool) { u := r.Header.Get("X-User"); return u, u != "" },
	})
	require.NoError(t, err)
	require.NoError(t, m.SetRules([]httplimit.Rule{ip, user, apiKey}), "a rule set mixing modes")
	ts := serve(t, m, okHandler)

	left := func(r httplimit.Rule, key string) int64 { return leftOf(t, l, r, key) }
	const peer = "127.0.0.1"
	send := func(u, k string, want int) *http.Response {
		t.Helper()
		resp, body := get(t, ts, "/api/x", "X-User: "+u, "X-API-Key: "+k)
		require.Equal(t, want, resp.StatusCode, "user %s, key %s: %s", u, k, body)
		if want == http.StatusTooManyRequests {
			checkRefusal(t, resp, body)
		}
		return resp
	}
	refusedBy := func(resp *http.Response, r httplimit.Rule) {
		t.Helper()
		assert.Equal(t, r.Quota, intHeader(t, resp, "X-RateLimit-Limit"), "the refusing rule's limit")
		items, err := parseSFList(resp.Header.Get("RateLimit"))
		require.NoError(t, err)
		assert.Equal(t, r.ID, items[0].Name)
	}

	// The hybrid rule, refusing: alice's two admitted (the first on the
	// cold-start allowance, the second on the lease), her third refused.
	send("alice", "k1", http.StatusOK)
	sync()
	send("alice", "k1", http.StatusOK)
	refusedBy(send("alice", "k1", http.StatusTooManyRequests), user)
	assert.Equal(t, int64(3), left(ip, peer), "ip charged by a refused request")
	assert.Equal(t, int64(1), left(apiKey, "k1"), "key charged by a refused request")

	// The central rule, refusing: k1's third admitted, its fourth refused.
	send("bob", "k1", http.StatusOK)
	sync()
	refusedBy(send("bob", "k1", http.StatusTooManyRequests), apiKey)
	assert.Equal(t, int64(2), left(ip, peer), "ip charged by a refused request")
	assert.Equal(t, int64(1), left(user, "bob"), "user charged by a refused request")

	// The local rule, refusing: the IP's last two admitted, the next refused.
	send("carol", "k2", http.StatusOK)
	sync()
	send("carol", "k2", http.StatusOK)
	refusedBy(send("dave", "k3", http.StatusTooManyRequests), ip)
	assert.Equal(t, int64(2), left(user, "dave"), "user charged by a refused request")
	assert.Equal(t, int64(3), left(apiKey, "k3"), "key charged by a refused request")
	assert.Equal(t, int64(0), left(ip, peer))
	assert.Equal(t, int64(0), left(user, "carol"))
	assert.Equal(t, int64(1), left(apiKey, "k2"))
}

// TestMixedRulesFile: a rules file mixing a Local per-IP rule with a
// Hybrid per-user one (the set docs/http.md shows) parses and goes into
// force on a Limiter with Redis.
func TestMixedRulesFile(t *testing.T) {
	rules, err := httplimit.ParseRules([]byte(`version: 1
rules:
  - {id: api-ip, key: ip, endpoint: /api/, algorithm: gcra, max_requests: 50, window: 1s, burst: 100, mode: local}
  - {id: api-user, key: user, endpoint: /api/, algorithm: sliding_window_counter, max_requests: 1000, window: 1h, mode: hybrid}
`))
	require.NoError(t, err)
	require.Len(t, rules, 2)
	assert.Equal(t, hybrid.Local, rules[0].Mode)
	assert.Equal(t, hybrid.Hybrid, rules[1].Mode)
	l, err := hybrid.New(hybridsim.Manual(hybrid.Config{
		Redis: redistest.Client(t, redistest.Addr(t)), Keyspace: hybrid.Keyspace{Prefix: redistest.Prefix(t)},
	}))
	require.NoError(t, err)
	t.Cleanup(func() { l.Close() })
	m, err := httplimit.New(l, httplimit.Config{})
	require.NoError(t, err)
	require.NoError(t, m.SetRules(rules))
	assert.Len(t, m.Rules(), 2)
}

// checkRefusal checks a 429 of one rule: its problem names the rule, as
// RateLimit does, with Retry-After at least 1 and nothing remaining.
func checkRefusal(t *testing.T, resp *http.Response, body string) {
	t.Helper()
	p := parseProblem(t, resp, body)
	assert.Len(t, p.Violated, 1, "violated: %v", p.Violated)
	assert.GreaterOrEqual(t, intHeader(t, resp, "Retry-After"), int64(1))
	assert.Equal(t, int64(0), intHeader(t, resp, "X-RateLimit-Remaining"))
	items, err := parseSFList(resp.Header.Get("RateLimit"))
	require.NoError(t, err)
	require.Len(t, items, 1)
	assert.Equal(t, p.Violated, []string{items[0].Name}, "RateLimit names the refusing rule")
}

// leftOf returns what fixed-window rule r has left for key on l, charging
// nothing: Register returns the registered rule for the same definition.
func leftOf(t *testing.T, l *hybrid.Limiter, r httplimit.Rule, key string) int64 {
	t.Helper()
	hr, err := l.Register(hybrid.Rule{Name: r.ID, Limit: hybrid.Limit{Algorithm: hybrid.FixedWindow, Quota: r.Quota, Window: r.Window}, Mode: r.Mode})
	require.NoError(t, err)
	require.Equal(t, r.Mode, hr.Mode)
	d, err := l.AllowN(t.Context(), hr, key, 0)
	require.NoError(t, err)
	return d.Remaining()
}
