package rls_test

import (
	"math"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/hybridlimit/hybridlimit/envoy/rls"
	"github.com/hybridlimit/hybridlimit/internal/leakcheck"
)

// The examples of envoyproxy/ratelimit's README, each as a file under
// testdata, behave as that README says.
func TestDocumentedExamples(t *testing.T) {
	leakcheck.Check(t)

	t.Run("1: two values of one key, 500/s each", func(t *testing.T) {
		h := newLocal(t, "example1.yaml")
		assert.Equal(t, 500, h.admitted(t, 501, "mongo_cps", desc("database", "users")))
		assert.Equal(t, 500, h.admitted(t, 501, "mongo_cps", desc("database", "default")))
		// Another value matches nothing: OK, no limit.
		resp := h.ask(t, "mongo_cps", desc("database", "other"))
		assert.Equal(t, codeOK, resp.GetOverallCode())
		assert.Nil(t, resp.GetStatuses()[0].GetCurrentLimit())
		// The next second, a new window.
		h.clock.Add(time.Second)
		assert.Equal(t, codeOK, h.ask(t, "mongo_cps", desc("database", "users")).GetOverallCode())
	})

	t.Run("2: nested descriptors, a limit per phone number", func(t *testing.T) {
		h := newLocal(t, "example2.yaml")
		marketing := desc("message_type", "marketing", "to_number", "2061111111")
		number := desc("to_number", "2061111111")
		for i := range 5 {
			resp := h.ask(t, "messaging", marketing, number)
			require.Equal(t, codeOK, resp.GetOverallCode(), "request %d", i)
			assert.EqualValues(t, 4-i, resp.GetStatuses()[0].GetLimitRemaining())
			assert.EqualValues(t, 99-i, resp.GetStatuses()[1].GetLimitRemaining())
		}
		resp := h.ask(t, "messaging", marketing, number)
		assert.Equal(t, codeOver, resp.GetOverallCode())
		assert.Equal(t, codeOver, resp.GetStatuses()[0].GetCode())
		assert.Equal(t, codeOK, resp.GetStatuses()[1].GetCode())
		assert.EqualValues(t, rlsv3.RateLimitResponse_RateLimit_DAY, resp.GetStatuses()[0].GetCurrentLimit().GetUnit())
		// Another number has its own 5.
		assert.Equal(t, 5, h.admitted(t, 6, "messaging", desc("message_type", "marketing", "to_number", "2062222222")))
		// The refused request charged nothing: the number's 100 a day has
		// 95 left.
		assert.Equal(t, 95, h.admitted(t, 96, "messaging", number))
	})

	t.Run("3: most specific match first; a limit of 0 refuses", func(t *testing.T) {
		h := newLocal(t, "example3.yaml")
		assert.Equal(t, 10, h.admitted(t, 11, "edge_proxy_per_ip", desc("remote_address", "50.0.0.1")))
		resp := h.ask(t, "edge_proxy_per_ip", desc("remote_address", "50.0.0.5"))
		assert.Equal(t, codeOver, resp.GetOverallCode())
		assert.EqualValues(t, 0, resp.GetStatuses()[0].GetCurrentLimit().GetRequestsPerUnit())
		// The other address's count is its own.
		assert.Equal(t, 10, h.admitted(t, 11, "edge_proxy_per_ip", desc("remote_address", "50.0.0.2")))
	})

	t.Run("4: the request's depth must be the limit's", func(t *testing.T) {
		two := desc("key", "value", "subkey", "subvalue")
		a := newLocal(t, "example4a.yaml")
		resp := a.ask(t, "example4", two)
		assert.Equal(t, codeOK, resp.GetOverallCode())
		assert.Nil(t, resp.GetStatuses()[0].GetCurrentLimit(), "no match")
		b := newLocal(t, "example4b.yaml")
		assert.Equal(t, 300, b.admitted(t, 301, "example4", two))
		// One entry alone reaches a node without a limit.
		assert.Nil(t, b.ask(t, "example4", desc("key", "value")).GetStatuses()[0].GetCurrentLimit())
	})

	t.Run("5: unlimited", func(t *testing.T) {
		h := newLocal(t, "example5.yaml")
		for range 3 {
			resp := h.ask(t, "internal", desc("ldap", "cn=admin"))
			assert.Equal(t, codeOK, resp.GetOverallCode())
			assert.EqualValues(t, uint32(math.MaxUint32), resp.GetStatuses()[0].GetLimitRemaining())
		}
		assert.Equal(t, 100, h.admitted(t, 101, "internal", desc("azure", "x")))
	})

	t.Run("6: shadow mode", func(t *testing.T) {
		h := newLocal(t, "example6.yaml")
		a := desc("service", "auth-service", "user", "user-a")
		assert.Equal(t, 30, h.admitted(t, 30, "example6", a), "never limited")
		resp := h.ask(t, "example6", a)
		assert.Equal(t, codeOK, resp.GetStatuses()[0].GetCode())
		assert.EqualValues(t, 0, resp.GetStatuses()[0].GetLimitRemaining(), "over its limit, in the shadow")
		assert.Equal(t, 20, h.admitted(t, 21, "example6", desc("service", "auth-service", "user", "user-b")))
	})

	t.Run("7: replaces", func(t *testing.T) {
		h := newLocal(t, "example7.yaml")
		k1 := desc("key_1", "value_1", "user", "bkthomps")
		k2 := desc("key_2", "value_2", "user", "bkthomps")
		// Both: 10/s, the replaced 5/s neither counted nor told.
		for range 10 {
			resp := h.ask(t, "example7", k1, k2)
			require.Equal(t, codeOK, resp.GetOverallCode())
			assert.Nil(t, resp.GetStatuses()[0].GetCurrentLimit())
		}
		assert.Equal(t, codeOver, h.ask(t, "example7", k1, k2).GetOverallCode())
		// (key_1, value_1) alone still has its 5/s, untouched.
		assert.Equal(t, 5, h.admitted(t, 6, "example7", k1))
	})

	t.Run("8: detailed_metric is accepted", func(t *testing.T) {
		h := newLocal(t, "example8.yaml")
		assert.Equal(t, 10, h.admitted(t, 11, "example8", desc("key1", "unspecified_value")))
		assert.Equal(t, 10, h.admitted(t, 11, "example8", desc("key1", "unspecified_value2")))
		assert.Equal(t, 20, h.admitted(t, 21, "example8", desc("key1", "value1")))
	})

	t.Run("9: wildcard values, each counted apart", func(t *testing.T) {
		h := newLocal(t, "example9.yaml")
		assert.Equal(t, 20, h.admitted(t, 21, "example9", desc("key1", "value_1")))
		assert.Equal(t, 20, h.admitted(t, 21, "example9", desc("key1", "value_2")))
		assert.Nil(t, h.ask(t, "example9", desc("key1", "other")).GetStatuses()[0].GetCurrentLimit())
	})
}

func TestHitsAddend(t *testing.T) {
	leakcheck.Check(t)
	h := newLocal(t, "example5.yaml") // azure: 100/min
	resp := h.askN(t, "internal", 60, desc("azure", "a"))
	assert.Equal(t, codeOK, resp.GetOverallCode())
	assert.EqualValues(t, 40, resp.GetStatuses()[0].GetLimitRemaining())
	assert.Equal(t, codeOver, h.askN(t, "internal", 41, desc("azure", "a")).GetOverallCode(), "41 > 40")
	// A descriptor's own hits_addend wins over the request's.
	d := desc("azure", "a")
	d.HitsAddend = wrapperspb.UInt64(40)
	resp = h.askN(t, "internal", 90, d)
	assert.Equal(t, codeOK, resp.GetOverallCode())
	assert.EqualValues(t, 0, resp.GetStatuses()[0].GetLimitRemaining())
	// Zero checks without charging.
	d.HitsAddend = wrapperspb.UInt64(0)
	assert.Equal(t, codeOK, h.ask(t, "internal", d).GetOverallCode())
	assert.Equal(t, codeOver, h.ask(t, "internal", desc("azure", "a")).GetOverallCode())
}

func TestResetAndHeaders(t *testing.T) {
	leakcheck.Check(t)
	h := newLocal(t, "example2.yaml")
	h.clock.Add(6 * time.Hour)
	marketing := desc("message_type", "marketing", "to_number", "1")
	number := desc("to_number", "1")
	resp := h.ask(t, "messaging", marketing, number)
	st := resp.GetStatuses()[0]
	assert.Equal(t, 18*time.Hour, st.GetDurationUntilReset().AsDuration(), "the day's window ends at midnight")
	hdr := headers(resp)
	assert.Equal(t, `"messaging.message_type_marketing.to_number";q=5;w=86400, "messaging.to_number";q=100;w=86400`, hdr["ratelimit-policy"])
	assert.Equal(t, `"messaging.message_type_marketing.to_number";r=4;t=64800`, hdr["ratelimit"], "the least remaining")
	assert.NotContains(t, hdr, "retry-after")
	for range 4 {
		h.ask(t, "messaging", marketing, number)
	}
	resp = h.ask(t, "messaging", marketing, number)
	require.Equal(t, codeOver, resp.GetOverallCode())
	hdr = headers(resp)
	assert.Equal(t, `"messaging.message_type_marketing.to_number";r=0;t=64800`, hdr["ratelimit"])
	assert.Equal(t, "64800", hdr["retry-after"])

	// Unknown domain, no limit: no headers.
	assert.Empty(t, h.ask(t, "nope", number).GetResponseHeadersToAdd())
}

// A limit named in the file names its RateLimit-Policy item.
func TestHeaderNames(t *testing.T) {
	h := newLocal(t, "example7.yaml")
	resp := h.ask(t, "example7", desc("key_1", "value_1", "user", "bkthomps"))
	assert.Equal(t, `"specific_limit";q=5;w=1`, headers(resp)["ratelimit-policy"])
	assert.Equal(t, "specific_limit", resp.GetStatuses()[0].GetCurrentLimit().GetName())
}

func TestGlobalShadowMode(t *testing.T) {
	clock := &fakeClock{t: start}
	l := newLimiter(t, clock)
	h := serve(t, l, clock, rls.Config{ShadowMode: true}, "example3.yaml")
	resp := h.ask(t, "edge_proxy_per_ip", desc("remote_address", "50.0.0.5"))
	assert.Equal(t, codeOK, resp.GetOverallCode())
	assert.Equal(t, codeOver, resp.GetStatuses()[0].GetCode(), "the statuses still tell")
}

func TestLimitOverride(t *testing.T) {
	h := newLocal(t, "example5.yaml")
	d := desc("azure", "b")
	d.Limit = &commonv3RateLimitOverride{RequestsPerUnit: 3, Unit: typeMinute}
	assert.Equal(t, 3, h.admitted(t, 4, "internal", d))
	// Unknown domain: no limit, the override notwithstanding.
	assert.Equal(t, 4, h.admitted(t, 4, "other", d))
}

func TestBadRequests(t *testing.T) {
	h := newLocal(t, "example1.yaml")
	for name, req := range map[string]*rlsv3.RateLimitRequest{
		"no domain":      {Descriptors: []*commonv3RateLimitDescriptor{desc("a", "b")}},
		"no descriptors": {Domain: "mongo_cps"},
		"no entries":     {Domain: "mongo_cps", Descriptors: []*commonv3RateLimitDescriptor{{}}},
	} {
		_, err := h.client.ShouldRateLimit(t.Context(), req)
		assert.Equal(t, codesInvalidArgument, statusCode(err), name)
	}
}
