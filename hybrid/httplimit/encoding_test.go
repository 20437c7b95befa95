package httplimit_test

import (
	"io"
	"net/http"
	"net/url"
	"path"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/hybrid/httplimit"
	"github.com/hybridlimit/hybridlimit/internal/clocktest"
)

// encodedTargets are request targets that reach /api/ written in other
// ways, or look as if they did: percent-encoded dots and slashes in either
// case, empty and dot segments, absolute-form, query strings.
var encodedTargets = []string{
	"/api/x",
	"/api/%2e%2e/x",
	"/api/%2E%2E/x",
	"/api/.%2e/x",
	"/api/%2e./x",
	"/api/%2E%2e/x",
	"/api/x/%2e%2e",
	"/api/x/%2e%2e/",
	"/api/%2e%2e%2fx",
	"/api/%2E%2E%2Fx",
	"/api/%2e%2e%2F%2e%2e%2fx",
	"/api/%2e/x",
	"/api/x/..",
	"/api/x/../",
	"/api/../x",
	"/api/./x",
	"/api//x",
	"//api/x",
	"/x/../api/x",
	"/%61pi/x",
	"/%61pi/%2e%2e/x",
	"/api%2fx",
	"/api%2F%2e%2e/x",
	"/api/%2e%2e/x?q=1",
	"/api/%2e%2e/x?a=%2e%2e&b=/api/",
	"/api/x?../..",
	"http://evil/api/%2e%2e/x",
	"http://evil/api/x/..",
	"http://evil//api/x",
	"http://evil/api/%2E%2E%2Fx?q=%2e",
}

// apiCounter counts the requests the /api/ handler serves, and those of
// them the "api" rule decided (it named them in RateLimit-Policy).
type apiCounter struct{ served, decided atomic.Int64 }

func (c *apiCounter) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	c.served.Add(1)
	if strings.Contains(w.Header().Get("Ratelimit-Policy"), `"api"`) {
		c.decided.Add(1)
	}
	io.WriteString(w, "api")
}

// routers are the routers the table puts behind the middleware, each with
// an /api/ subtree served by api and the rest by other: a ServeMux, a
// prefix router on the raw path that does not clean it (as chi's Mount
// routes: RawPath when set, else Path), and one that cleans the decoded
// path and serves the result without redirecting.
var routers = []struct {
	name string
	make func(api http.Handler) http.Handler
}{
	{"ServeMux", func(api http.Handler) http.Handler {
		mux := http.NewServeMux()
		mux.Handle("/api/", api)
		mux.Handle("/", okHandler)
		return mux
	}},
	{"raw prefix", func(api http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			p := r.URL.RawPath
			if p == "" {
				p = r.URL.Path
			}
			if strings.HasPrefix(p, "/api/") {
				api.ServeHTTP(w, r)
				return
			}
			okHandler.ServeHTTP(w, r)
		})
	}},
	{"decoded prefix", func(api http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if strings.HasPrefix(r.URL.Path, "/api/") {
				api.ServeHTTP(w, r)
				return
			}
			okHandler.ServeHTTP(w, r)
		})
	}},
	{"cleaning", func(api http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			p := path.Clean("/" + r.URL.Path)
			if strings.HasSuffix(r.URL.Path, "/") && p != "/" {
				p += "/"
			}
			if strings.HasPrefix(p, "/api/") {
				api.ServeHTTP(w, r)
				return
			}
			okHandler.ServeHTTP(w, r)
		})
	}},
}

// TestPathEncodings sends each target five times through a real server
// and client to a router behind the middleware, with the rule "api" on
// /api/ at 2 per minute per IP: whatever the encoding, every request the
// /api/ handler serves is one the rule decided, so it serves at most 2.
func TestPathEncodings(t *testing.T) {
	const limit, tries = 2, 5
	for _, rt := range routers {
		t.Run(rt.name, func(t *testing.T) {
			for _, target := range encodedTargets {
				t.Run(target, func(t *testing.T) {
					m, err := httplimit.New(newLimiter(t, clocktest.New(t0)), httplimit.Config{
						Rules: []httplimit.Rule{
							perIP("api", "/api/", limit, time.Minute),
							perIP("all", "/", 1<<40, time.Minute),
						},
						RateLimitHeaders: true,
					})
					require.NoError(t, err)
					api := &apiCounter{}
					ts := serve(t, m, rt.make(api))
					for range tries {
						send(t, ts.URL, target)
					}
					assert.Equal(t, api.served.Load(), api.decided.Load(), "every request /api/ served was decided by its rule")
					assert.LessOrEqual(t, api.served.Load(), int64(limit), "the rule holds")
				})
			}
		})
	}
}

// send sends a GET for target to the server at base through a real
// client: an origin-form target as it is written; an absolute-form one
// ("http://host/...") through the server as a proxy, which sends it in
// absolute form. The client sends RawPath unchanged, so %2e stays %2e,
// and does not follow ServeMux's redirects to cleaned paths.
func send(t *testing.T, base, target string) {
	t.Helper()
	client := &http.Client{
		Transport:     &http.Transport{},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	u := base + target
	if strings.HasPrefix(target, "http://") {
		proxy, err := url.Parse(base)
		require.NoError(t, err)
		client.Transport = &http.Transport{Proxy: http.ProxyURL(proxy)}
		u = target
	}
	defer client.CloseIdleConnections()
	req, err := http.NewRequest(http.MethodGet, u, nil)
	require.NoError(t, err)
	resp, err := client.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	_, err = io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Contains(t, []int{http.StatusOK, http.StatusTooManyRequests, http.StatusTemporaryRedirect}, resp.StatusCode, target)
}
