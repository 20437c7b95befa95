package grpclimit_test

import (
	"errors"
	"io"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/hybridlimit/hybridlimit/grpclimit"
	"github.com/hybridlimit/hybridlimit/hybrid"
	"github.com/hybridlimit/hybridlimit/hybrid/httplimit"
	"github.com/hybridlimit/hybridlimit/internal/clocktest"
)

// TestBurstNewKey: a new key's burst is admitted up to the limit, all at
// once, and the next call refused.
func TestBurstNewKey(t *testing.T) {
	clk := clocktest.New(t0)
	ic := newInterceptor(t, clk, grpclimit.Config{Rules: []httplimit.Rule{
		{ID: "burst", Key: httplimit.KeyIP, Endpoint: "/*", Algorithm: hybrid.TokenBucket, Quota: 10, Window: time.Second, Burst: 10},
	}})
	c := serve(t, ic)
	ok, refused := countOK(11, func() result { return c.empty(t) })
	assert.Equal(t, 10, ok)
	assert.Equal(t, []codes.Code{codes.ResourceExhausted}, refused)
}

// TestAllOrNothing: two rules on one call are decided together: a call one
// refuses is charged to neither.
func TestAllOrNothing(t *testing.T) {
	clk := clocktest.New(t0)
	ic := newInterceptor(t, clk, grpclimit.Config{Rules: []httplimit.Rule{
		ipRule("per-ip", "/*", 5, time.Minute),
		{ID: "per-key", Key: httplimit.KeyAPIKey, Endpoint: mEmpty, Algorithm: hybrid.FixedWindow, Quota: 3, Window: time.Minute},
	}})
	c := serve(t, ic)
	ok, _ := countOK(4, func() result { return c.empty(t, "x-api-key", "k1") })
	require.Equal(t, 3, ok, "per-key refuses k1's fourth call")
	r := c.empty(t, "x-api-key", "k1")
	require.Equal(t, codes.ResourceExhausted, r.st.Code())
	_, qf := details(t, r.st)
	require.Len(t, qf.Violations, 1)
	assert.Equal(t, "per-key", qf.Violations[0].QuotaId, "only the rule that refused is named")
	// per-ip was charged 3, not 5: k2 gets the 2 left.
	ok, _ = countOK(3, func() result { return c.empty(t, "x-api-key", "k2") })
	assert.Equal(t, 2, ok)
}

// TestRetryAtDelay: a call retried at RetryInfo's delay is admitted.
func TestRetryAtDelay(t *testing.T) {
	clk := clocktest.New(t0)
	ic := newInterceptor(t, clk, grpclimit.Config{Rules: []httplimit.Rule{
		{ID: "gcra", Key: httplimit.KeyIP, Algorithm: hybrid.GCRA, Quota: 10, Window: time.Second, Burst: 2},
	}})
	c := serve(t, ic)
	ok, _ := countOK(2, func() result { return c.empty(t) })
	require.Equal(t, 2, ok)
	r := c.empty(t)
	require.Equal(t, codes.ResourceExhausted, r.st.Code())
	ri, _ := details(t, r.st)
	delay := ri.RetryDelay.AsDuration()
	assert.Equal(t, 100*time.Millisecond, delay, "10 per second: one every 100 ms")
	clk.Add(delay - time.Millisecond)
	assert.Equal(t, codes.ResourceExhausted, c.empty(t).st.Code(), "before the delay")
	clk.Add(time.Millisecond)
	assert.Equal(t, codes.OK, c.empty(t).st.Code(), "at the delay")
}

// TestMethodPatterns: a rule applies to the methods its pattern names
// only: an exact method, every method of a service, every method.
func TestMethodPatterns(t *testing.T) {
	clk := clocktest.New(t0)
	ic := newInterceptor(t, clk, grpclimit.Config{Rules: []httplimit.Rule{
		ipRule("empty", mEmpty, 1, time.Minute),
		ipRule("service", "/grpc.testing.TestService/*", 3, time.Minute),
	}})
	c := serve(t, ic)
	assert.Equal(t, codes.OK, c.empty(t).st.Code())
	assert.Equal(t, codes.ResourceExhausted, c.empty(t).st.Code(), "empty's limit")
	assert.Equal(t, codes.OK, c.unary(t).st.Code(), "service's second")
	assert.Equal(t, codes.OK, c.unary(t).st.Code(), "service's third")
	assert.Equal(t, codes.ResourceExhausted, c.unary(t).st.Code(), "service's limit")
	ok, _ := countOK(5, func() result { return c.healthCheck(t) })
	assert.Equal(t, 5, ok, "another service: no rule")

	require.NoError(t, ic.SetRules(append(ic.Rules(), ipRule("all", "/*", 1, time.Minute))))
	assert.Equal(t, codes.OK, c.healthCheck(t).st.Code())
	assert.Equal(t, codes.ResourceExhausted, c.healthCheck(t).st.Code(), "every method's rule")
}

// TestStatusDetails: a refusal's status is ResourceExhausted with a
// RetryInfo and a QuotaFailure naming each refusing rule.
func TestStatusDetails(t *testing.T) {
	clk := clocktest.New(t0)
	ic := newInterceptor(t, clk, grpclimit.Config{Rules: []httplimit.Rule{
		ipRule("a", "/*", 1, 10*time.Second),
		ipRule("b", "/*", 1, time.Minute),
	}})
	c := serve(t, ic)
	require.Equal(t, codes.OK, c.empty(t).st.Code())
	r := c.empty(t)
	require.Equal(t, codes.ResourceExhausted, r.st.Code())
	assert.Equal(t, "grpclimit: rate limit exceeded", r.st.Message())
	ri, qf := details(t, r.st)
	assert.Equal(t, time.Minute, ri.RetryDelay.AsDuration(), "the longest wait of the refusing rules")
	require.Len(t, qf.Violations, 2)
	for i, id := range []string{"a", "b"} {
		v := qf.Violations[i]
		assert.Equal(t, id, v.QuotaId)
		assert.Equal(t, "ip", v.Subject)
		assert.Equal(t, int64(1), v.QuotaValue)
		assert.Contains(t, v.Description, id)
	}
}

// TestHeaders: decided calls carry ratelimit-policy (every decided rule)
// and ratelimit (the rule with the least left), admitted or refused.
func TestHeaders(t *testing.T) {
	clk := clocktest.New(t0)
	ic := newInterceptor(t, clk, grpclimit.Config{Rules: []httplimit.Rule{
		ipRule("minute", "/*", 5, time.Minute),
		ipRule("second", mUnary, 2, time.Second),
	}})
	c := serve(t, ic)

	r := c.empty(t)
	require.Equal(t, codes.OK, r.st.Code())
	assert.Equal(t, []string{`"minute";q=5;w=60`}, r.header.Get("ratelimit-policy"))
	assert.Equal(t, []string{`"minute";r=4;t=60`}, r.header.Get("ratelimit"))

	r = c.unary(t)
	require.Equal(t, codes.OK, r.st.Code())
	assert.Equal(t, []string{`"minute";q=5;w=60, "second";q=2;w=1`}, r.header.Get("ratelimit-policy"))
	assert.Equal(t, []string{`"second";r=1;t=1`}, r.header.Get("ratelimit"))

	require.Equal(t, codes.OK, c.unary(t).st.Code())
	r = c.unary(t)
	require.Equal(t, codes.ResourceExhausted, r.st.Code())
	assert.Equal(t, []string{`"minute";q=5;w=60, "second";q=2;w=1`}, r.header.Get("ratelimit-policy"), "on a refusal too")
	assert.Equal(t, []string{`"second";r=0;t=1`}, r.header.Get("ratelimit"))

	noHdr := newInterceptor(t, clk, grpclimit.Config{DisableHeaders: true, Rules: []httplimit.Rule{ipRule("quiet", "/*", 5, time.Minute)}})
	r = serve(t, noHdr).empty(t)
	require.Equal(t, codes.OK, r.st.Code())
	assert.Empty(t, r.header.Get("ratelimit"))
	assert.Empty(t, r.header.Get("ratelimit-policy"))
}

// TestStream: a stream is decided once, when it opens; a refused one never
// reaches the handler and ends with the same status and headers.
func TestStream(t *testing.T) {
	clk := clocktest.New(t0)
	ic := newInterceptor(t, clk, grpclimit.Config{Rules: []httplimit.Rule{ipRule("streams", mStream, 1, time.Minute)}})
	c := serve(t, ic)
	open := func() (metadata.MD, int, error) {
		s, err := c.test.StreamingOutputCall(t.Context(), &testpb.StreamingOutputCallRequest{
			ResponseParameters: []*testpb.ResponseParameters{{}, {}, {}},
		})
		require.NoError(t, err)
		hdr, _ := s.Header()
		n := 0
		for {
			if _, err := s.Recv(); errors.Is(err, io.EOF) {
				return hdr, n, nil
			} else if err != nil {
				return hdr, n, err
			}
			n++
		}
	}
	hdr, n, err := open()
	assert.Equal(t, 3, n, "every message of an admitted stream")
	assert.NoError(t, err)
	assert.Equal(t, []string{`"streams";r=0;t=60`}, hdr.Get("ratelimit"))

	hdr, n, err = open()
	assert.Equal(t, 0, n)
	st := status.Convert(err)
	require.Equal(t, codes.ResourceExhausted, st.Code())
	ri, qf := details(t, st)
	assert.Equal(t, time.Minute, ri.RetryDelay.AsDuration())
	assert.Equal(t, "streams", qf.Violations[0].QuotaId)
	assert.Equal(t, []string{`"streams";q=1;w=60`}, hdr.Get("ratelimit-policy"))
}

// TestShadow: shadow rules count and send headers but never refuse.
func TestShadow(t *testing.T) {
	clk := clocktest.New(t0)
	shadow := ipRule("shadow", "/*", 1, time.Minute)
	shadow.Shadow = true
	ic := newInterceptor(t, clk, grpclimit.Config{Rules: []httplimit.Rule{shadow}})
	c := serve(t, ic)
	ok, _ := countOK(3, func() result { return c.empty(t) })
	assert.Equal(t, 3, ok)
	assert.Equal(t, []string{`"shadow";r=0;t=60`}, c.empty(t).header.Get("ratelimit"))

	all := newInterceptor(t, clk, grpclimit.Config{Shadow: true, Rules: []httplimit.Rule{ipRule("enforced", "/*", 1, time.Minute)}})
	c = serve(t, all)
	ok, _ = countOK(3, func() result { return c.empty(t) })
	assert.Equal(t, 3, ok, "Config.Shadow: every rule in shadow mode")
}

// TestConfigErrors: New refuses a bad field, naming it, and a bad rule
// with a *httplimit.RuleError naming the rule and field.
func TestConfigErrors(t *testing.T) {
	l := newLimiter(t, clocktest.New(t0))
	for _, tc := range []struct {
		cfg   grpclimit.Config
		field string
	}{
		{grpclimit.Config{TrustedProxies: []string{"nope"}}, "TrustedProxies[0]"},
		{grpclimit.Config{TrustedHops: -1}, "TrustedHops"},
		{grpclimit.Config{TrustedHops: 1, TrustedProxies: []string{"10.0.0.1"}}, "TrustedHops"},
		{grpclimit.Config{IPv6Prefix: 129}, "IPv6Prefix"},
		{grpclimit.Config{RetryJitter: -time.Second}, "RetryJitter"},
		{grpclimit.Config{ClientIPHeader: "x-real-ip"}, "ClientIPHeader"},
		{grpclimit.Config{APIKeyHeader: "X-API-Key"}, "APIKeyHeader"},
		{grpclimit.Config{APIKeyHeader: "grpc-timeout"}, "APIKeyHeader"},
	} {
		t.Run(tc.field, func(t *testing.T) {
			_, err := grpclimit.New(l, tc.cfg)
			require.ErrorIs(t, err, grpclimit.ErrInvalidConfig)
			assert.Contains(t, err.Error(), tc.field)
		})
	}
	_, err := grpclimit.New(nil, grpclimit.Config{})
	assert.ErrorIs(t, err, grpclimit.ErrInvalidConfig)

	for _, tc := range []struct {
		rule  httplimit.Rule
		field string
	}{
		{ipRule("bad-method", "GET /x", 1, time.Second), "endpoint"},
		{ipRule("bad-method2", "/pkg.Svc/a/b", 1, time.Second), "endpoint"},
		{ipRule("bad-method3", "/pkg.Svc*/x", 1, time.Second), "endpoint"},
		{ipRule("no-quota", "/*", 0, time.Second), "max_requests"},
		{ipRule("no-window", "/*", 1, 0), "window"},
		{httplimit.Rule{ID: "no-algorithm", Key: httplimit.KeyIP, Quota: 1, Window: time.Second}, "algorithm"},
		{httplimit.Rule{ID: "bad-key", Key: "peer", Algorithm: hybrid.GCRA, Quota: 1, Window: time.Second}, "key"},
		{ipRule("bad id", "/*", 1, time.Second), "id"},
		{httplimit.Rule{ID: "global-gcra", Key: httplimit.KeyIP, Algorithm: hybrid.GCRA, Quota: 1, Window: time.Second, Global: true}, "global"},
		{withGlobal(ipRule("global-no-store", "/*", 1, time.Second)), "global"},
	} {
		t.Run(tc.rule.ID, func(t *testing.T) {
			_, err := grpclimit.New(l, grpclimit.Config{Rules: []httplimit.Rule{tc.rule}})
			var re *httplimit.RuleError
			require.ErrorAs(t, err, &re)
			assert.Equal(t, tc.field, re.Field, err)
			assert.Equal(t, 0, re.Index)
		})
	}
}

// TestSetRulesKeepsRules: a refused SetRules leaves the rules in force.
func TestSetRulesKeepsRules(t *testing.T) {
	clk := clocktest.New(t0)
	rules := []httplimit.Rule{ipRule("one", "/*", 1, time.Minute)}
	ic := newInterceptor(t, clk, grpclimit.Config{Rules: rules})
	err := ic.SetRules([]httplimit.Rule{ipRule("one", "/*", 1, time.Minute), ipRule("one", "/*", 2, time.Minute)})
	var re *httplimit.RuleError
	require.ErrorAs(t, err, &re)
	assert.Equal(t, "id", re.Field)
	assert.Equal(t, rules, ic.Rules())
	changed := rules[0]
	changed.Mode = hybrid.Central
	err = ic.SetRules([]httplimit.Rule{changed})
	require.ErrorAs(t, err, &re)
	assert.Equal(t, "mode", re.Field)
	assert.Equal(t, rules, ic.Rules())
}

// withGlobal returns r made a rule of global reach.
func withGlobal(r httplimit.Rule) httplimit.Rule {
	r.Global = true
	return r
}

// TestSetRulesGlobal: a rule cannot become global under the same ID, as
// its mode cannot change.
func TestSetRulesGlobal(t *testing.T) {
	rules := []httplimit.Rule{ipRule("one", "/*", 1, time.Minute)}
	ic := newInterceptor(t, clocktest.New(t0), grpclimit.Config{Rules: rules})
	err := ic.SetRules([]httplimit.Rule{withGlobal(rules[0])})
	var re *httplimit.RuleError
	require.ErrorAs(t, err, &re)
	assert.Equal(t, "global", re.Field)
	assert.Contains(t, re.Reason, "was false")
	assert.Equal(t, rules, ic.Rules())

	// Checked as a rules file checks it: the document carries global.
	bucket := withGlobal(ipRule("two", "/*", 1, time.Minute))
	bucket.Algorithm = hybrid.GCRA
	err = ic.SetRules([]httplimit.Rule{bucket})
	require.ErrorAs(t, err, &re)
	assert.Equal(t, "global", re.Field)
	assert.Contains(t, re.Reason, "needs algorithm fixed_window, not gcra")
}
