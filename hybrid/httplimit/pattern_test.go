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

// TestPatterns: a rule matches a request exactly when a ServeMux holding
// its pattern alone routes the request to it (clean paths; a ServeMux
// redirects the others).
func TestPatterns(t *testing.T) {
	patterns := []string{"/", "/{$}", "/api", "/api/", "/api/{$}", "GET /api/", "POST /api/items", "/api/{id}", "/api/{id}/",
		"/api/{id}/x", "/files/{path...}", "example.com/", "GET example.com/api/", "/a/b/c"}
	type req struct{ method, host, path string }
	var reqs []req
	for _, m := range []string{"GET", "HEAD", "POST"} {
		for _, h := range []string{"example.com", "example.com:8080", "other.org"} {
			for _, p := range []string{"/", "/api", "/api/", "/api/1", "/api/1/", "/api/1/x", "/api/1/y", "/api/items", "/files", "/files/",
				"/files/a/b", "/a/b/c", "/a/b", "/a/b/c/d", "/x"} {
				reqs = append(reqs, req{m, h, p})
			}
		}
	}
	l := newLimiter(t, clocktest.New(t0))
	for _, p := range patterns {
		mux := http.NewServeMux()
		mark := &marker{}
		mux.Handle(p, mark)
		matched := false
		m, err := httplimit.New(l, httplimit.Config{Rules: []httplimit.Rule{{ID: "p", Key: httplimit.KeyIP, Endpoint: p, Algorithm: hybrid.FixedWindow, Quota: 1 << 40, Window: time.Hour}}})
		require.NoError(t, err)
		h := m.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			matched = w.Header().Get("X-RateLimit-Limit") != ""
		}))
		for _, q := range reqs {
			r := httptest.NewRequest(q.method, "http://"+q.host+q.path, nil)
			routed, _ := mux.Handler(r)
			matched = false
			h.ServeHTTP(httptest.NewRecorder(), r)
			assert.Equal(t, routed == http.Handler(mark), matched, "pattern %q, %s %s%s", p, q.method, q.host, q.path)
		}
	}
}

// marker is a handler told apart from the ServeMux's own (redirects, 405).
type marker struct{ _ byte }

func (*marker) ServeHTTP(http.ResponseWriter, *http.Request) {}

// TestUncleanPaths: a path written another way matches what it means.
func TestUncleanPaths(t *testing.T) {
	l := newLimiter(t, clocktest.New(t0))
	m, err := httplimit.New(l, httplimit.Config{Rules: []httplimit.Rule{perIP("p", "/api/", 1, time.Hour)}})
	require.NoError(t, err)
	h := m.Handler(okHandler)
	codes := []int{}
	for _, p := range []string{"/api/x", "/api//x", "/x/../api/x", "/./api/y"} {
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		r.URL.Path = p
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		codes = append(codes, w.Code)
	}
	assert.Equal(t, []int{200, 429, 429, 429}, codes)
}
