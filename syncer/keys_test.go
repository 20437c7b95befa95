package syncer_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/internal/localx"
	"github.com/hybridlimit/hybridlimit/internal/redistest"
	"github.com/hybridlimit/hybridlimit/local"
	"github.com/hybridlimit/hybridlimit/syncer"
)

// envHelper tells a re-executed test binary which helper to run.
const envHelper = "HYBRIDLIMIT_SYNCER_HELPER"

// TestKeyNamesGolden pins the Redis key names: they are the on-disk format,
// shared by every process and every version that shares limits, so a change
// must be deliberate (and reset every limit). The digests were computed once,
// independently (Python's hashlib/hmac), and pasted here.
func TestKeyNamesGolden(t *testing.T) {
	api := mustRule(t, "api", local.Limit{Algorithm: local.FixedWindow, Quota: 1, Window: time.Second})
	// The rule's parameters are not part of the name: a limit changed at
	// runtime keeps its state, within an algorithm family. Every algorithm
	// keeps its state at part "s": a hash for the windows, a string for the
	// buckets.
	api2 := mustRule(t, "api", local.Limit{Algorithm: local.SlidingWindowCounter, Quota: 7, Window: time.Minute})
	bucket := mustRule(t, "api", local.Limit{Algorithm: local.GCRA, Quota: 7, Window: time.Minute, Burst: 3})
	secret := syncer.Keyspace{Prefix: "x", Secret: []byte("s")}
	tests := []struct {
		name      string
		ks        syncer.Keyspace
		key       string
		state, lg string
		digest    string
	}{
		{"default", syncer.Keyspace{}, "user:42", "hl:{api:6j_UO-HlfWLhY9rhn8dAvQ}:s", "hl:{api:6j_UO-HlfWLhY9rhn8dAvQ}:l", "6j_UO-HlfWLhY9rhn8dAvQ"},
		{"default empty key", syncer.Keyspace{}, "", "hl:{api:47DEQpj8HBSa-_TImW-5JA}:s", "hl:{api:47DEQpj8HBSa-_TImW-5JA}:l", "47DEQpj8HBSa-_TImW-5JA"},
		{"explicit default prefix", syncer.Keyspace{Prefix: "hl"}, "user:42", "hl:{api:6j_UO-HlfWLhY9rhn8dAvQ}:s", "hl:{api:6j_UO-HlfWLhY9rhn8dAvQ}:l", "6j_UO-HlfWLhY9rhn8dAvQ"},
		{"prefix and secret", secret, "user:42", "x:{api:P1s5wR62FZZOLiLh994xvw}:s", "x:{api:P1s5wR62FZZOLiLh994xvw}:l", "P1s5wR62FZZOLiLh994xvw"},
		{"prefix and secret empty key", secret, "", "x:{api:ZOygfM5nkpw1fWPQpK7CBw}:s", "x:{api:ZOygfM5nkpw1fWPQpK7CBw}:l", "ZOygfM5nkpw1fWPQpK7CBw"},
		{"shared tag", syncer.Keyspace{SharedKeyTag: true}, "user:42", "hl:{6j_UO-HlfWLhY9rhn8dAvQ}:api:s", "hl:{6j_UO-HlfWLhY9rhn8dAvQ}:api:l", "6j_UO-HlfWLhY9rhn8dAvQ"},
		{"shared tag empty key", syncer.Keyspace{SharedKeyTag: true}, "", "hl:{47DEQpj8HBSa-_TImW-5JA}:api:s", "hl:{47DEQpj8HBSa-_TImW-5JA}:api:l", "47DEQpj8HBSa-_TImW-5JA"},
		{"shared tag prefix and secret", syncer.Keyspace{Prefix: "x", Secret: []byte("s"), SharedKeyTag: true}, "user:42", "x:{P1s5wR62FZZOLiLh994xvw}:api:s", "x:{P1s5wR62FZZOLiLh994xvw}:api:l", "P1s5wR62FZZOLiLh994xvw"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, r := range []*syncer.Rule{api, api2, bucket} {
				s, l := syncer.Keys(&tt.ks, r, tt.key)
				assert.Equal(t, tt.state, s, "Keys(%v, %q): the state's name", syncer.RuleLimit(r), tt.key)
				assert.Equal(t, tt.lg, l, "Keys(%v, %q): the log's name", syncer.RuleLimit(r), tt.key)
			}
			assert.Equal(t, tt.digest, syncer.Digest(&tt.ks, tt.key), "Digest(%q)", tt.key)
		})
	}
	t.Run("central copies the keyspace", func(t *testing.T) {
		ks := syncer.Keyspace{Prefix: "x", Secret: []byte("s")}
		c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", ContextTimeoutEnabled: true})
		defer c.Close()
		cen, err := syncer.NewCentral(syncer.CentralConfig{Client: c, Keyspace: ks})
		require.NoError(t, err)
		ks.Secret[0] = 't' // the caller's buffer changes afterwards
		s, _ := syncer.Keys(syncer.CentralKeyspace(cen), api, "user:42")
		assert.Equal(t, "x:{api:P1s5wR62FZZOLiLh994xvw}:s", s, "the state's name after the caller changed its Secret")
	})
}

// crossProcessKeyspaces and crossProcessKeys are what TestHelperKeyNames
// prints and TestKeyNamesAcrossProcesses compares.
var crossProcessKeyspaces = []syncer.Keyspace{
	{},
	{Prefix: "x", Secret: []byte("s")},
	{Prefix: "p", Secret: []byte{0, 0xff, '{'}, SharedKeyTag: true},
}

func crossProcessKeys() []string {
	all := make([]byte, 256)
	for i := range all {
		all[i] = byte(i)
	}
	huge := make([]byte, 1<<20)
	for i := range huge {
		huge[i] = byte(i * 7919 >> 3)
	}
	return []string{
		"", "user:42", "\x00", "\x00\x00", "\xff\xfe", "{", "}", "{}", "a:b", "\n", "a\r\nb",
		"é", "\xc3", "日本", string(all), strings.Repeat("k", 1<<20), string(huge),
		"hl:{api:6j_UO-HlfWLhY9rhn8dAvQ}:s", // a key that looks like a key name
	}
}

func crossProcessRules(t testing.TB) []*syncer.Rule {
	return []*syncer.Rule{
		mustRule(t, "api", local.Limit{Algorithm: local.FixedWindow, Quota: 1, Window: time.Second}),
		mustRule(t, "a.b-c_d:e/f", local.Limit{Algorithm: local.SlidingWindowLog, Quota: 1, Window: time.Second}),
	}
}

// keyNameLines is one line per (keyspace, rule, key): the indices and the
// two names.
func keyNameLines(t testing.TB) []string {
	var lines []string
	for ki, ks := range crossProcessKeyspaces {
		for ri, r := range crossProcessRules(t) {
			for i, k := range crossProcessKeys() {
				s, l := syncer.Keys(&ks, r, k)
				lines = append(lines, fmt.Sprintf("names %d %d %d %s %s", ki, ri, i, s, l))
			}
		}
	}
	return lines
}

// TestHelperKeyNames is not a test: TestKeyNamesAcrossProcesses runs the
// test binary again to run it, as another process.
func TestHelperKeyNames(t *testing.T) {
	if os.Getenv(envHelper) != "keynames" {
		t.Skip("helper process for TestKeyNamesAcrossProcesses")
	}
	w := bufio.NewWriter(os.Stdout)
	for _, l := range keyNameLines(t) {
		fmt.Fprintln(w, l)
	}
	w.Flush()
}

// TestKeyNamesAcrossProcesses checks that another process (another heap,
// another maphash seed, another start time) names every key identically.
func TestKeyNamesAcrossProcesses(t *testing.T) {
	cmd := exec.CommandContext(t.Context(), redistest.Exec(), "-test.run=^TestHelperKeyNames$", "-test.count=1")
	cmd.Env = append(os.Environ(), envHelper+"=keynames")
	cmd.WaitDelay = 5 * time.Second
	out, err := cmd.Output()
	require.NoError(t, err, "helper's output:\n%s", out)
	var got []string
	for _, l := range strings.Split(string(out), "\n") {
		if strings.HasPrefix(l, "names ") {
			got = append(got, l)
		}
	}
	want := keyNameLines(t)
	require.Equal(t, len(want), len(got), "names the helper printed; output:\n%s", out)
	assert.Equal(t, want, got, "another process names differently (expected: here, actual: there)")
}

// findCollision reports two different keys with the same digest, if any.
func findCollision(digest func(string) string, keys []string) (a, b string, found bool) {
	seen := make(map[string]string, len(keys))
	for _, k := range keys {
		d := digest(k)
		if prev, ok := seen[d]; ok && prev != k {
			return prev, k, true
		}
		seen[d] = k
	}
	return "", "", false
}

// collisionFamilies are sets of keys an attacker, or bad luck, might pick:
// sequential, nearly identical, full of the bytes that matter in key names.
func collisionFamilies() []struct {
	name string
	keys []string
} {
	type family = struct {
		name string
		keys []string
	}
	var fs []family
	add := func(name string, keys []string) { fs = append(fs, family{name, keys}) }
	add("none", nil)
	add("one", []string{"x"})
	add("duplicates", []string{"x", "x", "y", "y"})

	seq := make([]string, 0, 300_000)
	for i := range 300_000 {
		seq = append(seq, "user:"+strconv.Itoa(i))
	}
	add("sequential 300000", seq)
	nums := make([]string, 0, 100_000)
	for i := range 100_000 {
		nums = append(nums, strconv.Itoa(i))
	}
	add("decimal 100000", nums)

	base := []byte("tenant:acme/user:12345/route:/v1/orders/{id}:POST\nand some more")
	var bits, bytesOne []string
	bits = append(bits, string(base))
	for i := range base {
		for b := range 8 {
			k := bytes.Clone(base)
			k[i] ^= 1 << b
			bits = append(bits, string(k))
		}
		for v := range 256 {
			k := bytes.Clone(base)
			k[i] = byte(v)
			bytesOne = append(bytesOne, string(k))
		}
	}
	add("one bit flipped", bits)
	add("one byte changed", bytesOne)

	// Every string of up to 7 bytes over the bytes that shape key names.
	alphabet := []byte("{}:\na")
	var shaped []string
	var grow func(prefix []byte)
	grow = func(prefix []byte) {
		if len(prefix) > 0 {
			shaped = append(shaped, string(prefix))
		}
		if len(prefix) == 7 {
			return
		}
		for _, c := range alphabet {
			grow(append(prefix, c))
		}
	}
	grow(nil)
	add("braces colons newlines", shaped)

	var invalid []string
	for a := 0x80; a <= 0xff; a++ {
		for b := 0x80; b <= 0xff; b++ {
			invalid = append(invalid, string([]byte{byte(a), byte(b)}), string([]byte{0xc3, byte(a), byte(b)}))
		}
	}
	add("invalid utf-8", invalid)

	long := make([]byte, 4096)
	for i := range long {
		long[i] = byte(i*31 + i>>8)
	}
	var prefixes []string
	for i := 0; i <= len(long); i++ {
		prefixes = append(prefixes, string(long[:i]))
	}
	add("prefixes of each other", prefixes)

	var nul []string
	for i := range 2000 {
		nul = append(nul, strings.Repeat("\x00", i))
	}
	add("runs of NUL", nul)

	var all []string // but the two big ones, to save time
	for _, f := range fs {
		if len(f.keys) < 100_000 {
			all = append(all, f.keys...)
		}
	}
	add("all of the smaller ones", all)
	return fs
}

// TestDigestCollisions runs the crafted families through the real digests
// (none may collide) and through a digest cut to 2 characters, where the
// same checker must find collisions: the check can fail.
func TestDigestCollisions(t *testing.T) {
	digestRe := regexp.MustCompile(`^[A-Za-z0-9_-]{22}$`)
	plain, keyed := &syncer.Keyspace{}, &syncer.Keyspace{Secret: []byte("cluster secret")}
	for _, f := range collisionFamilies() {
		t.Run(f.name, func(t *testing.T) {
			spaces := []*syncer.Keyspace{plain, keyed}
			if len(f.keys) >= 100_000 { // the big ones: plain only, to save time
				spaces = spaces[:1]
			}
			for _, ks := range spaces {
				a, b, found := findCollision(func(k string) string { return syncer.Digest(ks, k) }, f.keys)
				assert.False(t, found, "secret %q: %q and %q share the digest %q", ks.Secret, a, b, syncer.Digest(ks, a))
			}
			for i, k := range f.keys {
				require.Regexp(t, digestRe, syncer.Digest(plain, k), "Digest(%q): want 22 characters of base64url", k)
				if i > 1000 {
					break
				}
			}
			truncated := func(k string) string { return syncer.Digest(plain, k)[:2] }
			a, b, found := findCollision(truncated, f.keys)
			if len(f.keys) >= 1000 {
				assert.True(t, found, "a 12-bit digest shows no collision among %d keys: the checker is blind", len(f.keys))
			}
			if found {
				assert.NotEqual(t, a, b, "checker reported a key colliding with itself")
				assert.Equal(t, truncated(a), truncated(b), "checker reported %q and %q, which are not a collision", a, b)
				assert.GreaterOrEqual(t, len(f.keys), 3, "collision %q, %q among so few keys", a, b)
			}
		})
	}
}

// TestAnyKeyBytes decides keys of any bytes, any length, against Redis: each
// has its own state, and no user byte reaches a key name.
func TestAnyKeyBytes(t *testing.T) {
	keys := []string{"", "{", "}", "{}", "a:b", "\n", "\xff\xfe", "\x00", strings.Repeat("\xff{", 1<<19), "x"}
	topologies(t, func(t *testing.T, c redis.UniversalClient) {
		ctx := context.Background()
		prefix := redistest.Prefix(t)
		cen := newCentral(t, c, syncer.Keyspace{Prefix: prefix})
		rule := mustRule(t, "r", local.Limit{Algorithm: local.SlidingWindowLog, Quota: 3, Window: time.Hour})
		now := time.Now()
		remaining := func(k string) int64 {
			t.Helper()
			d, err := syncer.AllowNAt(ctx, cen, now, rule, k, 0)
			require.NoError(t, err)
			return d.Remaining()
		}
		for i, k := range keys {
			for j := range 4 {
				d, err := syncer.AllowNAt(ctx, cen, now, rule, k, 1)
				require.NoError(t, err, "key %d (%q)", i, trunc(k))
				require.Equal(t, j < 3, d.Allowed(), "key %d (%q), request %d: allowed", i, trunc(k), j)
			}
			for o, other := range keys {
				want := int64(3)
				if o <= i {
					want = 0
				}
				assert.Equal(t, want, remaining(other), "after consuming key %d (%q): key %d (%q)'s remaining", i, trunc(k), o, trunc(other))
			}
		}
		names, err := redistest.Keys(ctx, c, prefix)
		require.NoError(t, err)
		want := map[string]bool{}
		for _, k := range keys {
			s, l := syncer.Keys(syncer.CentralKeyspace(cen), rule, k)
			want[s], want[l] = true, true
		}
		nameRe := regexp.MustCompile(`^` + regexp.QuoteMeta(prefix) + `:\{r:[A-Za-z0-9_-]{22}\}:[sl]$`)
		for _, n := range names {
			assert.Regexp(t, nameRe, n, "Redis key %q: not <prefix>:{r:<digest>}:<part>", trunc(n))
			assert.True(t, want[n], "Redis key %q: not a name of the keys decided", trunc(n))
			delete(want, n)
		}
		assert.Empty(t, want, "names missing in Redis")
	})
}

func trunc(s string) string {
	if len(s) > 40 {
		return s[:40] + "…(" + strconv.Itoa(len(s)) + " bytes)"
	}
	return s
}

// TestRuleNames checks the rule names NewRule accepts: they become part of
// Redis key names (a brace would move the hash tag) and of metrics.
func TestRuleNames(t *testing.T) {
	lim := local.Limit{Algorithm: local.FixedWindow, Quota: 1, Window: time.Second}
	tests := []struct {
		name string
		ok   bool
	}{
		{"", false},
		{strings.Repeat("a", syncer.MaxRuleName+1), false},
		{"a{b", false},
		{"a}b", false},
		{"{ab}", false},
		{"a b", false},
		{"a\nb", false},
		{"a\x00", false},
		{"é", false},
		{"日本", false},
		{"a\tb", false},
		{"a*b", false},
		{"a", true},
		{"Z", true},
		{"0", true},
		{strings.Repeat("a", syncer.MaxRuleName), true},
		{"api-v1_x.y:z/w", true},
		{"login/POST:per-ip", true},
		{"-_.:/", true},
	}
	for _, tt := range tests {
		t.Run(strconv.Quote(trunc(tt.name)), func(t *testing.T) {
			err := syncer.ValidRuleName(tt.name)
			r, nerr := syncer.NewRule(tt.name, lim)
			if tt.ok {
				require.NoError(t, err, "ValidRuleName")
				require.NoError(t, nerr, "NewRule")
				assert.Equal(t, tt.name, syncer.RuleName(r), "the rule's name")
				assert.Equal(t, localx.MustLimit(lim), syncer.RuleLimit(r), "the rule's limit")
				return
			}
			assert.ErrorIs(t, err, syncer.ErrInvalidRule, "ValidRuleName")
			assert.ErrorIs(t, nerr, syncer.ErrInvalidRule, "NewRule")
			assert.Nil(t, r, "NewRule's rule")
		})
	}
	t.Run("zero limit", func(t *testing.T) {
		r, err := syncer.NewRule("ok", local.Limit{})
		assert.ErrorIs(t, err, syncer.ErrInvalidRule, "NewRule(zero Limit)")
		assert.ErrorIs(t, err, local.ErrInvalidConfig, "NewRule(zero Limit): the limit's error")
		assert.Nil(t, r, "NewRule(zero Limit)'s rule")
	})
}

// TestNewCentralConfig checks NewCentral's validation of Config.
func TestNewCentralConfig(t *testing.T) {
	good := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", ContextTimeoutEnabled: true})
	defer good.Close()
	noCtx := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer noCtx.Close()
	noCtxCluster := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{"127.0.0.1:1"}})
	defer noCtxCluster.Close()
	noCtxRing := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": "127.0.0.1:1"}})
	defer noCtxRing.Close()
	cluster := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{"127.0.0.1:1"}, ContextTimeoutEnabled: true})
	defer cluster.Close()
	tests := []struct {
		name string
		cfg  syncer.CentralConfig
		ok   bool
	}{
		{"valid", syncer.CentralConfig{Client: good}, true},
		{"valid cluster", syncer.CentralConfig{Client: cluster, Keyspace: syncer.Keyspace{Prefix: "a:b", SharedKeyTag: true}}, true},
		{"valid timeout", syncer.CentralConfig{Client: good, Timeout: time.Second}, true},
		{"nil client", syncer.CentralConfig{}, false},
		{"client without ContextTimeoutEnabled", syncer.CentralConfig{Client: noCtx}, false},
		{"cluster client without ContextTimeoutEnabled", syncer.CentralConfig{Client: noCtxCluster}, false},
		{"ring without ContextTimeoutEnabled", syncer.CentralConfig{Client: noCtxRing}, false},
		{"prefix with {", syncer.CentralConfig{Client: good, Keyspace: syncer.Keyspace{Prefix: "a{"}}, false},
		{"prefix with }", syncer.CentralConfig{Client: good, Keyspace: syncer.Keyspace{Prefix: "}"}}, false},
		{"prefix with a hash tag", syncer.CentralConfig{Client: good, Keyspace: syncer.Keyspace{Prefix: "{tag}"}}, false},
		{"negative timeout", syncer.CentralConfig{Client: good, Timeout: -time.Second}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cen, err := syncer.NewCentral(tt.cfg)
			if tt.ok {
				require.NoError(t, err, "NewCentral")
				require.NotNil(t, cen, "NewCentral")
				want := tt.cfg.Timeout
				if want == 0 {
					want = syncer.DefaultTimeout
				}
				assert.Equal(t, want, cen.Timeout(), "timeout")
				return
			}
			assert.ErrorIs(t, err, syncer.ErrInvalidConfig, "NewCentral")
			assert.Nil(t, cen, "NewCentral's Central")
		})
	}
}
