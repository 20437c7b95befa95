package httplimit_test

import (
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/hybrid"
	"github.com/hybridlimit/hybridlimit/hybrid/httplimit"
	"github.com/hybridlimit/hybridlimit/internal/clocktest"
)

// TestSharedHeaderValues checks the header values responses share (a
// rule's limit and policy item, small numbers): a handler adding to them
// changes no other response, an override's are its own, and a limit
// changed behind the middleware's back is sent as it is.
func TestSharedHeaderValues(t *testing.T) {
	clk := clocktest.New(t0)
	l := newLimiter(t, clk)
	rule := httplimit.Rule{ID: "by-key", Key: httplimit.KeyAPIKey, Algorithm: hybrid.FixedWindow, Quota: 100, Window: time.Minute,
		Overrides: map[string]int64{"pro-key": 5000}}
	m, err := httplimit.New(l, httplimit.Config{Rules: []httplimit.Rule{rule}, RateLimitHeaders: true})
	require.NoError(t, err)
	fields := []string{"X-Ratelimit-Limit", "X-Ratelimit-Remaining", "X-Ratelimit-Reset", "Ratelimit-Policy", "Ratelimit"}
	h := m.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		for _, f := range fields {
			w.Header().Add(f, "extra")
		}
	}))
	send := func(key string) http.Header {
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		r.Header.Set("X-API-Key", key)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		require.Equal(t, http.StatusOK, w.Code)
		return w.Header()
	}
	for i := range 3 {
		hdr := send("k")
		assert.Equal(t, []string{"100", "extra"}, hdr.Values("X-Ratelimit-Limit"), "request %d", i)
		assert.Equal(t, []string{strconv.Itoa(99 - i), "extra"}, hdr.Values("X-Ratelimit-Remaining"), "request %d", i)
		assert.Equal(t, []string{"60", "extra"}, hdr.Values("X-Ratelimit-Reset"), "request %d", i)
		assert.Equal(t, []string{`"by-key";q=100;w=60`, "extra"}, hdr.Values("Ratelimit-Policy"), "request %d", i)
		assert.Equal(t, []string{`"by-key";r=` + strconv.Itoa(99-i) + ";t=60", "extra"}, hdr.Values("Ratelimit"), "request %d", i)
	}

	hdr := send("pro-key")
	assert.Equal(t, "5000", hdr.Get("X-Ratelimit-Limit"), "the override's limit")
	assert.Equal(t, "4999", hdr.Get("X-Ratelimit-Remaining"))
	assert.Equal(t, `"by-key";q=5000;w=60`, hdr.Get("Ratelimit-Policy"))

	// The Limiter's rule is the middleware's (same name and limit): a new
	// limit set on it directly is what decisions, and so headers, carry.
	hr, err := l.Register(hybrid.Rule{Name: "by-key", Limit: hybrid.Limit{Algorithm: hybrid.FixedWindow, Quota: 100, Window: time.Minute}})
	require.NoError(t, err)
	require.NoError(t, l.SetLimit(hr, hybrid.Limit{Algorithm: hybrid.FixedWindow, Quota: 1 << 20, Window: time.Minute}))
	hdr = send("k")
	assert.Equal(t, []string{strconv.Itoa(1 << 20), "extra"}, hdr.Values("X-Ratelimit-Limit"))
	assert.Equal(t, []string{strconv.Itoa(1<<20 - 4), "extra"}, hdr.Values("X-Ratelimit-Remaining"))
	assert.Equal(t, []string{`"by-key";q=` + strconv.Itoa(1<<20) + ";w=60", "extra"}, hdr.Values("Ratelimit-Policy"))
}
