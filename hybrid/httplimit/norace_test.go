//go:build !race

package httplimit_test

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/hybrid/httplimit"
	"github.com/hybridlimit/hybridlimit/internal/clocktest"
)

// raceEnabled reports a build with the race detector, whose allocations
// spoil the figures some tests hold.
const raceEnabled = false

// TestAllocs holds the admitted path's allocations: none when every value
// is shared (a rule's limit, numbers to 3600); one for the values formatted
// per request (their bytes and backing array together), as the 13-digit
// remaining of a 2^40 limit; none without headers; none more for a path
// with escapes or dot segments, whose readings are cleaned in the pool.
func TestAllocs(t *testing.T) {
	for _, tc := range []struct {
		name  string
		cfg   httplimit.Config
		limit int64
		path  string // default /api/items
		max   float64
	}{
		{"x-ratelimit", httplimit.Config{}, 1 << 40, "", 1},
		{"x-ratelimit, small limit", httplimit.Config{}, 3000, "", 0},
		{"reset as a time", httplimit.Config{ResetUnix: true}, 3000, "", 1},
		{"both families", httplimit.Config{RateLimitHeaders: true}, 1 << 40, "", 1},
		{"no headers", httplimit.Config{DisableXRateLimit: true}, 1 << 40, "", 0},
		{"trusted proxy", httplimit.Config{TrustedProxies: []string{"10.0.0.0/8"}}, 1 << 40, "", 1},
		{"escaped path", httplimit.Config{}, 3000, "/api/%2e%2e/x%2Fy", 0},
		{"unclean path", httplimit.Config{}, 3000, "/api//x/../y/.", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.cfg.Rules = []httplimit.Rule{perIP("ip", "GET /api/", tc.limit, time.Hour)}
			m, err := httplimit.New(newLimiter(t, clocktest.New(t0)), tc.cfg)
			require.NoError(t, err)
			h := m.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(200) }))
			if tc.path == "" {
				tc.path = "/api/items"
			}
			r := httptest.NewRequest(http.MethodGet, tc.path, nil)
			r.RemoteAddr = "10.0.0.1:5000"
			r.Header.Set("X-Forwarded-For", "198.51.100.7")
			w := &writer{h: http.Header{}}
			allocs := testing.AllocsPerRun(1000, func() {
				clear(w.h)
				h.ServeHTTP(w, r)
			})
			require.Equal(t, 200, w.code)
			assert.LessOrEqual(t, allocs, tc.max)
		})
	}
}
