package httplimit_test

import (
	"bufio"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/hybrid/httplimit"
	"github.com/hybridlimit/hybridlimit/internal/clocktest"
)

// patternSets are the ServeMuxes the routing fuzz test builds, each a set
// of patterns that do not conflict: literals, wildcards {x}, {x...} and
// {$}, escaped literals, hosts and methods.
var patternSets = [][]string{
	{"/", "/api/", "/api/{id}", "/api/{id}/x", "/api/items/{$}", "/files/{path...}", "/exact/{$}", "/a%2fb/", "/%2e%2e/", "/dots/../y", "/sp%20ace/{x}"},
	{"/{$}", "GET /get/", "POST /post/{x}", "example.com/", "example.com/host/{$}", "GET example.com/both/{x}", "CONNECT /c/", "HEAD /head/"},
	{"/{x}/", "/{x}/{y}", "/{x}/{y}/{$}", "/lit/{x}/tail", "/{a}/{b}/{c...}"},
	{"/{rest...}", "/lit/{$}", "[::1]/v6/", "EXAMPLE.com/upper/"},
}

// routingCase is one ServeMux of patternSets behind a middleware with one
// rule per pattern; rule "p<i>" has pattern i, and markers[i] is its
// handler.
type routingCase struct {
	mux      *http.ServeMux
	patterns []string
	markers  []*marker
	mw       http.Handler // the middleware in front of a handler that records the rules that decided
}

func newRoutingCases(tb testing.TB, l func() *httplimit.Middleware) []*routingCase {
	var cases []*routingCase
	for _, set := range patternSets {
		rc := &routingCase{mux: http.NewServeMux(), patterns: set}
		var rules []httplimit.Rule
		for i, p := range set {
			mk := &marker{}
			rc.mux.Handle(p, mk)
			rc.markers = append(rc.markers, mk)
			rules = append(rules, perIP("p"+strconv.Itoa(i), p, 1<<40, time.Hour))
		}
		m := l()
		require.NoError(tb, m.SetRules(rules), "SetRules")
		rc.mw = m.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
		cases = append(cases, rc)
	}
	return cases
}

// FuzzServeMuxRouting parses a request as net/http's server does and checks
// that whenever a ServeMux routes it to a pattern's handler, the rule on
// that pattern decided it. Besides the ServeMux, it routes the request as
// routers that do not clean paths, or clean the decoded one, would: a
// ServeMux given the request with the path uncleaned (as it routes
// CONNECT), the decoded path in place of the escaped one, or the path
// cleaned in advance; for these, the patterns without a method. Its seed
// corpus, in testdata/fuzz, holds the encodings of TestPathEncodings and
// cases of every kind of pattern.
func FuzzServeMuxRouting(f *testing.F) {
	clk := clocktest.New(t0)
	cases := newRoutingCases(f, func() *httplimit.Middleware {
		m, err := httplimit.New(newLimiter(f, clk), httplimit.Config{RateLimitHeaders: true})
		require.NoError(f, err)
		return m
	})
	f.Fuzz(func(t *testing.T, method, target, host string) {
		r, err := http.ReadRequest(bufio.NewReader(strings.NewReader(method + " " + target + " HTTP/1.1\r\nHost: " + host + "\r\n\r\n")))
		if err != nil {
			return // the server refuses it before any handler
		}
		r.RemoteAddr = "192.0.2.1:1234"
		for _, rc := range cases {
			checkRouting(t, rc, r)
		}
	})
}

// checkRouting fails t when a router model routes r to a pattern whose rule
// did not decide r.
func checkRouting(t *testing.T, rc *routingCase, r *http.Request) {
	w := httptest.NewRecorder()
	rc.mw.ServeHTTP(w, r)
	decided := map[string]bool{}
	for _, it := range strings.Split(w.Header().Get("Ratelimit-Policy"), ", ") {
		if name, _, ok := strings.Cut(it, ";"); ok {
			decided[strings.Trim(name, `"`)] = true
		}
	}
	check := func(model string, r2 *http.Request, methodless bool) {
		h, _ := rc.mux.Handler(r2)
		for i, mk := range rc.markers {
			if h != http.Handler(mk) || methodless && hasMethod(rc.patterns[i]) {
				continue
			}
			require.True(t, decided["p"+strconv.Itoa(i)], "%s routes %s %q (path %q, raw %q) host %q to %q; rules that decided: %v",
				model, r.Method, r.RequestURI, r.URL.Path, r.URL.RawPath, r.Host, rc.patterns[i], decided)
		}
	}
	check("ServeMux", r, false)

	// Routers that do not clean: ServeMux routes CONNECT on the escaped
	// path uncleaned, segments unescaped; with RawPath cleared, on the
	// decoded path's segments.
	raw := r.Clone(r.Context())
	raw.Method = http.MethodConnect
	raw.Host = hostOnly(r.Host)
	raw.URL.Host = ""
	check("uncleaned escaped path", raw, true)
	dec := raw.Clone(r.Context())
	dec.URL.RawPath = ""
	check("uncleaned decoded path", dec, true)

	// Routers that clean the path and serve what it cleans to.
	if !strings.HasPrefix(r.URL.Path, "/") {
		return
	}
	clean := r.Clone(r.Context())
	clean.Method = http.MethodGet
	clean.URL.Path, clean.URL.RawPath = cleanPath(r.URL.Path), ""
	check("cleaned decoded path", clean, true)
	if r.URL.RawPath != "" {
		esc := clean.Clone(r.Context())
		esc.URL.RawPath = cleanPath(r.URL.EscapedPath())
		p, err := url.PathUnescape(esc.URL.RawPath)
		if err != nil {
			return
		}
		esc.URL.Path = p
		check("cleaned escaped path", esc, true)
	}
}

// hasMethod reports whether ServeMux pattern p names a method.
func hasMethod(p string) bool { return strings.ContainsAny(p, " \t") }

// hostOnly is ServeMux's host without its port.
func hostOnly(h string) string {
	if host, _, err := net.SplitHostPort(h); err == nil {
		return host
	}
	return h
}

// cleanPath is ServeMux's: path.Clean, keeping a trailing slash.
func cleanPath(p string) string {
	c := path.Clean("/" + p)
	if strings.HasSuffix(p, "/") && c != "/" {
		c += "/"
	}
	return c
}
