package httplimit

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/hybridlimit/hybridlimit/hybrid"
	"github.com/hybridlimit/hybridlimit/internal/leakcheck"
)

const fullYAML = `
version: 1
rules:
  - id: api-user
    key: user
    endpoint: GET /api/
    algorithm: sliding_window_counter
    max_requests: 100
    window: 1m
    tier: free
    overrides:
      pro: 1000
      user-42: 5
  - id: login-ip
    key: ip
    endpoint: POST example.com/login
    algorithm: GCRA
    max_requests: 5
    window: 1d
    burst: 2
    cost: 2
    mode: central
    policy: fail_closed
    shadow: true
  - id: "7"
    key: api_key
    endpoint: /
    algorithm: token-bucket
    max_requests: 10
    window: 1.5s
    wait: never
  - id: api-key-anchored
    key: api_key
    algorithm: sub_window_counter
    max_requests: 60
    window: 1m
    sub_windows: 6
    anchored: true
  - id: orders-global
    key: user
    algorithm: fixed_window
    max_requests: 1000
    window: 1h
    mode: hybrid
    global: true
`

const fullJSON = `{"version": 1, "rules": [
  {"id": "api-user", "key": "user", "endpoint": "GET /api/", "algorithm": "sliding_window_counter",
   "max_requests": 100, "window": "1m", "tier": "free", "overrides": {"pro": 1000, "user-42": 5}},
  {"id": "login-ip", "key": "ip", "endpoint": "POST example.com/login", "algorithm": "GCRA",
   "max_requests": 5, "window": "1d", "burst": 2, "cost": 2, "mode": "central", "policy": "fail_closed", "shadow": true},
  {"id": "7", "key": "api_key", "endpoint": "/", "algorithm": "token-bucket", "max_requests": 10, "window": "1.5s", "wait": "never"},
  {"id": "api-key-anchored", "key": "api_key", "algorithm": "sub_window_counter", "max_requests": 60, "window": "1m",
   "sub_windows": 6, "anchored": true},
  {"id": "orders-global", "key": "user", "algorithm": "fixed_window", "max_requests": 1000, "window": "1h",
   "mode": "hybrid", "global": true}
]}`

var fullRules = []Rule{
	{ID: "api-user", Key: KeyUser, Endpoint: "GET /api/", Algorithm: hybrid.SlidingWindowCounter, Quota: 100,
		Window: time.Minute, Tier: "free", Overrides: map[string]int64{"pro": 1000, "user-42": 5}},
	{ID: "login-ip", Key: KeyIP, Endpoint: "POST example.com/login", Algorithm: hybrid.GCRA, Quota: 5,
		Window: 24 * time.Hour, Burst: 2, Cost: 2, Mode: hybrid.Central, Policy: hybrid.FailClosed, Shadow: true},
	{ID: "7", Key: KeyAPIKey, Endpoint: "/", Algorithm: hybrid.TokenBucket, Quota: 10, Window: 1500 * time.Millisecond, Wait: hybrid.WaitNever},
	{ID: "api-key-anchored", Key: KeyAPIKey, Algorithm: hybrid.SubWindowCounter, Quota: 60, Window: time.Minute,
		SubWindows: 6, Anchored: true},
	{ID: "orders-global", Key: KeyUser, Algorithm: hybrid.FixedWindow, Quota: 1000, Window: time.Hour,
		Mode: hybrid.Hybrid, Global: true},
}

func TestParseRules(t *testing.T) {
	for name, doc := range map[string]string{"yaml": fullYAML, "json": fullJSON} {
		t.Run(name, func(t *testing.T) {
			rules, err := ParseRules([]byte(doc))
			require.NoError(t, err)
			assert.Equal(t, fullRules, rules)
		})
	}
	t.Run("no endpoint", func(t *testing.T) {
		rules, err := ParseRules([]byte(strings.Replace("version: 1\nrules:\n"+rule1, "endpoint: GET /x", "tier: a", 1)))
		require.NoError(t, err)
		assert.Empty(t, rules[0].Endpoint, "every path, as SetRules reads it")
	})
	t.Run("the middleware's checks", func(t *testing.T) {
		// A rule SetRules would refuse is refused here, with the same error.
		rule := Rule{ID: "r1", Key: "cookie", Endpoint: "GET /x", Algorithm: hybrid.FixedWindow, Quota: 10, Window: 10 * time.Second}
		_, want := checkRules([]Rule{rule})
		require.Error(t, want)
		_, err := ParseRules([]byte(strings.Replace("version: 1\nrules:\n"+rule1, "key: ip", "key: cookie", 1)))
		assert.Equal(t, want, err)
	})
	t.Run("durations", func(t *testing.T) {
		for window, want := range map[string]time.Duration{
			"90s": 90 * time.Second, "1h30m": 90 * time.Minute, "1d": 24 * time.Hour, "7d": 7 * 24 * time.Hour,
			"500ms": 500 * time.Millisecond, "366d": 366 * 24 * time.Hour,
		} {
			rules, err := ParseRules([]byte(strings.Replace("version: 1\nrules:\n"+rule1, "window: 10s", "window: "+window, 1)))
			require.NoError(t, err, window)
			assert.Equal(t, want, rules[0].Window, window)
		}
	})
	t.Run("null is absent, as in JSON", func(t *testing.T) {
		for _, doc := range []string{
			"version: 1\nrules:\n" + rule1 + "    tier: ~\n    burst:\n    shadow: null\n",
			`{"version": 1, "rules": [{"id": "r1", "key": "ip", "endpoint": "GET /x", "algorithm": "fixed_window", "max_requests": 10, "window": "10s", "tier": null, "burst": null, "shadow": null}]}`,
		} {
			rules, err := ParseRules([]byte(doc))
			require.NoError(t, err, doc)
			assert.Equal(t, []Rule{{ID: "r1", Key: KeyIP, Endpoint: "GET /x", Algorithm: hybrid.FixedWindow, Quota: 10, Window: 10 * time.Second}}, rules)
		}
	})
	t.Run("an empty name is the default", func(t *testing.T) {
		rules, err := ParseRules([]byte(yamlDoc("    mode: \"\"\n    policy: \"\"\n    wait: \"\"\n")))
		require.NoError(t, err)
		assert.Equal(t, []Rule{{ID: "r1", Key: KeyIP, Endpoint: "GET /x", Algorithm: hybrid.FixedWindow, Quota: 10, Window: 10 * time.Second}}, rules)
	})
	t.Run("YAML integers", func(t *testing.T) {
		rules, err := ParseRules([]byte(strings.Replace("version: 1\nrules:\n"+rule1, "max_requests: 10", "max_requests: 0x10", 1)))
		require.NoError(t, err)
		assert.EqualValues(t, 16, rules[0].Quota)
	})
	t.Run("empty list", func(t *testing.T) {
		for _, doc := range []string{"version: 1\nrules: []\n", "version: 1\nrules:\n", "version: 1\n", `{"version":1,"rules":[]}`} {
			rules, err := ParseRules([]byte(doc))
			require.NoError(t, err, doc)
			assert.Nil(t, rules, "%s: no rules, however written", doc)
		}
	})
}

func TestMarshalRules(t *testing.T) {
	data, err := marshalRules(fullRules)
	require.NoError(t, err)
	assert.Contains(t, string(data), `"window":"1d"`, "days stay days")
	assert.Contains(t, string(data), `"sub_windows":6,"anchored":true`)
	assert.Contains(t, string(data), `"mode":"central","policy":"fail_closed"`, "names, not numbers")
	assert.Contains(t, string(data), `"algorithm":"gcra"`)
	assert.Contains(t, string(data), `"mode":"hybrid","global":true}`)
	assert.Equal(t, 1, strings.Count(string(data), `"global"`), "left out when false")
	back, err := ParseRules(data)
	require.NoError(t, err)
	assert.Equal(t, fullRules, back)

	bad := append([]Rule(nil), fullRules...)
	bad[2].Quota = 0
	_, err = marshalRules(bad)
	var re *RuleError
	require.ErrorAs(t, err, &re)
	assert.Equal(t, 2, re.Index)
	assert.Equal(t, "max_requests", re.Field)
}

// rule1 is a valid rule, in YAML, for the error table to break.
const rule1 = "  - id: r1\n    key: ip\n    endpoint: GET /x\n    algorithm: fixed_window\n    max_requests: 10\n    window: 10s\n"

// yamlDoc is a YAML document of rule1 and extra, which is more of rule1's
// fields or more rules.
func yamlDoc(extra string) string { return "version: 1\nrules:\n" + rule1 + extra }

// json1 is rule1 in JSON, without its closing brace.
const json1 = `{"id":"r1","key":"ip","endpoint":"GET /x","algorithm":"fixed_window","max_requests":10,"window":"10s"`

// parseErrorTests are documents ParseRules refuses, and the error it gives.
var parseErrorTests = []struct {
	name   string
	doc    string
	index  int    // -1: the document
	id     string // the rule's id in the error
	field  string
	reason string // a part of the reason
}{
	{"empty", "", -1, "", "version", "empty"},
	{"blank", " \n\n", -1, "", "version", "empty"},
	{"no version", "rules: []\n", -1, "", "version", "must be 1"},
	{"version 2", "version: 2\nrules: []\n", -1, "", "version", "2: must be 1"},
	{"version text", "version: one\n", -1, "", "version", "integer"},
	{"unknown top field", "version: 1\ntiers: {}\n", -1, "", "tiers", "unknown field"},
	{"top field twice", "version: 1\nversion: 1\n", -1, "", "version", "twice"},
	{"rules not a list", "version: 1\nrules: 3\n", -1, "", "rules", "list"},
	{"not a mapping", "- 1\n", -1, "", "", "mapping"},
	{"malformed yaml", "version: [1\n", -1, "", "", "malformed YAML"},
	{"two documents", "version: 1\n---\nversion: 1\n", -1, "", "", "more than one"},
	{"rule not a mapping", "version: 1\nrules:\n  - 3\n", 0, "", "", "mapping"},
	{"unknown rule field", yamlDoc("    limit: 5\n"), 0, "r1", "limit", "unknown field"},
	{"rule field twice", yamlDoc("    window: 20s\n"), 0, "r1", "window", "twice"},
	{"unknown field before id", "version: 1\nrules:\n  - foo: 1\n    id: r9\n", 0, "r9", "foo", "unknown field"},
	{"list for a string", yamlDoc("    tier: [a]\n"), 0, "r1", "tier", "string"},
	{"text for an integer", strings.Replace(yamlDoc(""), "max_requests: 10", "max_requests: ten", 1), 0, "r1", "max_requests", "integer"},
	{"shadow yes", yamlDoc("    shadow: maybe\n"), 0, "r1", "shadow", "true or false"},
	{"bad wait", yamlDoc("    wait: always\n"), 0, "r1", "wait", "never, in_flight or first"},
	{"overrides list", yamlDoc("    overrides: [1]\n"), 0, "r1", "overrides", "must map names to integers"},
	{"no id", "version: 1\nrules:\n  - key: ip\n", 0, "", "id", "1 to 128"},
	{"bad id", strings.Replace(yamlDoc(""), "id: r1", "id: a{b}", 1), 0, "a{b}", "id", "letters"},
	{"duplicate id", yamlDoc(strings.Replace(rule1, "GET /x", "GET /y", 1)), 1, "r1", "id", "rule 0 has it too"},
	{"no key", strings.Replace(yamlDoc(""), "key: ip", "tier: a", 1), 0, "r1", "key", "ip, user or api_key"},
	{"bad key", strings.Replace(yamlDoc(""), "key: ip", "key: cookie", 1), 0, "r1", "key", `"cookie"`},
	{"bad endpoint", strings.Replace(yamlDoc(""), "GET /x", "GET x", 1), 0, "r1", "endpoint", `"GET x"`},
	{"bad wildcard", strings.Replace(yamlDoc(""), "GET /x", "/{a", 1), 0, "r1", "endpoint", "/{a"},
	{"no algorithm", strings.Replace(yamlDoc(""), "algorithm: fixed_window", "tier: a", 1), 0, "r1", "algorithm", "required: fixed_window, sliding_window_log"},
	{"bad algorithm", strings.Replace(yamlDoc(""), "fixed_window", "fixed", 1), 0, "r1", "algorithm", `"fixed"`},
	{"no max_requests", strings.Replace(yamlDoc(""), "max_requests: 10", "tier: a", 1), 0, "r1", "max_requests", "at least 1"},
	{"negative max_requests", strings.Replace(yamlDoc(""), "max_requests: 10", "max_requests: -1", 1), 0, "r1", "max_requests", "at least 1"},
	{"huge max_requests", strings.Replace(yamlDoc(""), "max_requests: 10", "max_requests: 4000000000000000", 1), 0, "r1", "max_requests", "2^51"},
	{"no window", strings.Replace(yamlDoc(""), "window: 10s", "tier: a", 1), 0, "r1", "window", "0s: must be positive"},
	{"window without unit", strings.Replace(yamlDoc(""), "window: 10s", "window: 10", 1), 0, "r1", "window", "duration string"},
	{"window as a date", strings.Replace(yamlDoc(""), "window: 10s", "window: 2026-01-01", 1), 0, "r1", "window", "duration string"},
	{"zero window", strings.Replace(yamlDoc(""), "window: 10s", "window: 0s", 1), 0, "r1", "window", "positive"},
	{"negative window", strings.Replace(yamlDoc(""), "window: 10s", "window: -1s", 1), 0, "r1", "window", "positive"},
	{"sub-µs window", strings.Replace(yamlDoc(""), "window: 10s", "window: 1500ns", 1), 0, "r1", "window", "microseconds"},
	{"too many days", strings.Replace(yamlDoc(""), "window: 10s", "window: 367d", 1), 0, "r1", "window", "must be at most 366 days"},
	{"fractional days", strings.Replace(yamlDoc(""), "window: 10s", "window: 1.5d", 1), 0, "r1", "window", "whole number"},
	{"burst on a window", yamlDoc("    burst: 5\n"), 0, "r1", "burst", "bucket"},
	{"negative burst", strings.Replace(yamlDoc("    burst: -1\n"), "fixed_window", "gcra", 1), 0, "r1", "burst", "must not be negative"},
	{"sub_windows on a fixed window", yamlDoc("    sub_windows: 4\n"), 0, "r1", "sub_windows", "only the sub-window counter"},
	{"too many sub_windows", strings.Replace(yamlDoc("    sub_windows: 65\n"), "fixed_window", "sub_window_counter", 1), 0, "r1", "sub_windows", "from 1 to 64"},
	{"negative sub_windows", strings.Replace(yamlDoc("    sub_windows: -1\n"), "fixed_window", "sub_window_counter", 1), 0, "r1", "sub_windows", "from 1 to 64"},
	{"uneven sub_windows", strings.Replace(yamlDoc("    sub_windows: 3\n"), "fixed_window", "sub_window_counter", 1), 0, "r1", "sub_windows", "whole microseconds"},
	{"sub_windows text", yamlDoc("    sub_windows: six\n"), 0, "r1", "sub_windows", "integer"},
	{"anchored bucket", strings.Replace(yamlDoc("    anchored: true\n"), "fixed_window", "gcra", 1), 0, "r1", "anchored", "only the fixed window and the sub-window counter"},
	{"anchored yes", yamlDoc("    anchored: maybe\n"), 0, "r1", "anchored", "true or false"},
	{"json anchored text", `{"version": 1, "rules": [` + json1 + `, "anchored": "true"}]}`, 0, "r1", "anchored", "true or false"},
	{"negative cost", yamlDoc("    cost: -1\n"), 0, "r1", "cost", "must not be negative"},
	{"cost above the limit", yamlDoc("    cost: 11\n"), 0, "r1", "cost", "above 10"},
	{"bad mode", yamlDoc("    mode: global\n"), 0, "r1", "mode", "local, central or hybrid"},
	{"default mode spelled", yamlDoc("    mode: default\n"), 0, "r1", "mode", "local, central or hybrid"},
	{"bad policy", yamlDoc("    policy: open\n"), 0, "r1", "policy", "fail_open"},
	{"global yes", yamlDoc("    global: yes\n"), 0, "r1", "global", "true or false"},
	{"global text", yamlDoc("    global: eu\n"), 0, "r1", "global", "true or false"},
	{"json global text", `{"version": 1, "rules": [` + json1 + `, "global": "true"}]}`, 0, "r1", "global", "true or false"},
	{"global twice", yamlDoc("    global: true\n    global: false\n"), 0, "r1", "global", "twice"},
	{"global bucket", strings.Replace(yamlDoc("    global: true\n"), "fixed_window", "gcra", 1), 0, "r1", "global", "needs algorithm fixed_window, not gcra"},
	{"global sliding window", strings.Replace(yamlDoc("    global: true\n"), "fixed_window", "sliding_window_counter", 1), 0, "r1", "global", "needs algorithm fixed_window"},
	{"global central", yamlDoc("    mode: central\n    global: true\n"), 0, "r1", "global", "needs mode hybrid, not central"},
	{"global local", yamlDoc("    mode: local\n    global: true\n"), 0, "r1", "global", "needs mode hybrid, not local"},
	{"empty override name", yamlDoc("    overrides: {\"\": 5}\n"), 0, "r1", `overrides[""]`, "needs a tier or key"},
	{"zero override", yamlDoc("    overrides: {pro: 0}\n"), 0, "r1", `overrides["pro"]`, "0: needs a tier or key and a limit of at least 1"},
	{"float max_requests", strings.Replace(yamlDoc(""), "max_requests: 10", "max_requests: 1.5", 1), 0, "r1", "max_requests", "integer"},
	{"whole float max_requests", strings.Replace(yamlDoc(""), "max_requests: 10", "max_requests: 10.0", 1), 0, "r1", "max_requests", "integer"},
	{"exponent max_requests", strings.Replace(yamlDoc(""), "max_requests: 10", "max_requests: 1e3", 1), 0, "r1", "max_requests", "integer"},
	{"quoted max_requests", strings.Replace(yamlDoc(""), "max_requests: 10", `max_requests: "10"`, 1), 0, "r1", "max_requests", "integer"},
	{"boolean max_requests", strings.Replace(yamlDoc(""), "max_requests: 10", "max_requests: true", 1), 0, "r1", "max_requests", "integer"},
	{"float burst", strings.Replace(yamlDoc("    burst: 2.99\n"), "fixed_window", "gcra", 1), 0, "r1", "burst", "integer"},
	{"float cost", yamlDoc("    cost: 1.5\n"), 0, "r1", "cost", "integer"},
	{"float sub_windows", strings.Replace(yamlDoc("    sub_windows: 2.5\n"), "fixed_window", "sub_window_counter", 1), 0, "r1", "sub_windows", "integer"},
	{"float override", yamlDoc("    overrides: {pro: 2.5}\n"), 0, "r1", "overrides", "must map names to integers"},
	{"float version", "version: 1.0\n", -1, "", "version", "integer"},
	{"float version truncated", "version: 1.9\n", -1, "", "version", "integer"},
	{"shadow yes, YAML 1.1", yamlDoc("    shadow: yes\n"), 0, "r1", "shadow", "true or false"},
	{"shadow 1", yamlDoc("    shadow: 1\n"), 0, "r1", "shadow", "true or false"},
	{"number for a string", yamlDoc("    tier: 2024\n"), 0, "r1", "tier", "must be a string"},
	{"number id", strings.Replace(yamlDoc(""), "id: r1", "id: 42", 1), 0, "", "id", "must be a string"},
	{"boolean for a string", yamlDoc("    tier: true\n"), 0, "r1", "tier", "must be a string"},
	{"anchor and alias", "version: 1\nrules:\n  - &r {id: a, key: ip, algorithm: gcra, max_requests: 2, window: 1s}\n  - *r\n", -1, "", "", "line 3: anchors and aliases are not supported"},
	{"anchor alone", "version: 1\nrules:\n" + strings.Replace(rule1, "key: ip", "key: &k ip", 1), -1, "", "", "line 4: anchors and aliases are not supported"},
	{"merge key", "version: 1\nrules:\n  - <<: {key: ip}\n    id: r1\n", -1, "", "", "line 3: merge keys (<<) are not supported"},
	{"json float max_requests", `{"version": 1, "rules": [{"id": "r1", "max_requests": 1.5}]}`, 0, "r1", "max_requests", "integer"},
	{"second rule by index", "version: 1\nrules:\n" + rule1 + "  - key: ip\n    id: ''\n", 1, "", "id", "1 to 128"},

	{"json malformed", `{"version": 1,`, -1, "", "", "malformed JSON"},
	{"json trailing data", `{"version": 1} {}`, -1, "", "", "after the document"},
	{"json unknown top field", `{"version": 1, "tiers": {}}`, -1, "", "tiers", "unknown field"},
	{"json top field twice", `{"version": 1, "version": 1}`, -1, "", "version", "twice"},
	{"json version text", `{"version": "1"}`, -1, "", "version", "integer"},
	{"json rules object", `{"version": 1, "rules": {}}`, -1, "", "rules", "list"},
	{"json rule not an object", `{"version": 1, "rules": [3]}`, 0, "", "", "object"},
	{"json unknown rule field", `{"version": 1, "rules": [` + json1 + `, "limit": 5}]}`, 0, "r1", "limit", "unknown field"},
	{"json rule field twice", `{"version": 1, "rules": [` + json1 + `, "key": "ip"}]}`, 0, "r1", "key", "twice"},
	{"json window number", `{"version": 1, "rules": [{"id": "r1", "window": 10}]}`, 0, "r1", "window", "duration string"},
	{"json max_requests text", `{"version": 1, "rules": [{"id": "r1", "max_requests": "10"}]}`, 0, "r1", "max_requests", "integer"},
	{"json id number", `{"version": 1, "rules": [{"id": 5}]}`, 0, "", "id", "string"},
	{"json bad value", `{"version": 1, "rules": [` + strings.Replace(json1, `"ip"`, `"ipv4"`, 1) + `}]}`, 0, "r1", "key", `"ipv4"`},
	{"json duplicate id", `{"version": 1, "rules": [` + json1 + `}, ` + json1 + `}]}`, 1, "r1", "id", "duplicate"},
}

func TestParseRulesErrors(t *testing.T) {
	for _, tc := range parseErrorTests {
		t.Run(tc.name, func(t *testing.T) {
			rules, err := ParseRules([]byte(tc.doc))
			require.Error(t, err)
			assert.Nil(t, rules)
			assert.ErrorAs(t, err, new(*RuleError))
			var re *RuleError
			require.ErrorAs(t, err, &re)
			assert.Equal(t, tc.index, re.Index, "index")
			assert.Equal(t, tc.id, re.ID, "id")
			assert.Equal(t, tc.field, re.Field, "field")
			assert.Contains(t, re.Reason, tc.reason)
			if strings.Contains(tc.reason, "unknown field") || strings.Contains(tc.reason, "twice") {
				assert.Regexp(t, `^line \d+: `, re.Reason, "the key's line")
			}
			msg := err.Error()
			if tc.field != "" {
				assert.Contains(t, msg, tc.field+": ", "the message names the field")
			}
			switch {
			case tc.id != "":
				assert.Contains(t, msg, `rule "`+tc.id+`"`, "the message names the rule")
			case tc.index >= 0:
				assert.Contains(t, msg, "rule "+strconv.Itoa(tc.index)+":", "the message names the rule")
			}
		})
	}
}

// FuzzParseRules checks that ParseRules never panics, fails only with a
// *RuleError, and that what it accepts survives marshalRules unchanged.
func FuzzParseRules(f *testing.F) {
	f.Add([]byte(fullYAML))
	f.Add([]byte(fullJSON))
	f.Add([]byte("version: 1\nrules:\n" + rule1))
	f.Fuzz(func(t *testing.T, data []byte) {
		rules, err := ParseRules(data)
		if err != nil {
			var re *RuleError
			require.ErrorAs(t, err, &re)
			return
		}
		out, err := marshalRules(rules)
		require.NoError(t, err)
		back, err := ParseRules(out)
		require.NoError(t, err)
		assert.Equal(t, rules, back)
	})
}

// applied records what a watcher applied.
type applied struct {
	mu     sync.Mutex
	calls  [][]Rule
	refuse func([]Rule) error // when set, apply returns its error
}

func (a *applied) apply(rules []Rule) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.refuse != nil {
		if err := a.refuse(rules); err != nil {
			return err
		}
	}
	a.calls = append(a.calls, rules)
	return nil
}

func (a *applied) count() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.calls)
}

// quota returns the first rule's quota in the last rules applied, or 0.
func (a *applied) quota() int64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.calls) == 0 || len(a.calls[len(a.calls)-1]) == 0 {
		return 0
	}
	return a.calls[len(a.calls)-1][0].Quota
}

// rulesWithQuota is a valid rules file whose one rule has quota n.
func rulesWithQuota(n int) []byte {
	return []byte(strings.Replace("version: 1\nrules:\n"+rule1, "max_requests: 10", "max_requests: "+strconv.Itoa(n), 1))
}

// writeRename replaces path's content the way editors save: a new file
// renamed over the old one.
func writeRename(t *testing.T, path string, data []byte) {
	t.Helper()
	tmp := path + ".tmp"
	require.NoError(t, os.WriteFile(tmp, data, 0o644))
	require.NoError(t, os.Rename(tmp, path))
}

// reloadMetrics returns a MeterProvider and a function reading its reload
// counter for source and result.
func reloadMetrics(t *testing.T) (*sdkmetric.MeterProvider, func(source, result string) int64) {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { mp.Shutdown(context.Background()) })
	return mp, func(source, result string) int64 {
		var rm metricdata.ResourceMetrics
		require.NoError(t, reader.Collect(context.Background(), &rm))
		for _, sm := range rm.ScopeMetrics {
			for _, m := range sm.Metrics {
				if m.Name != "hybridlimit.http.rules.reloads" {
					continue
				}
				for _, dp := range m.Data.(metricdata.Sum[int64]).DataPoints {
					s, _ := dp.Attributes.Value("source")
					r, _ := dp.Attributes.Value("result")
					if s.AsString() == source && r.AsString() == result {
						return dp.Value
					}
				}
			}
		}
		return 0
	}
}

const (
	waitFor = 5 * time.Second
	tick    = 5 * time.Millisecond
)

// watchNew writes a rules file of limit 1 and watches it with cfg, until t
// ends.
func watchNew(t *testing.T, cfg WatchConfig) (string, *applied) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "rules.yaml")
	require.NoError(t, os.WriteFile(path, rulesWithQuota(1), 0o644))
	a := new(applied)
	src, err := WatchFile(t.Context(), path, a.apply, cfg)
	require.NoError(t, err)
	t.Cleanup(func() { src.Close() })
	return path, a
}

func TestWatchFileRename(t *testing.T) {
	leakcheck.Check(t)
	path, a := watchNew(t, WatchConfig{PollInterval: time.Hour, Debounce: time.Millisecond})
	require.Equal(t, 1, a.count(), "the first version is applied before WatchFile returns")
	require.EqualValues(t, 1, a.quota())

	for n := 2; n <= 4; n++ {
		writeRename(t, path, rulesWithQuota(n))
		require.Eventually(t, func() bool { return a.quota() == int64(n) }, waitFor, tick, "version %d", n)
	}
	assert.Equal(t, 4, a.count())
}

func TestWatchFileSymlinkSwap(t *testing.T) {
	leakcheck.Check(t)
	// A Kubernetes ConfigMap volume: rules.yaml -> ..data/rules.yaml, and
	// ..data -> a timestamped directory, swapped by renaming a new symlink
	// over ..data. No event names rules.yaml.
	dir := t.TempDir()
	version := func(name string, n int) {
		require.NoError(t, os.Mkdir(filepath.Join(dir, name), 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(dir, name, "rules.yaml"), rulesWithQuota(n), 0o644))
		require.NoError(t, os.Symlink(name, filepath.Join(dir, "..data_tmp")))
		require.NoError(t, os.Rename(filepath.Join(dir, "..data_tmp"), filepath.Join(dir, "..data")))
	}
	version("..2026_01_01_00_00_00.1", 1)
	path := filepath.Join(dir, "rules.yaml")
	require.NoError(t, os.Symlink(filepath.Join("..data", "rules.yaml"), path))

	var a applied
	src, err := WatchFile(t.Context(), path, a.apply, WatchConfig{PollInterval: time.Hour, Debounce: time.Millisecond})
	require.NoError(t, err)
	defer src.Close()
	require.EqualValues(t, 1, a.quota())

	version("..2026_01_01_00_01_00.2", 2)
	require.NoError(t, os.RemoveAll(filepath.Join(dir, "..2026_01_01_00_00_00.1")))
	require.Eventually(t, func() bool { return a.quota() == 2 }, waitFor, tick)
	assert.Equal(t, 2, a.count())
}

func TestWatchFileBadVersion(t *testing.T) {
	leakcheck.Check(t)
	mp, reloads := reloadMetrics(t)
	path, a := watchNew(t, WatchConfig{PollInterval: time.Hour, Debounce: time.Millisecond, MeterProvider: mp})
	assert.EqualValues(t, 1, reloads("file", "applied"))

	writeRename(t, path, []byte("version: 1\nrules:\n"+rule1+"    limt: 5\n"))
	require.Eventually(t, func() bool { return reloads("file", "rejected") == 1 }, waitFor, tick)
	assert.Equal(t, 1, a.count(), "a bad version is not applied")
	assert.EqualValues(t, 1, a.quota(), "the previous rules keep serving")

	// A version apply refuses counts as rejected too.
	a.mu.Lock()
	a.refuse = func(r []Rule) error {
		if r[0].Quota == 3 {
			return errors.New("refused")
		}
		return nil
	}
	a.mu.Unlock()
	writeRename(t, path, rulesWithQuota(3))
	require.Eventually(t, func() bool { return reloads("file", "rejected") == 2 }, waitFor, tick)
	assert.EqualValues(t, 1, a.quota())

	// So does a file that disappears, once.
	require.NoError(t, os.Remove(path))
	require.Eventually(t, func() bool { return reloads("file", "rejected") == 3 }, waitFor, tick)

	writeRename(t, path, rulesWithQuota(4))
	require.Eventually(t, func() bool { return a.quota() == 4 }, waitFor, tick)
	assert.EqualValues(t, 2, reloads("file", "applied"))
	assert.EqualValues(t, 3, reloads("file", "rejected"))
}

func TestWatchFileDebounce(t *testing.T) {
	leakcheck.Check(t)
	path, a := watchNew(t, WatchConfig{PollInterval: time.Hour, Debounce: time.Second})

	// A burst of saves, some written in place (truncate, then write: a
	// reader between the two sees an empty file): one reload, of the last.
	for n := 2; n <= 6; n++ {
		if n%2 == 0 {
			writeRename(t, path, rulesWithQuota(n))
		} else {
			require.NoError(t, os.WriteFile(path, rulesWithQuota(n), 0o644))
		}
	}
	require.Eventually(t, func() bool { return a.quota() == 6 }, waitFor, tick)
	assert.Equal(t, 2, a.count(), "the first version, then one reload")
}

func TestWatchFilePoll(t *testing.T) {
	leakcheck.Check(t)
	// Events would wait an hour: only the poll can see the change.
	path, a := watchNew(t, WatchConfig{PollInterval: 20 * time.Millisecond, Debounce: time.Hour})
	writeRename(t, path, rulesWithQuota(2))
	require.Eventually(t, func() bool { return a.quota() == 2 }, waitFor, tick)
	// The same content polled again is not applied again.
	require.Never(t, func() bool { return a.count() > 2 }, 100*time.Millisecond, tick)
}

func TestWatchFileStart(t *testing.T) {
	leakcheck.Check(t)
	dir := t.TempDir()
	var a applied
	_, err := WatchFile(t.Context(), filepath.Join(dir, "missing.yaml"), a.apply, WatchConfig{})
	assert.ErrorIs(t, err, os.ErrNotExist)

	bad := filepath.Join(dir, "bad.yaml")
	require.NoError(t, os.WriteFile(bad, []byte("version: 1\nrules: 5\n"), 0o644))
	_, err = WatchFile(t.Context(), bad, a.apply, WatchConfig{})
	assert.ErrorAs(t, err, new(*RuleError))
	assert.Zero(t, a.count())

	good := filepath.Join(dir, "good.yaml")
	require.NoError(t, os.WriteFile(good, rulesWithQuota(1), 0o644))
	for _, tc := range []struct {
		name  string
		path  string
		apply func([]Rule) error
		cfg   WatchConfig
	}{
		{"no path", "", a.apply, WatchConfig{}},
		{"no apply", good, nil, WatchConfig{}},
		{"negative poll", good, a.apply, WatchConfig{PollInterval: -1}},
		{"negative debounce", good, a.apply, WatchConfig{Debounce: -1}},
	} {
		_, err := WatchFile(t.Context(), tc.path, tc.apply, tc.cfg)
		assert.ErrorIs(t, err, ErrInvalidConfig, tc.name)
	}
}

func TestWatchFileStops(t *testing.T) {
	leakcheck.Check(t)
	path := filepath.Join(t.TempDir(), "rules.yaml")
	require.NoError(t, os.WriteFile(path, rulesWithQuota(1), 0o644))
	var a, b applied
	ctx, cancel := context.WithCancel(t.Context())
	_, err := WatchFile(ctx, path, a.apply, WatchConfig{PollInterval: 10 * time.Millisecond, Debounce: time.Millisecond})
	require.NoError(t, err)
	cancel() // ending the context stops the watcher, without Close (leakcheck)
	src, err := WatchFile(t.Context(), path, b.apply, WatchConfig{PollInterval: 10 * time.Millisecond, Debounce: time.Millisecond})
	require.NoError(t, err)
	require.NoError(t, src.Close())
	require.NoError(t, src.Close(), "Close is idempotent")
	writeRename(t, path, rulesWithQuota(2))
	require.Never(t, func() bool { return a.count() > 1 || b.count() > 1 }, 100*time.Millisecond, tick)
}
