package rls_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/envoy/rls"
	"github.com/hybridlimit/hybridlimit/hybrid"
	"github.com/hybridlimit/hybridlimit/internal/leakcheck"
)

func TestParseExamples(t *testing.T) {
	names, err := filepath.Glob("testdata/*.yaml")
	require.NoError(t, err)
	require.GreaterOrEqual(t, len(names), 10)
	for _, n := range names {
		data, err := os.ReadFile(n)
		require.NoError(t, err)
		f, err := rls.Parse(data)
		require.NoError(t, err, n)
		assert.NotEmpty(t, f.Domain)
	}
	f, err := rls.Parse([]byte("domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: HOUR, requests_per_unit: 3, algorithm: gcra}\n"))
	require.NoError(t, err)
	assert.Equal(t, "HOUR", f.Descriptors[0].RateLimit.Unit)
}

func TestParseErrors(t *testing.T) {
	for _, tc := range []struct{ name, yaml, want string }{
		{"empty", "", "empty file"},
		{"no domain", "descriptors: []", "domain must not be empty"},
		{"unknown field", "domain: d\nfoo: 1", "field foo not found"},
		{"unknown nested field", "domain: d\ndescriptors:\n  - key: k\n    ratelimit: {}", "field ratelimit not found"},
		{"empty key", "domain: d\ndescriptors:\n  - value: v", "empty key"},
		{"duplicate", "domain: d\ndescriptors:\n  - key: k\n  - key: k", "d.k: duplicate"},
		{"duplicate nested", "domain: d\ndescriptors:\n  - key: a\n    descriptors:\n      - {key: k, value: v}\n      - {key: k, value: v}", "d.a.k_v: duplicate"},
		{"bad unit", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: fortnight, requests_per_unit: 1}", `invalid rate limit unit "fortnight"`},
		{"no unit", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {requests_per_unit: 1}", `invalid rate limit unit ""`},
		{"unit and unlimited", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, unlimited: true}", "unlimited"},
		{"empty replaces", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1, replaces: [{name: ''}]}", "empty name"},
		{"replaces itself", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1, name: a, replaces: [{name: a}]}", "its own"},
		{"negative", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: -1}", "cannot unmarshal"},
		{"bad algorithm", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1, algorithm: sliding_window_log}", "unknown algorithm"},
		{"burst of a window", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1, burst: 3}", "burst set for fixed_window"},
		{"bad mode", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1, mode: x}", "unknown mode"},
		{"bad policy", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1, policy: x}", "unknown policy"},
		{"bad wait", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1, wait: x}", "unknown wait"},
		{"global bucket", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1, algorithm: gcra, global: true}", "d.k: global set for gcra: needs fixed_window"},
		{"global central", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1, mode: central, global: true}", "d.k: global set in mode central: needs hybrid"},
		{"global local", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1, mode: local, global: true}", "global set in mode local"},
		{"global unlimited", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unlimited: true, global: true}", "d.k: global set on an unlimited limit"},
		{"global not a boolean", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1, global: eu}", "cannot unmarshal"},
		{"two documents", "domain: d\n---\ndomain: e", "one document"},
		{"too deep", deep(18), "deeper than 16"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := rls.Parse([]byte(tc.yaml))
			require.Error(t, err)
			assert.ErrorIs(t, err, rls.ErrInvalidConfig)
			var fe *rls.FileError
			assert.True(t, errors.As(err, &fe))
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}

func TestApplyErrors(t *testing.T) {
	l := newLimiter(t, &fakeClock{t: start})
	svc, err := rls.New(rls.Config{Limiter: l, Logger: quiet})
	require.NoError(t, err)
	defer svc.Close()
	a, err := rls.Parse([]byte("domain: d"))
	require.NoError(t, err)
	err = svc.Apply([]*rls.File{a, a})
	assert.ErrorIs(t, err, rls.ErrInvalidConfig)
	assert.Contains(t, err.Error(), `duplicate domain "d"`)
	_, err = rls.New(rls.Config{})
	assert.ErrorIs(t, err, rls.ErrInvalidConfig)
}

// Apply keeps a limit's counts while its place stays, moves a changed
// limit, and drops the rules of removed limits.
func TestApplyKeepsCounts(t *testing.T) {
	clock := &fakeClock{t: start}
	l := newLimiter(t, clock)
	h := serve(t, l, clock, rls.Config{}, "example5.yaml")
	assert.Equal(t, 60, h.admitted(t, 60, "internal", desc("azure", "a")))
	rules := l.Stats().Rules
	f := mustParse(t, "domain: internal\ndescriptors:\n  - key: azure\n    rate_limit: {unit: minute, requests_per_unit: 80}\n")
	require.NoError(t, h.svc.Apply([]*rls.File{f}))
	assert.Equal(t, 20, h.admitted(t, 30, "internal", desc("azure", "a")), "80 - 60")
	assert.Equal(t, rules, l.Stats().Rules)
	// Another algorithm: a new rule, fresh counts.
	f = mustParse(t, "domain: internal\ndescriptors:\n  - key: azure\n    rate_limit: {unit: minute, requests_per_unit: 80, algorithm: gcra, burst: 5}\n")
	require.NoError(t, h.svc.Apply([]*rls.File{f}))
	assert.Equal(t, 5, h.admitted(t, 10, "internal", desc("azure", "a")))
	require.NoError(t, h.svc.Apply(nil))
	assert.Equal(t, 0, l.Stats().Rules)
	resp := h.ask(t, "internal", desc("azure", "a"))
	assert.Equal(t, codeOK, resp.GetOverallCode())
	assert.Nil(t, resp.GetStatuses()[0].GetCurrentLimit())
}

// A limit made global is another rule, as one of another algorithm is:
// Apply registers it anew, and a Limiter without hybrid.Config.Global
// refuses it, the previous configuration serving on.
func TestApplyGlobal(t *testing.T) {
	clock := &fakeClock{t: start}
	l := newLimiter(t, clock)
	h := serve(t, l, clock, rls.Config{}, "example5.yaml")
	assert.Equal(t, 60, h.admitted(t, 60, "internal", desc("azure", "a")))
	f := mustParse(t, "domain: internal\ndescriptors:\n  - key: azure\n    rate_limit: {unit: minute, requests_per_unit: 80, global: true}\n")
	assert.True(t, f.Descriptors[0].RateLimit.Global)
	err := h.svc.Apply([]*rls.File{f})
	require.ErrorIs(t, err, rls.ErrInvalidConfig)
	assert.Contains(t, err.Error(), "Global needs Config.Global")
	assert.Equal(t, 40, h.admitted(t, 50, "internal", desc("azure", "a")), "the previous limit of 100, its counts kept")
}

func mustParse(t *testing.T, s string) *rls.File {
	t.Helper()
	f, err := rls.Parse([]byte(s))
	require.NoError(t, err)
	return f
}

// FuzzParse: Parse never panics, and what it accepts a Service applies.
func FuzzParse(f *testing.F) {
	names, _ := filepath.Glob("testdata/*.yaml")
	for _, n := range names {
		data, err := os.ReadFile(n)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	l, err := hybrid.New(hybrid.Config{Logger: quiet})
	if err != nil {
		f.Fatal(err)
	}
	defer l.Close()
	svc, err := rls.New(rls.Config{Limiter: l, Logger: quiet})
	if err != nil {
		f.Fatal(err)
	}
	defer svc.Close()
	f.Fuzz(func(t *testing.T, data []byte) {
		file, err := rls.Parse(data)
		if err != nil {
			if !errors.Is(err, rls.ErrInvalidConfig) {
				t.Fatalf("error %v does not wrap ErrInvalidConfig", err)
			}
			return
		}
		if err := svc.Apply([]*rls.File{file}); err != nil {
			t.Fatalf("Parse accepted what Apply refuses: %v\n%s", err, data)
		}
	})
}

// deep is a file of n levels of descriptors.
func deep(n int) string {
	var b strings.Builder
	b.WriteString("domain: d\ndescriptors:\n")
	for i := range n {
		ind := strings.Repeat("    ", i)
		b.WriteString(ind + "  - key: k\n")
		if i < n-1 {
			b.WriteString(ind + "    descriptors:\n")
		}
	}
	return b.String()
}

// Close unregisters every rule the Service registered, overrides' too,
// and leaves the Limiter open; requests afterwards have no limits.
func TestClose(t *testing.T) {
	leakcheck.Check(t)
	clock := &fakeClock{t: start}
	l := newLimiter(t, clock)
	h := serve(t, l, clock, rls.Config{}, "example5.yaml", "example2.yaml")
	d := desc("azure", "b")
	d.Limit = &commonv3RateLimitOverride{RequestsPerUnit: 3, Unit: typeMinute}
	h.ask(t, "internal", d)
	assert.Equal(t, 4, l.Stats().Rules, "azure, two messaging limits, one override")
	require.NoError(t, h.svc.Close())
	require.NoError(t, h.svc.Close(), "idempotent")
	assert.Equal(t, 0, l.Stats().Rules)
	resp := h.ask(t, "internal", desc("azure", "a"))
	assert.Equal(t, codeOK, resp.GetOverallCode())
	assert.Nil(t, resp.GetStatuses()[0].GetCurrentLimit())
	assert.Error(t, h.svc.Apply(nil), "closed")
	_, err := l.Register(hybrid.Rule{Name: "still-open", Limit: hybrid.Limit{Algorithm: hybrid.FixedWindow, Quota: 1, Window: time.Second}})
	assert.NoError(t, err, "the Limiter stays the caller's")
}
