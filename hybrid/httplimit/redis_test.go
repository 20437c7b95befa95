package httplimit_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/hybrid"
	"github.com/hybridlimit/hybridlimit/hybrid/httplimit"
	"github.com/hybridlimit/hybridlimit/internal/redistest"
)

// redisLimiter returns a Limiter of srv whose rules run in mode, closed
// when t ends.
func redisLimiter(t *testing.T, srv *redistest.Server, mode hybrid.Mode) *hybrid.Limiter {
	t.Helper()
	l, err := hybrid.New(hybrid.Config{
		Redis:    redistest.Client(t, srv.Addr),
		Keyspace: hybrid.Keyspace{Prefix: redistest.Prefix(t)},
		Mode:     mode,
		Timeout:  300 * time.Millisecond,
	})
	require.NoError(t, err)
	t.Cleanup(func() { l.Close() })
	return l
}

// TestRedisKilled: with Redis killed under the middleware, each rule's
// failure policy decides, and no request is answered 500: FailClosed's
// refusals are 503s of their own problem type, without figures of a limit
// no one checked; FailLocal's, on this node's part of the limit, 429s.
func TestRedisKilled(t *testing.T) {
	srv := redistest.Start(t)
	mp, read := meterReader()
	l := redisLimiter(t, srv, hybrid.Central)
	rule := func(id, endpoint string, p hybrid.Policy) httplimit.Rule {
		r := perIP(id, endpoint, 3, time.Minute)
		r.Policy = p
		return r
	}
	m, err := httplimit.New(l, httplimit.Config{MeterProvider: mp, RateLimitHeaders: true, Rules: []httplimit.Rule{
		rule("open", "/open", hybrid.FailOpen),
		rule("closed", "/closed", hybrid.FailClosed),
		rule("local", "/local", hybrid.FailLocal),
	}})
	require.NoError(t, err)
	ts := serve(t, m, okHandler)

	for _, p := range []string{"/open", "/closed", "/local"} {
		resp, _ := get(t, ts, p)
		require.Equal(t, http.StatusOK, resp.StatusCode, p)
		assert.Equal(t, int64(2), intHeader(t, resp, "X-RateLimit-Remaining"), p)
	}
	require.Equal(t, int64(0), read(t, "hybridlimit.http.degraded"))

	srv.Kill()
	codes := map[string][]int{}
	for range 5 {
		for _, p := range []string{"/open", "/closed", "/local"} {
			resp, body := get(t, ts, p)
			codes[p] = append(codes[p], resp.StatusCode)
			switch resp.StatusCode {
			case http.StatusTooManyRequests:
				pb := parseProblem(t, resp, body)
				assert.Equal(t, httplimit.ProblemType, pb.Type)
				assert.GreaterOrEqual(t, intHeader(t, resp, "Retry-After"), int64(1))
			case http.StatusServiceUnavailable:
				pb := parseProblem(t, resp, body)
				assert.Equal(t, httplimit.UnavailableProblemType, pb.Type)
				assert.Equal(t, http.StatusServiceUnavailable, pb.Status)
				assert.Equal(t, []string{"closed"}, pb.Unavailable)
				assert.GreaterOrEqual(t, intHeader(t, resp, "Retry-After"), int64(1))
				for _, h := range []string{"RateLimit", "X-RateLimit-Remaining", "X-RateLimit-Reset"} {
					assert.Empty(t, resp.Header.Values(h), "%s: no limit decided the refusal", h)
				}
			case http.StatusOK:
				if p == "/open" {
					assert.Empty(t, resp.Header.Values("X-RateLimit-Remaining"), "FailOpen admits without a limit: no figures")
				}
			}
		}
	}
	assert.Equal(t, []int{200, 200, 200, 200, 200}, codes["/open"], "fail open")
	assert.Equal(t, []int{503, 503, 503, 503, 503}, codes["/closed"], "fail closed")
	for _, c := range codes["/local"] {
		assert.Contains(t, []int{200, 429}, c, "fail local: this node's share")
	}
	assert.Contains(t, codes["/local"], 429, "fail local keeps a limit")
	assert.Equal(t, int64(15), read(t, "hybridlimit.http.degraded"))
	assert.Equal(t, int64(0), read(t, "hybridlimit.http.errors"))
}

// TestRedisKilledHybrid: a Hybrid rule keeps deciding on this node through
// a Redis kill, and no request is answered 500.
func TestRedisKilledHybrid(t *testing.T) {
	srv := redistest.Start(t)
	l := redisLimiter(t, srv, hybrid.Hybrid)
	m, err := httplimit.New(l, httplimit.Config{Rules: []httplimit.Rule{perIP("hyb", "/", 1_000_000, time.Minute)}})
	require.NoError(t, err)
	hr, err := l.Register(hybrid.Rule{Name: "hyb", Limit: hybrid.MustLimit(hybrid.Params{Algorithm: hybrid.FixedWindow, Limit: 1_000_000, Window: time.Minute})})
	require.NoError(t, err)
	require.Equal(t, hybrid.Hybrid, l.Mode(hr))
	ts := serve(t, m, okHandler)
	count := func() map[int]int {
		codes := map[int]int{}
		for range 20 {
			resp, _ := get(t, ts, "/")
			codes[resp.StatusCode]++
		}
		return codes
	}
	// A new key is admitted at once, within the cold-start allowance, and
	// by its lease once the first round brings one.
	require.Eventually(t, func() bool {
		return count()[http.StatusOK] == 20
	}, 5*time.Second, 10*time.Millisecond)
	srv.Kill()
	// Never a 500; once the Limiter has seen Redis fail, the rule's policy
	// (FailLocal: this node's share of a large limit) admits every request.
	var seen []map[int]int
	require.Eventually(t, func() bool {
		c := count()
		seen = append(seen, c)
		return c[http.StatusOK] == 20
	}, 5*time.Second, 10*time.Millisecond)
	for _, c := range seen {
		assert.Zero(t, c[http.StatusInternalServerError], "no 500 while Redis is down")
	}
}
