package grpclimit_test

import (
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"

	"github.com/hybridlimit/hybridlimit/grpclimit"
	"github.com/hybridlimit/hybridlimit/hybrid/httplimit"
	"github.com/hybridlimit/hybridlimit/internal/clocktest"
)

// quiet is the watchers' logger: their lines are not the tests'.
var quiet = slog.New(slog.DiscardHandler)

const rulesV1 = `version: 1
rules:
  - id: greeter-ip
    key: ip
    endpoint: /grpc.testing.TestService/*
    algorithm: fixed_window
    max_requests: 1
    window: 1m
`

const rulesV2 = `version: 1
rules:
  - id: greeter-ip
    key: ip
    endpoint: /grpc.testing.TestService/*
    algorithm: fixed_window
    max_requests: 3
    window: 1m
  - id: health-ip
    key: ip
    endpoint: /grpc.health.v1.Health/Check
    algorithm: fixed_window
    max_requests: 1
    window: 1m
`

// TestRulesFile: the rules file format of httplimit, with method patterns,
// parsed by httplimit.ParseRules and applied by WatchFile; a new version
// of the file changes the limits without a restart, keeping what the
// unchanged rule's keys consumed.
func TestRulesFile(t *testing.T) {
	rules, err := httplimit.ParseRules([]byte(rulesV1))
	require.NoError(t, err)
	require.Len(t, rules, 1)
	assert.Equal(t, "/grpc.testing.TestService/*", rules[0].Endpoint)

	ic := newInterceptor(t, clocktest.New(t0), grpclimit.Config{})
	c := serve(t, ic)
	path := filepath.Join(t.TempDir(), "rules.yaml")
	require.NoError(t, os.WriteFile(path, []byte(rulesV1), 0o600))
	applied := make(chan int, 4)
	w, err := httplimit.WatchFile(t.Context(), path, func(r []httplimit.Rule) error {
		err := ic.SetRules(r)
		if err == nil {
			applied <- len(r)
		}
		return err
	}, httplimit.WatchConfig{Debounce: time.Millisecond, Logger: quiet})
	require.NoError(t, err)
	t.Cleanup(func() { w.Close() })
	require.Equal(t, 1, <-applied, "the first version, before WatchFile returns")

	require.Equal(t, codes.OK, c.empty(t).st.Code())
	require.Equal(t, codes.ResourceExhausted, c.unary(t).st.Code())

	tmp := path + ".new"
	require.NoError(t, os.WriteFile(tmp, []byte(rulesV2), 0o600))
	require.NoError(t, os.Rename(tmp, path)) // as editors save
	select {
	case n := <-applied:
		require.Equal(t, 2, n)
	case <-time.After(10 * time.Second):
		t.Fatal("the new version was not applied")
	}
	ok, _ := countOK(3, func() result { return c.unary(t) })
	assert.Equal(t, 2, ok, "3 a minute now, one used")
	assert.Equal(t, codes.OK, c.healthCheck(t).st.Code())
	assert.Equal(t, codes.ResourceExhausted, c.healthCheck(t).st.Code(), "the new rule")
	assert.Len(t, ic.Rules(), 2)
}

// TestSetRulesChangesLimit: SetRules changes a rule's limit in place, its
// keys keeping what they consumed, and removes a rule.
func TestSetRulesChangesLimit(t *testing.T) {
	ic := newInterceptor(t, clocktest.New(t0), grpclimit.Config{Rules: []httplimit.Rule{ipRule("ip", "/*", 2, time.Minute)}})
	c := serve(t, ic)
	ok, _ := countOK(3, func() result { return c.empty(t) })
	require.Equal(t, 2, ok)
	require.NoError(t, ic.SetRules([]httplimit.Rule{ipRule("ip", "/*", 3, time.Minute)}))
	ok, _ = countOK(2, func() result { return c.empty(t) })
	assert.Equal(t, 1, ok, "two of three used")
	require.NoError(t, ic.SetRules(nil))
	ok, _ = countOK(3, func() result { return c.empty(t) })
	assert.Equal(t, 3, ok, "no rule")
}
