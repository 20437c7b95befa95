package httplimit

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/hybrid"
	"github.com/hybridlimit/hybridlimit/internal/leakcheck"
	"github.com/hybridlimit/hybridlimit/internal/redistest"
)

// maxErrorLen bounds the errors of hostile documents: a short prefix of a
// value, never the whole of it.
const maxErrorLen = 400

// yamlRules is a YAML document of n minimal rules, one a line.
func yamlRules(n int) string {
	var b strings.Builder
	b.WriteString("version: 1\nrules:\n")
	for i := range n {
		fmt.Fprintf(&b, "  - {id: r%d, key: ip, algorithm: fixed_window, max_requests: 1, window: 1s}\n", i)
	}
	return b.String()
}

// jsonRules is yamlRules in JSON.
func jsonRules(n int) string {
	rules := make([]string, n)
	for i := range rules {
		rules[i] = fmt.Sprintf(`{"id":"r%d","key":"ip","algorithm":"fixed_window","max_requests":1,"window":"1s"}`, i)
	}
	return `{"version":1,"rules":[` + strings.Join(rules, ",") + `]}`
}

// overrides is a YAML flow mapping of n overrides, named from first.
func overrides(first, n int) string {
	o := make([]string, n)
	for i := range o {
		o[i] = fmt.Sprintf("k%d: 2", first+i)
	}
	return "{" + strings.Join(o, ", ") + "}"
}

// TestRulesBounds: a document past a bound is refused, and every error
// quotes at most a short prefix of the value at fault.
func TestRulesBounds(t *testing.T) {
	long := strings.Repeat("a", 100_000)
	tests := []struct {
		name   string
		doc    string
		index  int    // -1: the document
		id     string // the rule's id in the error
		field  string // a part of the field
		reason string // a part of the reason
	}{
		{"document too large", yamlDoc("# " + strings.Repeat("x", maxRulesSize) + "\n"), -1, "", "", "more than the 524288 bytes"},
		{"too many rules", yamlRules(maxRules + 1), -1, "", "rules", "2049 rules: more than 2048"},
		{"too many rules, JSON", jsonRules(maxRules + 1), -1, "", "rules", "2049 rules: more than 2048"},
		{"too many overrides", "version: 1\nrules:\n" +
			strings.Replace(rule1, "id: r1", "id: a", 1) + "    overrides: " + overrides(0, maxOverrides/2) + "\n" +
			strings.Replace(rule1, "id: r1", "id: b", 1) + "    overrides: " + overrides(maxOverrides, maxOverrides/2+1) + "\n",
			1, "b", "overrides", "more than 8192 in the document"},
		{"too many overrides in a rule", yamlDoc("    overrides: " + overrides(0, maxOverrides+1) + "\n"), 0, "r1", "overrides", "8193 up to this rule: more than 8192"},
		{"override given twice", yamlDoc("    overrides: {pro: 1, pro: 2}\n"), 0, "r1", `overrides["pro"]`, "given twice"},
		{"long id", strings.Replace(yamlDoc(""), "id: r1", "id: "+long, 1), 0, "", "id", `"aaaa`},
		{"long id, JSON", `{"version": 1, "rules": [` + strings.Replace(json1, `"r1"`, `"`+long+`"`, 1) + `}]}`, 0, "", "id", `"aaaa`},
		{"long bad id", strings.Replace(yamlDoc(""), "id: r1", "id: '"+long+"{'", 1), 0, "", "id", "(100001 bytes)"},
		{"long key", strings.Replace(yamlDoc(""), "key: ip", "key: "+long, 1), 0, "r1", "key", "(100000 bytes): longer than 1024"},
		{"long endpoint", strings.Replace(yamlDoc(""), "GET /x", "/"+long, 1), 0, "r1", "endpoint", "longer than 1024"},
		{"long algorithm", strings.Replace(yamlDoc(""), "fixed_window", long, 1), 0, "r1", "algorithm", "longer than 1024"},
		{"long window", strings.Replace(yamlDoc(""), "window: 10s", "window: "+long, 1), 0, "r1", "window", "longer than 1024"},
		{"long tier", yamlDoc("    tier: " + long + "\n"), 0, "r1", "tier", "longer than 1024"},
		{"long mode", yamlDoc("    mode: " + long + "\n"), 0, "r1", "mode", "longer than 1024"},
		{"long policy", yamlDoc("    policy: " + long + "\n"), 0, "r1", "policy", "longer than 1024"},
		{"long override name", yamlDoc("    overrides: {? " + long + " : 5}\n"), 0, "r1", `overrides["aaaa`, "longer than 1024"},
		{"long unknown field", yamlDoc("    ? " + long + "\n    : 5\n"), 0, "r1", `"aaaa`, "unknown field"},
		{"long unknown top field", "version: 1\n? " + long + "\n: 5\n", -1, "", `"aaaa`, "unknown field"},
		{"long unknown top field, JSON", `{"version": 1, "` + long + `": 5}`, -1, "", `"aaaa`, "unknown field"},
		{"long field twice, JSON", `{"version": 1, "` + long + `": 5, "` + long + `": 5}`, -1, "", `"aaaa`, "unknown field"},
		{"long string for an integer", strings.Replace(yamlDoc(""), "max_requests: 10", "max_requests: "+long, 1), 0, "r1", "max_requests", "integer"},
		{"big number for a string", yamlDoc("    tier: 1" + strings.Repeat("0", 200) + "\n"), 0, "r1", "tier", "must be a string"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rules, err := ParseRules([]byte(tc.doc))
			require.Error(t, err)
			assert.Nil(t, rules)
			assert.ErrorAs(t, err, new(*RuleError))
			var re *RuleError
			require.ErrorAs(t, err, &re)
			assert.Equal(t, tc.index, re.Index, "index")
			assert.Equal(t, tc.id, re.ID, "id")
			assert.Contains(t, re.Field, tc.field, "field")
			assert.Contains(t, re.Reason, tc.reason)
			assert.Less(t, len(err.Error()), maxErrorLen, "the error quotes a short prefix: %.500s", err.Error())
		})
	}
	t.Run("at the bounds", func(t *testing.T) {
		rules, err := ParseRules([]byte(yamlRules(maxRules)))
		require.NoError(t, err)
		assert.Len(t, rules, maxRules)
		doc := yamlDoc("    tier: " + strings.Repeat("t", maxFieldSize) + "\n    overrides: " + overrides(0, maxOverrides) + "\n")
		require.Less(t, len(doc), maxRulesSize)
		rules, err = ParseRules([]byte(doc))
		require.NoError(t, err)
		assert.Len(t, rules[0].Overrides, maxOverrides)
	})
}

// TestRuleErrorsShort: SetRules's errors quote a short prefix of a bad
// value too, and name a rule whose ID is too long by its position.
func TestRuleErrorsShort(t *testing.T) {
	long := strings.Repeat("a", 1<<20)
	l, err := hybrid.New(hybrid.Config{})
	require.NoError(t, err)
	defer l.Close()
	m, err := New(l, Config{})
	require.NoError(t, err)
	base := Rule{ID: "r", Key: KeyIP, Algorithm: hybrid.FixedWindow, Quota: 1, Window: time.Second}
	for _, tc := range []struct {
		name  string
		edit  func(*Rule)
		id    string
		field string
	}{
		{"id", func(r *Rule) { r.ID = long }, "", "id"},
		{"bad id", func(r *Rule) { r.ID = long[:100] + "{" }, long[:100] + "{", "id"},
		{"key", func(r *Rule) { r.Key = KeyType(long) }, "r", "key"},
		{"endpoint", func(r *Rule) { r.Endpoint = "/" + long + "/{" }, "r", "endpoint"},
		{"wildcard", func(r *Rule) { r.Endpoint = "/{" + long + "-}" }, "r", "endpoint"},
		{"override", func(r *Rule) { r.Overrides = map[string]int64{long: 0} }, "r", `overrides["aaaa`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := base
			tc.edit(&r)
			err := m.SetRules([]Rule{r})
			var re *RuleError
			require.ErrorAs(t, err, &re)
			assert.Zero(t, re.Index)
			assert.Equal(t, tc.id, re.ID)
			assert.Contains(t, re.Field, tc.field)
			assert.Less(t, len(err.Error()), maxErrorLen, "%.500s", err.Error())
		})
	}
}

// TestWatchFileTooLarge: a file past maxRulesSize is refused without being
// read, at the start and while watching; the previous rules keep serving.
func TestWatchFileTooLarge(t *testing.T) {
	leakcheck.Check(t)
	dir := t.TempDir()
	huge := filepath.Join(dir, "huge.yaml")
	f, err := os.Create(huge)
	require.NoError(t, err)
	require.NoError(t, f.Truncate(50<<20)) // sparse: 50 MiB that cost no disk
	require.NoError(t, f.Close())

	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	var a applied
	_, err = WatchFile(t.Context(), huge, a.apply, WatchConfig{})
	runtime.ReadMemStats(&after)
	require.ErrorAs(t, err, new(*RuleError))
	assert.Contains(t, err.Error(), "52428800 bytes")
	assert.Less(t, after.TotalAlloc-before.TotalAlloc, uint64(maxRulesSize), "the file is not read")
	assert.Zero(t, a.count())

	mp, reloads := reloadMetrics(t)
	path, b := watchNew(t, WatchConfig{PollInterval: 20 * time.Millisecond, Debounce: time.Millisecond, MeterProvider: mp})
	require.NoError(t, os.Rename(huge, path))
	require.Eventually(t, func() bool { return reloads("file", "rejected") == 1 }, waitFor, tick)
	require.Never(t, func() bool { return reloads("file", "rejected") > 1 }, 100*time.Millisecond, tick, "counted once, not at every poll")
	assert.Equal(t, 1, b.count())
	assert.EqualValues(t, 1, b.quota(), "the previous rules keep serving")

	writeRename(t, path, rulesWithQuota(2))
	require.Eventually(t, func() bool { return b.quota() == 2 }, waitFor, tick)
}

// TestRedisRulesTooLarge: a document in Redis past maxRulesSize is refused
// without being read, at the start and while watching.
func TestRedisRulesTooLarge(t *testing.T) {
	leakcheck.Check(t)
	mp, reloads := reloadMetrics(t)
	c := nodes(t, false, 1)[0]
	ctx := t.Context()
	ks := hybrid.Keyspace{Prefix: redistest.Prefix(t)}
	hash := ks.Prefix + ":{rules}:doc"
	big := strings.Repeat(" ", maxRulesSize) + jsonRules(1)

	require.NoError(t, c.HSet(ctx, hash, "rules", big, "version", 1).Err())
	var a applied
	_, err := WatchRedis(ctx, c, ks, a.apply, WatchConfig{})
	require.ErrorAs(t, err, new(*RuleError))
	assert.Less(t, len(err.Error()), maxErrorLen)
	require.NoError(t, c.Del(ctx, hash).Err())

	src, err := WatchRedis(ctx, c, ks, a.apply, WatchConfig{PollInterval: time.Minute, MeterProvider: mp})
	require.NoError(t, err)
	defer src.Close()
	_, err = PublishRules(ctx, c, ks, parsed(t, 1))
	require.NoError(t, err)
	require.Eventually(t, func() bool { return a.quota() == 1 }, waitFor, tick)

	require.NoError(t, c.HSet(ctx, hash, "rules", big, "version", 2).Err())
	require.NoError(t, c.Publish(ctx, ks.Prefix+":{rules}:changed", "2").Err())
	require.Eventually(t, func() bool { return reloads("redis", "rejected") == 1 }, waitFor, tick)
	assert.EqualValues(t, 1, a.quota(), "the previous rules keep serving")
}

// TestBoundsDocumented holds docs/rules.md's table of bounds to the
// constants.
func TestBoundsDocumented(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "rules.md"))
	require.NoError(t, err)
	for name, v := range map[string]int{
		"maxRulesSize": maxRulesSize, "maxRules": maxRules, "maxOverrides": maxOverrides, "maxFieldSize": maxFieldSize,
	} {
		assert.Contains(t, string(doc), fmt.Sprintf("| `%s` | %d ", name, v), name)
	}
}
