package httplimit_test

import (
	"context"
	"log/slog"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/hybrid"
	"github.com/hybridlimit/hybridlimit/hybrid/httplimit"
	"github.com/hybridlimit/hybridlimit/internal/redistest"
	"github.com/hybridlimit/hybridlimit/internal/syncx"
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
				assert.Equal(t, "https://iana.org/assignments/http-problem-types#quota-exceeded", pb.Type)
				assert.GreaterOrEqual(t, intHeader(t, resp, "Retry-After"), int64(1))
			case http.StatusServiceUnavailable:
				pb := parseProblem(t, resp, body)
				assert.Equal(t, "https://github.com/hybridlimit/hybridlimit/blob/main/docs/http.md#redis-failures", pb.Type)
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
	hr, err := l.Register(hybrid.Rule{Name: "hyb", Limit: hybrid.Limit{Algorithm: hybrid.FixedWindow, Quota: 1_000_000, Window: time.Minute}})
	require.NoError(t, err)
	require.Equal(t, hybrid.Hybrid, hr.Mode)
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

// countingLog is a slog handler that counts the records at Warn and above.
type countingLog struct{ n atomic.Int64 }

func (h *countingLog) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelWarn }
func (h *countingLog) Handle(context.Context, slog.Record) error    { h.n.Add(1); return nil }
func (h *countingLog) WithAttrs([]slog.Attr) slog.Handler           { return h }
func (h *countingLog) WithGroup(string) slog.Handler                { return h }

// TestRedisErrorAnswers: Redis that answers with errors, out of memory
// under noeviction or a key of another type under the prefix, does not let
// a FailClosed rule's requests through: its failure policy decides, and the
// middleware serves that decision. Out of memory, Redis cannot decide at
// all: the breaker opens, Ping and hybridlimit.redis.available say so, and
// the log says it once, not per request; a FailOpen rule admits.
func TestRedisErrorAnswers(t *testing.T) {
	for _, c := range []struct {
		name string
		mode hybrid.Mode
	}{{"central", hybrid.Central}, {"hybrid", hybrid.Hybrid}} {
		t.Run(c.name+"/oom", func(t *testing.T) {
			srv := redistest.Start(t, "--maxmemory-policy", "noeviction")
			mp, read := meterReader()
			logs := &countingLog{}
			l, err := hybrid.New(hybrid.Config{
				Redis: redistest.Client(t, srv.Addr), Keyspace: hybrid.Keyspace{Prefix: redistest.Prefix(t)},
				Mode: c.mode, Timeout: 300 * time.Millisecond, MeterProvider: mp, Logger: slog.New(logs),
			})
			require.NoError(t, err)
			t.Cleanup(func() { l.Close() })
			closed, open := perIP("closed", "/closed", 3, time.Minute), perIP("open", "/open", 3, time.Minute)
			closed.Policy, open.Policy = hybrid.FailClosed, hybrid.FailOpen
			m, err := httplimit.New(l, httplimit.Config{MeterProvider: mp, Rules: []httplimit.Rule{closed, open}})
			require.NoError(t, err)
			ts := serve(t, m, okHandler)
			require.NoError(t, redistest.Client(t, srv.Addr).ConfigSet(t.Context(), "maxmemory", "1").Err())

			served := 0
			for range 10 {
				resp, _ := get(t, ts, "/closed")
				if resp.StatusCode == http.StatusOK {
					served++
				}
			}
			assert.Zero(t, served, "a fail_closed rule serves nothing while Redis is out of memory")
			for range 10 {
				resp, _ := get(t, ts, "/open")
				assert.Equal(t, http.StatusOK, resp.StatusCode, "a fail_open rule admits")
			}
			assert.ErrorIs(t, l.Ping(t.Context()), hybrid.ErrUnavailable, "Ping: Redis cannot take a write")
			assert.Positive(t, read(t, "hybridlimit.redis.errors"), "Redis's error answers are counted")
			assert.LessOrEqual(t, logs.n.Load(), int64(2), "logged once per change, not per request")
			assert.Zero(t, read(t, "hybridlimit.http.errors"), "no error reaches the middleware: Redis cannot decide, the policies do")
		})
	}
	t.Run("central/wrong type", func(t *testing.T) {
		srv := redistest.Start(t)
		prefix := redistest.Prefix(t)
		mp, read := meterReader()
		logs := &countingLog{}
		l, err := hybrid.New(hybrid.Config{
			Redis: redistest.Client(t, srv.Addr), Keyspace: hybrid.Keyspace{Prefix: prefix},
			Mode: hybrid.Central, MeterProvider: mp, Logger: slog.New(logs),
		})
		require.NoError(t, err)
		t.Cleanup(func() { l.Close() })
		closed := perIP("closed", "/closed", 3, time.Minute)
		closed.Policy = hybrid.FailClosed
		m, err := httplimit.New(l, httplimit.Config{MeterProvider: mp, Rules: []httplimit.Rule{closed}})
		require.NoError(t, err)
		ts := serve(t, m, okHandler)
		// Another application's list where the client's state would be.
		ks := hybrid.Keyspace{Prefix: prefix}
		key := prefix + ":{closed:" + syncx.Digest(&ks, "127.0.0.1") + "}:s"
		rc := redistest.Client(t, srv.Addr)
		require.NoError(t, rc.RPush(t.Context(), key, "x").Err())
		served := 0
		for range 10 {
			resp, _ := get(t, ts, "/closed")
			if resp.StatusCode == http.StatusOK {
				served++
			}
		}
		assert.Zero(t, served, "a fail_closed rule serves nothing while Redis answers with an error")
		assert.Equal(t, int64(10), read(t, "hybridlimit.http.errors"), "each counted")
		assert.Equal(t, int64(1), logs.n.Load(), "logged once a minute, not per request")
	})
}

// TestMetricsEqualWhatHappened: under a mix of rule sets (one rule, two
// and three per request, of every mode and policy) and a Redis kill, the
// metrics count what the middleware did: admitted and refused add up to
// the requests it decided, and hybridlimit.decisions counts one decision
// per rule a request matched, by its result, in multi-rule decisions too.
func TestMetricsEqualWhatHappened(t *testing.T) {
	srv := redistest.Start(t)
	mp, read := meterReader()
	l, err := hybrid.New(hybrid.Config{
		Redis: redistest.Client(t, srv.Addr), Keyspace: hybrid.Keyspace{Prefix: redistest.Prefix(t)},
		Timeout: 200 * time.Millisecond, MeterProvider: mp, Logger: slog.New(slog.DiscardHandler),
	})
	require.NoError(t, err)
	t.Cleanup(func() { l.Close() })
	rule := func(id string, key httplimit.KeyType, endpoint string, limit int64, mode hybrid.Mode, p hybrid.Policy) httplimit.Rule {
		return httplimit.Rule{ID: id, Key: key, Endpoint: endpoint, Algorithm: hybrid.FixedWindow, Quota: limit, Window: time.Minute, Mode: mode, Policy: p}
	}
	rules := []httplimit.Rule{
		rule("ip", httplimit.KeyIP, "/", 40, hybrid.Local, hybrid.Policy(0)),
		rule("user", httplimit.KeyUser, "/api/", 6, hybrid.Hybrid, hybrid.FailOpen),
		rule("key", httplimit.KeyAPIKey, "/api/", 4, hybrid.Central, hybrid.FailClosed),
		rule("login", httplimit.KeyIP, "/login", 3, hybrid.Hybrid, hybrid.FailClosed),
	}
	m, err := httplimit.New(l, httplimit.Config{
		MeterProvider: mp, Rules: rules,
		UserFunc: func(r *http.Request) (string, bool) { u := r.Header.Get("X-User"); return u, u != "" },
	})
	require.NoError(t, err)
	ts := serve(t, m, okHandler)
	type req struct {
		path    string
		headers []string
		rules   int // the rules it matches
	}
	reqs := []req{
		{"/", nil, 1},
		{"/api/x", []string{"X-User: u1"}, 2},
		{"/api/x", []string{"X-User: u2", "X-API-Key: k1"}, 3},
		{"/login", nil, 2},
	}
	var sent, matched int64
	codes := map[int]int64{}
	send := func(rounds int) {
		for range rounds {
			for _, q := range reqs {
				resp, _ := get(t, ts, q.path, q.headers...)
				codes[resp.StatusCode]++
				sent++
				matched += int64(q.rules)
			}
		}
	}
	send(10)
	srv.Kill()
	send(10)
	admitted, refused := read(t, "hybridlimit.http.admitted"), read(t, "hybridlimit.http.refused")
	require.Zero(t, read(t, "hybridlimit.http.errors"), "no request passed undecided")
	assert.Equal(t, sent, admitted+refused, "admitted and refused add up to the requests decided")
	assert.Equal(t, codes[http.StatusOK], admitted, "admitted: the 200s")
	assert.Equal(t, codes[http.StatusTooManyRequests]+codes[http.StatusServiceUnavailable], refused, "refused: the 429s and 503s")
	assert.Positive(t, codes[http.StatusServiceUnavailable], "FailClosed rules refused with 503 while Redis was down")
	assert.Equal(t, matched, read(t, "hybridlimit.decisions"), "one decision per rule matched, single or multi-rule")
}
