package httplimit_test

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/hybrid"
	"github.com/hybridlimit/hybridlimit/hybrid/httplimit"
	"github.com/hybridlimit/hybridlimit/internal/clocktest"
)

// TestWindowVariants checks that a rule's SubWindows and Anchored reach its
// limit: each case's last request is decided one way with the field and
// the other way without it.
func TestWindowVariants(t *testing.T) {
	tests := []struct {
		name  string
		rule  httplimit.Rule
		steps []time.Duration // clock advances before each request, from an aligned window start
		want  []int           // each request's status
	}{{
		// Unanchored, 10s holds the next window (10-20s); anchored at 3s,
		// the window runs to 13s.
		name:  "fixed unanchored",
		rule:  httplimit.Rule{Algorithm: hybrid.FixedWindow, Quota: 1, Window: 10 * time.Second},
		steps: []time.Duration{3 * time.Second, 8 * time.Second},
		want:  []int{200, 200},
	}, {
		name:  "fixed anchored",
		rule:  httplimit.Rule{Algorithm: hybrid.FixedWindow, Quota: 1, Window: 10 * time.Second, Anchored: true},
		steps: []time.Duration{3 * time.Second, 8 * time.Second},
		want:  []int{200, 429},
	}, {
		// At 10.5s, two 5s sub-windows (5-15s) no longer hold 1.5s; ten 1s
		// sub-windows (1-11s) do.
		name:  "two sub-windows",
		rule:  httplimit.Rule{Algorithm: hybrid.SubWindowCounter, Quota: 1, Window: 10 * time.Second, SubWindows: 2},
		steps: []time.Duration{1500 * time.Millisecond, 9 * time.Second},
		want:  []int{200, 200},
	}, {
		name:  "ten sub-windows",
		rule:  httplimit.Rule{Algorithm: hybrid.SubWindowCounter, Quota: 1, Window: 10 * time.Second, SubWindows: 10},
		steps: []time.Duration{1500 * time.Millisecond, 9 * time.Second},
		want:  []int{200, 429},
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			clk := clocktest.New(t0)
			tc.rule.ID, tc.rule.Key = "r", httplimit.KeyIP
			m, err := httplimit.New(newLimiter(t, clk), httplimit.Config{Rules: []httplimit.Rule{tc.rule}})
			require.NoError(t, err)
			h := m.Handler(okHandler)
			for i, d := range tc.steps {
				clk.Add(d)
				w := httptest.NewRecorder()
				h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/", nil))
				assert.Equal(t, tc.want[i], w.Code, "request %d", i)
			}
		})
	}
}
