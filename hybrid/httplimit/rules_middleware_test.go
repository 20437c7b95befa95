package httplimit_test

import (
	"bytes"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/hybrid"
	"github.com/hybridlimit/hybridlimit/hybrid/httplimit"
	"github.com/hybridlimit/hybridlimit/internal/clocktest"
	"github.com/hybridlimit/hybridlimit/internal/leakcheck"
	"github.com/hybridlimit/hybridlimit/internal/redistest"
)

// rulesFile is a rules file limiting GET /x to limit requests a minute per
// client IP.
func rulesFile(limit string) []byte {
	return []byte("version: 1\nrules:\n  - id: x-ip\n    key: ip\n    endpoint: GET /x\n    algorithm: fixed_window\n    max_requests: " + limit + "\n    window: 1m\n")
}

// statuses sends n requests for /x and returns their status codes.
func statuses(t *testing.T, n int, get func() int) []int {
	t.Helper()
	out := make([]int, n)
	for i := range out {
		out[i] = get()
	}
	return out
}

func repeat(code, n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = code
	}
	return out
}

// watchFile writes data to a rules file and watches it with apply until
// t ends. It returns what saves a new version of the file, as an editor
// does, and what reads the count of versions read.
func watchFile(t *testing.T, data []byte, apply func([]httplimit.Rule) error) (replace func([]byte), reloads func() int64) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "rules.yaml")
	require.NoError(t, os.WriteFile(path, data, 0o644))
	mp, read := meterReader()
	src, err := httplimit.WatchFile(t.Context(), path, apply, httplimit.WatchConfig{PollInterval: time.Hour, Debounce: time.Millisecond, MeterProvider: mp})
	require.NoError(t, err)
	t.Cleanup(func() { src.Close() })
	replace = func(data []byte) {
		require.NoError(t, os.WriteFile(path+".tmp", data, 0o644))
		require.NoError(t, os.Rename(path+".tmp", path))
	}
	return replace, func() int64 { return read(t, "hybridlimit.http.rules.reloads") }
}

// TestRulesFileMiddleware reloads a middleware's rules from a file: a new
// limit applies at once and keeps what was consumed; a bad file leaves the
// previous rules serving.
func TestRulesFileMiddleware(t *testing.T) {
	leakcheck.Check(t)
	m, err := httplimit.New(newLimiter(t, clocktest.New(t0)), httplimit.Config{})
	require.NoError(t, err)
	ts := serve(t, m, okHandler)
	code := func() int { resp, _ := get(t, ts, "/x"); return resp.StatusCode }

	replace, reloads := watchFile(t, rulesFile("3"), m.SetRules)
	assert.Equal(t, repeat(http.StatusOK, 2), statuses(t, 2, code))

	replace(rulesFile("5"))
	require.Eventually(t, func() bool { return m.Rules()[0].Quota == 5 }, 5*time.Second, 5*time.Millisecond)
	// 2 of 5 used: 3 more pass, then 429.
	assert.Equal(t, append(repeat(http.StatusOK, 3), http.StatusTooManyRequests), statuses(t, 4, code))

	// A bad limit: refused by the parser (the third version read), the old
	// rules keep serving.
	replace(rulesFile("0"))
	require.Eventually(t, func() bool { return reloads() == 3 }, 5*time.Second, 5*time.Millisecond)
	assert.EqualValues(t, 5, m.Rules()[0].Quota)
	assert.Equal(t, []int{http.StatusTooManyRequests}, statuses(t, 1, code))

	replace(rulesFile("7"))
	require.Eventually(t, func() bool { return m.Rules()[0].Quota == 7 }, 5*time.Second, 5*time.Millisecond)
	assert.Equal(t, append(repeat(http.StatusOK, 2), http.StatusTooManyRequests), statuses(t, 3, code))
	assert.EqualValues(t, 4, reloads())
}

// TestRulesFileGlobal reloads a rules file that makes a rule global: as a
// change of mode, the version is refused under the same ID (the previous
// rules keep serving), and a Limiter without hybrid.Config.Global refuses
// a global rule under a new ID too, naming the global field.
func TestRulesFileGlobal(t *testing.T) {
	leakcheck.Check(t)
	m, err := httplimit.New(newLimiter(t, clocktest.New(t0)), httplimit.Config{})
	require.NoError(t, err)
	var mu sync.Mutex // apply runs on the watcher's goroutine
	var errs []error
	apply := func(rules []httplimit.Rule) error {
		err := m.SetRules(rules)
		if err != nil {
			mu.Lock()
			errs = append(errs, err)
			mu.Unlock()
		}
		return err
	}
	replace, reloads := watchFile(t, rulesFile("3"), apply)
	for i, doc := range [][]byte{
		append(rulesFile("3"), "    global: true\n"...),
		bytes.Replace(append(rulesFile("3"), "    global: true\n"...), []byte("x-ip"), []byte("x-ip-global"), 1),
	} {
		replace(doc)
		require.Eventually(t, func() bool { return reloads() == int64(i+2) }, 5*time.Second, 5*time.Millisecond)
		assert.Equal(t, "x-ip", m.Rules()[0].ID, "the previous rules keep serving")
		assert.False(t, m.Rules()[0].Global)
	}
	mu.Lock()
	defer mu.Unlock()
	require.Len(t, errs, 2)
	var re *httplimit.RuleError
	require.ErrorAs(t, errs[0], &re)
	assert.Equal(t, "global", re.Field)
	assert.Equal(t, "x-ip", re.ID)
	assert.Contains(t, re.Reason, "was false")
	require.ErrorAs(t, errs[1], &re)
	assert.Equal(t, "global", re.Field)
	assert.Equal(t, "x-ip-global", re.ID)
	assert.ErrorIs(t, errs[1], hybrid.ErrInvalidRule, "the Limiter's refusal: no Config.Global")
}

// TestRulesFileGlobalRedis reloads rules of global reach on a Limiter
// with hybrid.Config.Global: a global rule applies from a file, keeps its
// hybrid rule across a change of limit, and cannot stop being global
// under the same ID.
func TestRulesFileGlobalRedis(t *testing.T) {
	leakcheck.Check(t)
	addr := redistest.Addr(t)
	l, err := hybrid.New(hybrid.Config{
		Redis: redistest.Client(t, addr), Global: redistest.Client(t, addr), Region: "eu-west",
		Keyspace: hybrid.Keyspace{Prefix: redistest.Prefix(t)}, Logger: slog.New(slog.DiscardHandler),
	})
	require.NoError(t, err)
	t.Cleanup(func() { l.Close() })
	m, err := httplimit.New(l, httplimit.Config{})
	require.NoError(t, err)
	global := func(limit string) []byte { return append(rulesFile(limit), "    global: true\n"...) }
	replace, reloads := watchFile(t, global("3"), m.SetRules)
	require.True(t, m.Rules()[0].Global)
	assert.Equal(t, 1, l.Stats().Rules)

	replace(global("5"))
	require.Eventually(t, func() bool { return m.Rules()[0].Quota == 5 }, 5*time.Second, 5*time.Millisecond)
	assert.Equal(t, 1, l.Stats().Rules, "one hybrid rule, its limit set in place")

	replace(rulesFile("5"))
	require.Eventually(t, func() bool { return reloads() == 3 }, 5*time.Second, 5*time.Millisecond)
	assert.True(t, m.Rules()[0].Global, "refused: the global rule keeps serving")
}

// TestRulesRedisMiddlewares publishes rules to two nodes' middlewares
// through Redis.
func TestRulesRedisMiddlewares(t *testing.T) {
	leakcheck.Check(t)
	ks := hybrid.Keyspace{Prefix: redistest.Prefix(t)}
	admin := redistest.Client(t, redistest.Addr(t))
	rules, err := httplimit.ParseRules(rulesFile("2"))
	require.NoError(t, err)

	type node struct {
		m    *httplimit.Middleware
		code func() int
	}
	var nodes [2]node
	for i := range nodes {
		m, err := httplimit.New(newLimiter(t, clocktest.New(t0)), httplimit.Config{})
		require.NoError(t, err)
		ts := serve(t, m, okHandler)
		nodes[i] = node{m, func() int { resp, _ := get(t, ts, "/x"); return resp.StatusCode }}
		src, err := httplimit.WatchRedis(t.Context(), redistest.Client(t, redistest.Addr(t)), ks, m.SetRules, httplimit.WatchConfig{PollInterval: time.Minute})
		require.NoError(t, err)
		defer src.Close()
		assert.Equal(t, repeat(http.StatusOK, 3), statuses(t, 3, nodes[i].code), "no rules yet")
	}

	start := time.Now()
	_, err = httplimit.PublishRules(t.Context(), admin, ks, rules)
	require.NoError(t, err)
	require.Eventually(t, func() bool { return len(nodes[0].m.Rules()) == 1 && len(nodes[1].m.Rules()) == 1 }, 5*time.Second, 5*time.Millisecond)
	assert.Less(t, time.Since(start), time.Second, "both nodes within a second")
	for _, n := range nodes {
		// Local mode: each node its own limit of 2.
		assert.Equal(t, []int{http.StatusOK, http.StatusOK, http.StatusTooManyRequests}, statuses(t, 3, n.code))
	}
}

func ExampleParseRules() {
	rules, err := httplimit.ParseRules([]byte(`
version: 1
rules:
  - id: api-user
    key: user
    endpoint: GET /api/
    algorithm: sliding_window_counter
    max_requests: 100
    window: 1m
`))
	fmt.Println(rules[0].ID, rules[0].Quota, rules[0].Window, err)

	_, err = httplimit.ParseRules([]byte(`
version: 1
rules:
  - id: api-user
    key: user
    max_requests: 100
    windw: 1m
`))
	fmt.Println(err)
	// Output:
	// api-user 100 1m0s <nil>
	// httplimit: invalid rule "api-user": windw: line 7: unknown field
}
