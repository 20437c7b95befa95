package httplimit_test

import (
	"errors"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/hybrid"
	"github.com/hybridlimit/hybridlimit/hybrid/httplimit"
	"github.com/hybridlimit/hybridlimit/internal/clocktest"
	"github.com/hybridlimit/hybridlimit/internal/leakcheck"
)

func perIP(id, endpoint string, limit int64, window time.Duration) httplimit.Rule {
	return httplimit.Rule{ID: id, Key: httplimit.KeyIP, Endpoint: endpoint, Algorithm: hybrid.FixedWindow, Quota: limit, Window: window}
}

// state returns the limiter's figures for rule r's key now, charging
// nothing: Register returns the registered rule for the same definition.
func state(t *testing.T, l *hybrid.Limiter, r httplimit.Rule, key string) hybrid.Decision {
	t.Helper()
	lim := hybrid.Limit{Algorithm: r.Algorithm, Quota: r.Quota, Window: r.Window, Burst: r.Burst}
	hr, err := l.Register(hybrid.Rule{Name: r.ID, Limit: lim})
	require.NoError(t, err)
	d, err := l.AllowN(t.Context(), hr, key, 0)
	require.NoError(t, err)
	return d
}

// TestHeaders checks every emitted field, parsed back, against the
// limiter's state, then the refusal: 429, Retry-After ≥ t, the problem.
func TestHeaders(t *testing.T) {
	leakcheck.Check(t)
	clk := clocktest.New(t0)
	clk.Add(3 * time.Second)
	l := newLimiter(t, clk)
	rule := perIP("per-ip", "GET /", 5, 10*time.Second)
	m, err := httplimit.New(l, httplimit.Config{Rules: []httplimit.Rule{rule}, RateLimitHeaders: true})
	require.NoError(t, err)
	ts := serve(t, m, okHandler)

	for i := range 5 {
		resp, body := get(t, ts, "/")
		require.Equal(t, http.StatusOK, resp.StatusCode, "request %d", i)
		assert.Equal(t, "ok", body)
		st := state(t, l, rule, "127.0.0.1")
		assert.Equal(t, int64(4-i), st.Remaining())
		assert.Equal(t, st.Capacity(), intHeader(t, resp, "X-RateLimit-Limit"))
		assert.Equal(t, st.Remaining(), intHeader(t, resp, "X-RateLimit-Remaining"))
		assert.Equal(t, int64(7), intHeader(t, resp, "X-RateLimit-Reset"))
		pol, err := parseSFList(resp.Header.Get("RateLimit-Policy"))
		require.NoError(t, err)
		assert.Equal(t, []sfItem{{"per-ip", map[string]int64{"q": 5, "w": 10}}}, pol)
		rl, err := parseSFList(resp.Header.Get("RateLimit"))
		require.NoError(t, err)
		assert.Equal(t, []sfItem{{"per-ip", map[string]int64{"r": st.Remaining(), "t": 7}}}, rl)
		assert.Empty(t, resp.Header.Values("Retry-After"))
	}
	resp, body := get(t, ts, "/")
	require.Equal(t, http.StatusTooManyRequests, resp.StatusCode)
	rl, err := parseSFList(resp.Header.Get("RateLimit"))
	require.NoError(t, err)
	require.Len(t, rl, 1)
	assert.Equal(t, int64(0), rl[0].Params["r"])
	retry := intHeader(t, resp, "Retry-After")
	assert.GreaterOrEqual(t, retry, rl[0].Params["t"])
	assert.Equal(t, int64(7), retry)
	assert.Equal(t, int64(0), intHeader(t, resp, "X-RateLimit-Remaining"))
	p := parseProblem(t, resp, body)
	assert.Equal(t, "https://iana.org/assignments/http-problem-types#quota-exceeded", p.Type)
	assert.Equal(t, http.StatusTooManyRequests, p.Status)
	assert.NotEmpty(t, p.Title)
	assert.Equal(t, []string{"per-ip"}, p.Violated)
	assert.Equal(t, int64(0), state(t, l, rule, "127.0.0.1").Remaining())

	// Other methods and paths are not limited by a "GET /" rule... but
	// every path is under "/": a POST passes, with no headers.
	resp, _ = get(t, ts, "/x")
	assert.Equal(t, http.StatusTooManyRequests, resp.StatusCode)
	req, err := http.NewRequest(http.MethodPost, ts.URL+"/", nil)
	require.NoError(t, err)
	presp, err := ts.Client().Do(req)
	require.NoError(t, err)
	presp.Body.Close()
	assert.Equal(t, http.StatusOK, presp.StatusCode)
	assert.Empty(t, presp.Header.Values("X-RateLimit-Limit"))

	// The window ends: admitted again.
	clk.Add(7 * time.Second)
	resp, _ = get(t, ts, "/")
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Equal(t, int64(4), intHeader(t, resp, "X-RateLimit-Remaining"))
	assert.Equal(t, int64(10), intHeader(t, resp, "X-RateLimit-Reset"))
}

// TestHeaderOptions: families switched off and on, Reset as Unix time,
// Retry-After jittered but never below its base.
func TestHeaderOptions(t *testing.T) {
	clk := clocktest.New(t0)
	l := newLimiter(t, clk)
	rule := httplimit.Rule{ID: "bucket", Key: httplimit.KeyIP, Algorithm: hybrid.TokenBucket, Quota: 1, Window: 2 * time.Second, Burst: 2}
	m, err := httplimit.New(l, httplimit.Config{Rules: []httplimit.Rule{rule}, ResetUnix: true, Clock: clk, RetryJitter: 3 * time.Second})
	require.NoError(t, err)
	ts := serve(t, m, okHandler)
	resp, _ := get(t, ts, "/")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Equal(t, int64(2), intHeader(t, resp, "X-RateLimit-Limit"))
	assert.Equal(t, int64(1), intHeader(t, resp, "X-RateLimit-Remaining"))
	assert.Equal(t, t0.Unix()+2, intHeader(t, resp, "X-RateLimit-Reset"))
	assert.Empty(t, resp.Header.Values("RateLimit"))
	assert.Empty(t, resp.Header.Values("RateLimit-Policy"))
	get(t, ts, "/")
	seen := map[int64]bool{}
	for range 40 {
		resp, _ = get(t, ts, "/")
		require.Equal(t, http.StatusTooManyRequests, resp.StatusCode)
		retry := intHeader(t, resp, "Retry-After")
		assert.GreaterOrEqual(t, retry, int64(2))
		assert.LessOrEqual(t, retry, int64(5))
		seen[retry] = true
	}
	assert.Greater(t, len(seen), 1, "jitter varies Retry-After")

	off, err := httplimit.New(newLimiter(t, clk), httplimit.Config{Rules: []httplimit.Rule{rule}, DisableXRateLimit: true})
	require.NoError(t, err)
	ts = serve(t, off, okHandler)
	resp, _ = get(t, ts, "/")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	for _, h := range []string{"X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset", "RateLimit", "RateLimit-Policy"} {
		assert.Empty(t, resp.Header.Values(h), h)
	}
}

// TestAllOrNothing: several rules on one request; one refusing charges
// none, and the headers describe all of them.
func TestAllOrNothing(t *testing.T) {
	clk := clocktest.New(t0)
	l := newLimiter(t, clk)
	perSecond := perIP("per-second", "/", 3, time.Second)
	perMinute := httplimit.Rule{ID: "per-minute", Key: httplimit.KeyIP, Endpoint: "/api/", Algorithm: hybrid.SlidingWindowCounter, Quota: 10, Window: time.Minute}
	other := perIP("other-path", "/other", 1, time.Minute)
	m, err := httplimit.New(l, httplimit.Config{Rules: []httplimit.Rule{perSecond, perMinute, other}, RateLimitHeaders: true})
	require.NoError(t, err)
	ts := serve(t, m, okHandler)

	for i := range 3 {
		resp, _ := get(t, ts, "/api/x")
		require.Equal(t, http.StatusOK, resp.StatusCode, i)
		pol, err := parseSFList(resp.Header.Get("RateLimit-Policy"))
		require.NoError(t, err)
		assert.Equal(t, []sfItem{{"per-second", map[string]int64{"q": 3, "w": 1}}, {"per-minute", map[string]int64{"q": 10, "w": 60}}}, pol)
		rl, err := parseSFList(resp.Header.Get("RateLimit"))
		require.NoError(t, err)
		require.Len(t, rl, 1)
		assert.Equal(t, "per-second", rl[0].Name, "the most restrictive")
		assert.Equal(t, int64(2-i), rl[0].Params["r"])
	}
	for range 3 {
		resp, body := get(t, ts, "/api/x")
		require.Equal(t, http.StatusTooManyRequests, resp.StatusCode)
		assert.Equal(t, []string{"per-second"}, parseProblem(t, resp, body).Violated)
	}
	assert.Equal(t, int64(7), state(t, l, perMinute, "127.0.0.1").Remaining(), "refused requests are charged to no rule")
	assert.Equal(t, int64(1), state(t, l, other, "127.0.0.1").Remaining(), "an unmatched rule is not charged")

	clk.Add(time.Second)
	resp, _ := get(t, ts, "/api/x")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Equal(t, int64(6), state(t, l, perMinute, "127.0.0.1").Remaining())
}

// TestKeysTiersOverrides: API keys and users as keys, tiers selecting
// rules and overriding limits, single keys overriding them, and costs.
func TestKeysTiersOverrides(t *testing.T) {
	l := newLimiter(t, clocktest.New(t0))
	byKey := httplimit.Rule{ID: "by-key", Key: httplimit.KeyAPIKey, Algorithm: hybrid.FixedWindow, Quota: 2, Window: time.Minute,
		Overrides: map[string]int64{"pro": 5, "vip-key": 1}}
	freeOnly := httplimit.Rule{ID: "free-search", Key: httplimit.KeyAPIKey, Endpoint: "/search", Algorithm: hybrid.GCRA, Quota: 1, Window: time.Minute, Tier: "free"}
	byUser := httplimit.Rule{ID: "by-user", Key: httplimit.KeyUser, Endpoint: "/me", Algorithm: hybrid.FixedWindow, Quota: 10, Window: time.Minute, Cost: 4}
	m, err := httplimit.New(l, httplimit.Config{
		Rules:    []httplimit.Rule{byKey, freeOnly, byUser},
		Tiers:    map[string]string{"pro-key": "pro", "free-key": "free"},
		UserFunc: func(r *http.Request) (string, bool) { u := r.URL.Query().Get("user"); return u, u != "" },
	})
	require.NoError(t, err)
	ts := serve(t, m, okHandler)

	admitted := func(path, key string) int {
		n := 0
		for range 8 {
			resp, _ := get(t, ts, path, "X-API-Key: "+key)
			if resp.StatusCode == http.StatusOK {
				n++
			}
		}
		return n
	}
	assert.Equal(t, 5, admitted("/", "pro-key"), "the pro tier's override")
	assert.Equal(t, 2, admitted("/", "plain-key"), "no tier: the rule's limit")
	assert.Equal(t, 1, admitted("/", "vip-key"), "a single key's override")
	assert.Equal(t, 1, admitted("/search", "free-key"), "a free-tier rule, and by-key's 2 left")
	resp, _ := get(t, ts, "/nokey")
	assert.Equal(t, http.StatusOK, resp.StatusCode, "no API key: api_key rules do not apply")
	assert.Empty(t, resp.Header.Values("X-RateLimit-Limit"))

	codes := []int{}
	for range 4 {
		resp, _ := get(t, ts, "/me?user=ann")
		codes = append(codes, resp.StatusCode)
	}
	assert.Equal(t, []int{200, 200, 429, 429}, codes, "cost 4 of 10")
	resp, _ = get(t, ts, "/me?user=bob")
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Equal(t, int64(6), intHeader(t, resp, "X-RateLimit-Remaining"))

	// A cost per request.
	m2, err := httplimit.New(newLimiter(t, clocktest.New(t0)), httplimit.Config{
		Rules: []httplimit.Rule{perIP("ip", "/", 10, time.Minute)},
		Cost: func(r *http.Request) int64 {
			n, _ := strconv.ParseInt(r.URL.Query().Get("n"), 10, 64)
			return n
		},
	})
	require.NoError(t, err)
	ts2 := serve(t, m2, okHandler)
	resp, _ = get(t, ts2, "/?n=7")
	assert.Equal(t, int64(3), intHeader(t, resp, "X-RateLimit-Remaining"))
	resp, _ = get(t, ts2, "/")
	assert.Equal(t, int64(2), intHeader(t, resp, "X-RateLimit-Remaining"), "0: the rule's cost, 1")
	resp, _ = get(t, ts2, "/?n=3")
	assert.Equal(t, http.StatusTooManyRequests, resp.StatusCode)
}

// TestShadow: shadow mode on the same traffic as enforcement counts as many
// would-be refusals as enforcement refuses, and refuses none.
func TestShadow(t *testing.T) {
	clk := clocktest.New(t0)
	rules := []httplimit.Rule{
		perIP("ip-second", "/", 4, time.Second),
		{ID: "key-minute", Key: httplimit.KeyAPIKey, Algorithm: hybrid.TokenBucket, Quota: 20, Window: time.Minute, Burst: 6},
	}
	mpE, readE := meterReader()
	mpS, readS := meterReader()
	enforce, err := httplimit.New(newLimiter(t, clk), httplimit.Config{Rules: rules, MeterProvider: mpE})
	require.NoError(t, err)
	shadow, err := httplimit.New(newLimiter(t, clk), httplimit.Config{Rules: rules, MeterProvider: mpS, Shadow: true})
	require.NoError(t, err)
	tsE, tsS := serve(t, enforce, okHandler), serve(t, shadow, okHandler)

	refused := 0
	for i := range 300 {
		key := "X-API-Key: k" + strconv.Itoa(i%3)
		re, _ := get(t, tsE, "/", key)
		rs, _ := get(t, tsS, "/", key)
		require.Equal(t, http.StatusOK, rs.StatusCode, "shadow never refuses")
		if re.StatusCode == http.StatusTooManyRequests {
			refused++
			assert.Equal(t, int64(0), intHeader(t, rs, "X-RateLimit-Remaining"), "shadow sets the headers")
		}
		if i%7 == 0 {
			clk.Add(300 * time.Millisecond)
		}
	}
	require.Greater(t, refused, 30)
	assert.Equal(t, int64(refused), readE(t, "hybridlimit.http.refused"))
	assert.Equal(t, int64(refused), readS(t, "hybridlimit.http.shadow.refused"))
	assert.Equal(t, int64(0), readS(t, "hybridlimit.http.refused"))

	// A shadow rule beside an enforced one: only the enforced one refuses.
	mp, read := meterReader()
	one := []httplimit.Rule{perIP("enforced", "/", 3, time.Minute), perIP("trial", "/", 1, time.Minute)}
	one[1].Shadow = true
	mixed, err := httplimit.New(newLimiter(t, clk), httplimit.Config{Rules: one, MeterProvider: mp})
	require.NoError(t, err)
	ts := serve(t, mixed, okHandler)
	codes := []int{}
	for range 4 {
		resp, _ := get(t, ts, "/")
		codes = append(codes, resp.StatusCode)
	}
	assert.Equal(t, []int{200, 200, 200, 429}, codes)
	assert.Equal(t, int64(2), read(t, "hybridlimit.http.shadow.refused"))
	assert.Equal(t, int64(1), read(t, "hybridlimit.http.refused"))
}

// TestSetRules: unchanged rules keep their counters, a changed limit keeps
// consumption, a bad set is refused whole and the old rules keep serving,
// and a removed rule is unregistered: a Local one comes back afresh.
func TestSetRules(t *testing.T) {
	l := newLimiter(t, clocktest.New(t0))
	a, b := perIP("a", "/a", 10, time.Minute), perIP("b", "/b", 10, time.Minute)
	m, err := httplimit.New(l, httplimit.Config{Rules: []httplimit.Rule{a, b}})
	require.NoError(t, err)
	ts := serve(t, m, okHandler)
	for range 4 {
		get(t, ts, "/b")
	}
	remaining := func(path string) int64 {
		resp, _ := get(t, ts, path)
		return intHeader(t, resp, "X-RateLimit-Remaining")
	}
	require.Equal(t, int64(9), remaining("/a"))

	b2 := b
	b2.Quota = 20
	require.NoError(t, m.SetRules([]httplimit.Rule{a, b2}))
	assert.Equal(t, int64(8), remaining("/a"), "a unchanged keeps its count")
	assert.Equal(t, int64(15), remaining("/b"), "b's new limit keeps the 4 consumed")
	assert.Equal(t, []httplimit.Rule{a, b2}, m.Rules())

	bad := perIP("c", "/", 0, time.Minute)
	err = m.SetRules([]httplimit.Rule{a, bad})
	var re *httplimit.RuleError
	require.ErrorAs(t, err, &re)
	assert.ErrorAs(t, err, new(*httplimit.RuleError))
	assert.Equal(t, 1, re.Index)
	assert.Equal(t, "c", re.ID)
	assert.Equal(t, "max_requests", re.Field)
	assert.Equal(t, int64(14), remaining("/b"), "the old rules keep serving")

	require.NoError(t, m.SetRules([]httplimit.Rule{b2}))
	assert.Equal(t, int64(13), remaining("/b"))
	resp, _ := get(t, ts, "/a")
	assert.Empty(t, resp.Header.Values("X-RateLimit-Limit"), "a removed")
	assert.Equal(t, 1, l.Stats().Rules, "a unregistered")
	require.NoError(t, m.SetRules([]httplimit.Rule{a, b2}))
	assert.Equal(t, int64(9), remaining("/a"), "a back afresh: a Local rule's state went with it")
	assert.Equal(t, 2, l.Stats().Rules)
}

func TestRuleErrors(t *testing.T) {
	ok := perIP("ok", "/", 1, time.Second)
	with := func(f func(r *httplimit.Rule)) httplimit.Rule {
		r := ok
		f(&r)
		return r
	}
	for _, tc := range []struct {
		rule      httplimit.Rule
		extra     []httplimit.Rule
		index     int
		id, field string
	}{
		{rule: with(func(r *httplimit.Rule) { r.ID = "" }), id: "", field: "id"},
		{rule: with(func(r *httplimit.Rule) { r.ID = "a{b}" }), id: "a{b}", field: "id"},
		{rule: with(func(r *httplimit.Rule) { r.Key = "cookie" }), id: "ok", field: "key"},
		{rule: with(func(r *httplimit.Rule) { r.Endpoint = "GET api" }), id: "ok", field: "endpoint"},
		{rule: with(func(r *httplimit.Rule) { r.Algorithm = 0 }), id: "ok", field: "algorithm"},
		{rule: with(func(r *httplimit.Rule) { r.Algorithm = 99 }), id: "ok", field: "algorithm"},
		{rule: with(func(r *httplimit.Rule) { r.Quota = 0 }), id: "ok", field: "max_requests"},
		{rule: with(func(r *httplimit.Rule) { r.Quota = 1 << 60 }), id: "ok", field: "max_requests"},
		{rule: with(func(r *httplimit.Rule) { r.Window = 0 }), id: "ok", field: "window"},
		{rule: with(func(r *httplimit.Rule) { r.Window = time.Nanosecond }), id: "ok", field: "window"},
		{rule: with(func(r *httplimit.Rule) { r.Burst = 3 }), id: "ok", field: "burst"},
		{rule: with(func(r *httplimit.Rule) { r.SubWindows = 2 }), id: "ok", field: "sub_windows"},
		{rule: with(func(r *httplimit.Rule) { r.Algorithm, r.Anchored = hybrid.GCRA, true }), id: "ok", field: "anchored"},
		{rule: with(func(r *httplimit.Rule) { r.Cost = -1 }), id: "ok", field: "cost"},
		{rule: with(func(r *httplimit.Rule) { r.Cost = 2 }), id: "ok", field: "cost"},
		{rule: with(func(r *httplimit.Rule) { r.Overrides = map[string]int64{"pro": 0} }), id: "ok", field: `overrides["pro"]`},
		{rule: with(func(r *httplimit.Rule) { r.Mode = hybrid.Central }), id: "ok", field: "mode"},
		{rule: with(func(r *httplimit.Rule) { r.Policy = 9 }), id: "ok", field: "policy"},
		{rule: with(func(r *httplimit.Rule) { r.Wait = 9 }), id: "ok", field: "wait"},
		{rule: with(func(r *httplimit.Rule) { r.Global = true }), id: "ok", field: "global"},
		{rule: with(func(r *httplimit.Rule) { r.Global, r.Algorithm = true, hybrid.GCRA }), id: "ok", field: "global"},
		{rule: ok, extra: []httplimit.Rule{ok}, index: 1, id: "ok", field: "id"},
	} {
		t.Run(tc.field, func(t *testing.T) {
			_, err := httplimit.New(newLimiter(t, clocktest.New(t0)), httplimit.Config{Rules: append([]httplimit.Rule{tc.rule}, tc.extra...)})
			var re *httplimit.RuleError
			require.ErrorAs(t, err, &re)
			assert.ErrorAs(t, err, new(*httplimit.RuleError))
			assert.Equal(t, tc.index, re.Index)
			assert.Equal(t, tc.id, re.ID)
			assert.Equal(t, tc.field, re.Field)
			assert.Contains(t, err.Error(), tc.field+": ")
		})
	}
	// Mode and policy cannot change under one ID.
	l := newLimiter(t, clocktest.New(t0))
	m, err := httplimit.New(l, httplimit.Config{Rules: []httplimit.Rule{ok}})
	require.NoError(t, err)
	err = m.SetRules([]httplimit.Rule{with(func(r *httplimit.Rule) { r.Policy = hybrid.FailOpen })})
	var re *httplimit.RuleError
	require.ErrorAs(t, err, &re)
	assert.Equal(t, "policy", re.Field)
}

func TestConfigErrors(t *testing.T) {
	l := newLimiter(t, clocktest.New(t0))
	for _, tc := range []struct {
		field string
		cfg   httplimit.Config
	}{
		{"TrustedProxies[1]", httplimit.Config{TrustedProxies: []string{"10.0.0.0/8", "10.0.0.300"}}},
		{"TrustedHops", httplimit.Config{TrustedHops: -1}},
		{"TrustedHops", httplimit.Config{TrustedHops: 1, TrustedProxies: []string{"10.0.0.1"}}},
		{"IPv6Prefix", httplimit.Config{IPv6Prefix: 129}},
		{"RetryJitter", httplimit.Config{RetryJitter: -time.Second}},
		{"ClientIPHeader", httplimit.Config{ClientIPHeader: "X-Real-IP"}},
		{"APIKeyHeader", httplimit.Config{APIKeyHeader: "X Key"}},
	} {
		t.Run(tc.field, func(t *testing.T) {
			_, err := httplimit.New(l, tc.cfg)
			require.ErrorIs(t, err, httplimit.ErrInvalidConfig)
			assert.Contains(t, err.Error(), tc.field)
		})
	}
	_, err := httplimit.New(nil, httplimit.Config{})
	assert.True(t, errors.Is(err, httplimit.ErrInvalidConfig))
}

// TestLongHeaders: header values longer than the middleware's block are
// sent whole.
func TestLongHeaders(t *testing.T) {
	var rules []httplimit.Rule
	var want []sfItem
	for i := range 4 {
		id := "a-rather-long-rule-identifier-for-policy-" + strconv.Itoa(i)
		rules = append(rules, perIP(id, "/", int64(100+i), time.Minute))
		want = append(want, sfItem{id, map[string]int64{"q": int64(100 + i), "w": 60}})
	}
	m, err := httplimit.New(newLimiter(t, clocktest.New(t0)), httplimit.Config{Rules: rules, RateLimitHeaders: true})
	require.NoError(t, err)
	resp, _ := get(t, serve(t, m, okHandler), "/")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Greater(t, len(resp.Header.Get("RateLimit-Policy")), 112)
	pol, err := parseSFList(resp.Header.Get("RateLimit-Policy"))
	require.NoError(t, err)
	assert.Equal(t, want, pol)
	rl, err := parseSFList(resp.Header.Get("RateLimit"))
	require.NoError(t, err)
	assert.Equal(t, []sfItem{{want[0].Name, map[string]int64{"r": 99, "t": 60}}}, rl)
	assert.Equal(t, int64(99), intHeader(t, resp, "X-RateLimit-Remaining"))
}
