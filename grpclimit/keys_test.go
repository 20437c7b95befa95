package grpclimit_test

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"

	"github.com/hybridlimit/hybridlimit/grpclimit"
	"github.com/hybridlimit/hybridlimit/hybrid"
	"github.com/hybridlimit/hybridlimit/hybrid/httplimit"
	"github.com/hybridlimit/hybridlimit/internal/clocktest"
)

// TestKeyIP: ip rules count by the peer's address; x-forwarded-for is
// believed from trusted proxies only, so a client cannot be a new key per
// call by forging it.
func TestKeyIP(t *testing.T) {
	rules := []httplimit.Rule{ipRule("ip", "/*", 1, time.Minute)}
	for _, tc := range []struct {
		name     string
		cfg      grpclimit.Config
		separate bool // whether forwarded addresses are keys of their own
	}{
		{"no proxies", grpclimit.Config{}, false},
		{"untrusted peer", grpclimit.Config{TrustedProxies: []string{"10.0.0.0/8"}}, false},
		{"trusted peer", grpclimit.Config{TrustedProxies: []string{"127.0.0.0/8"}}, true},
		{"trusted hops", grpclimit.Config{TrustedHops: 1}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := tc.cfg
			cfg.Rules = rules
			c := serve(t, newInterceptor(t, clocktest.New(t0), cfg))
			require.Equal(t, codes.OK, c.empty(t, "x-forwarded-for", "203.0.113.1").st.Code())
			got := c.empty(t, "x-forwarded-for", "203.0.113.2").st.Code()
			if tc.separate {
				assert.Equal(t, codes.OK, got, "another client behind the proxy")
				assert.Equal(t, codes.ResourceExhausted, c.empty(t, "x-forwarded-for", "198.51.100.7, 203.0.113.2").st.Code(),
					"the rightmost untrusted entry: what the proxy saw, not what the client wrote")
			} else {
				assert.Equal(t, codes.ResourceExhausted, got, "a forged x-forwarded-for is ignored: the peer is the key")
			}
		})
	}
}

// TestClientIPHeader: a single-value metadata key set by a trusted proxy
// names the client, and is ignored from anyone else.
func TestClientIPHeader(t *testing.T) {
	rules := []httplimit.Rule{ipRule("ip", "/*", 1, time.Minute)}
	trusted := serve(t, newInterceptor(t, clocktest.New(t0), grpclimit.Config{Rules: rules, TrustedProxies: []string{"127.0.0.1"}, ClientIPHeader: "x-real-ip"}))
	require.Equal(t, codes.OK, trusted.empty(t, "x-real-ip", "203.0.113.1").st.Code())
	assert.Equal(t, codes.OK, trusted.empty(t, "x-real-ip", "203.0.113.2").st.Code())
	assert.Equal(t, codes.ResourceExhausted, trusted.empty(t, "x-real-ip", "203.0.113.2").st.Code())

	untrusted := serve(t, newInterceptor(t, clocktest.New(t0), grpclimit.Config{Rules: rules, TrustedProxies: []string{"192.0.2.1"}, ClientIPHeader: "x-real-ip"}))
	require.Equal(t, codes.OK, untrusted.empty(t, "x-real-ip", "203.0.113.1").st.Code())
	assert.Equal(t, codes.ResourceExhausted, untrusted.empty(t, "x-real-ip", "203.0.113.2").st.Code())
}

// TestIPv6Prefix: IPv6 clients are grouped by their prefix, whether the
// peer itself (on ::1) or forwarded.
func TestIPv6Prefix(t *testing.T) {
	rules := []httplimit.Rule{ipRule("ip", "/*", 1, time.Minute)}
	c := serve(t, newInterceptor(t, clocktest.New(t0), grpclimit.Config{Rules: rules, TrustedProxies: []string{"127.0.0.1"}, IPv6Prefix: 64}))
	require.Equal(t, codes.OK, c.empty(t, "x-forwarded-for", "2001:db8:1:2::1").st.Code())
	assert.Equal(t, codes.ResourceExhausted, c.empty(t, "x-forwarded-for", "2001:db8:1:2:ffff::9").st.Code(), "the same /64")
	assert.Equal(t, codes.OK, c.empty(t, "x-forwarded-for", "2001:db8:1:3::1").st.Code(), "another /64")

	ln, err := net.Listen("tcp", "[::1]:0")
	if err != nil {
		t.Skip("no IPv6 loopback:", err)
	}
	ln.Close()
	c6 := serveOn(t, newInterceptor(t, clocktest.New(t0), grpclimit.Config{Rules: rules, IPv6Prefix: 64}), "[::1]:0")
	require.Equal(t, codes.OK, c6.empty(t).st.Code())
	assert.Equal(t, codes.ResourceExhausted, c6.empty(t).st.Code(), "the peer ::1")
}

// TestKeyAPIKeyAndTiers: api_key rules count by the API key metadata, and
// apply only to calls that have one; a tier's override and a tier-only
// rule follow the key's tier.
func TestKeyAPIKeyAndTiers(t *testing.T) {
	perKey := httplimit.Rule{ID: "key", Key: httplimit.KeyAPIKey, Algorithm: hybrid.FixedWindow, Quota: 1, Window: time.Minute,
		Overrides: map[string]int64{"gold": 3}}
	goldOnly := httplimit.Rule{ID: "gold-health", Key: httplimit.KeyAPIKey, Endpoint: mHealth, Tier: "gold", Algorithm: hybrid.FixedWindow, Quota: 1, Window: time.Minute}
	c := serve(t, newInterceptor(t, clocktest.New(t0), grpclimit.Config{
		APIKeyHeader: "api-key", Tiers: map[string]string{"g1": "gold"},
		Rules: []httplimit.Rule{perKey, goldOnly},
	}))
	ok, _ := countOK(3, func() result { return c.empty(t) })
	assert.Equal(t, 3, ok, "no key: the rule does not apply")
	ok, _ = countOK(3, func() result { return c.empty(t, "api-key", "plain") })
	assert.Equal(t, 1, ok, "a key without a tier: the rule's quota")
	ok, _ = countOK(4, func() result { return c.empty(t, "api-key", "g1") })
	assert.Equal(t, 3, ok, "a gold key: its override's")
	r := c.empty(t, "api-key", "g1")
	assert.Equal(t, []string{`"key";q=3;w=60`}, r.header.Get("ratelimit-policy"))
	_, qf := details(t, r.st)
	assert.Equal(t, "api_key", qf.Violations[0].Subject, "the key type, never the key")
	assert.Equal(t, int64(3), qf.Violations[0].QuotaValue)
}

// TestKeyUser: user rules count by what UserFunc returns for the call.
func TestKeyUser(t *testing.T) {
	user := func(ctx context.Context, fullMethod string) (string, bool) {
		v := metadata.ValueFromIncomingContext(ctx, "user")
		if len(v) == 0 {
			return "", false
		}
		return v[0] + "@" + fullMethod, true
	}
	c := serve(t, newInterceptor(t, clocktest.New(t0), grpclimit.Config{UserFunc: user, Rules: []httplimit.Rule{
		{ID: "user", Key: httplimit.KeyUser, Algorithm: hybrid.FixedWindow, Quota: 1, Window: time.Minute},
	}}))
	assert.Equal(t, codes.OK, c.empty(t, "user", "alice").st.Code())
	assert.Equal(t, codes.ResourceExhausted, c.empty(t, "user", "alice").st.Code())
	assert.Equal(t, codes.OK, c.unary(t, "user", "alice").st.Code(), "the func's key names the method too")
	assert.Equal(t, codes.OK, c.empty(t, "user", "bob").st.Code())
	ok, _ := countOK(3, func() result { return c.empty(t) })
	assert.Equal(t, 3, ok, "no user: the rule does not apply")
}

// TestCost: Config.Cost charges a call its cost under every rule.
func TestCost(t *testing.T) {
	cost := func(_ context.Context, fullMethod string) int64 {
		if fullMethod == mUnary {
			return 3
		}
		return 0
	}
	c := serve(t, newInterceptor(t, clocktest.New(t0), grpclimit.Config{Cost: cost, Rules: []httplimit.Rule{ipRule("ip", "/*", 4, time.Minute)}}))
	require.Equal(t, codes.OK, c.unary(t).st.Code())
	assert.Equal(t, []string{`"ip";r=0;t=60`}, c.empty(t).header.Get("ratelimit"), "3, then the rule's own cost, 1: all 4")
	assert.Equal(t, codes.ResourceExhausted, c.unary(t).st.Code())
}
