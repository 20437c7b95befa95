package httplimit_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/hybridlimit/hybridlimit/hybrid"
	"github.com/hybridlimit/hybridlimit/hybrid/httplimit"
	"github.com/hybridlimit/hybridlimit/internal/clocktest"
)

// t0 is where the tests' clocks start: a whole minute, so that windows of
// 1, 10 and 60 s start there.
var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// newLimiter returns a Local Limiter on clk, closed when t ends.
func newLimiter(t testing.TB, clk *clocktest.Clock) *hybrid.Limiter {
	t.Helper()
	l, err := hybrid.New(hybrid.Config{Clock: clk})
	require.NoError(t, err)
	t.Cleanup(func() { l.Close() })
	return l
}

// okHandler answers 200 "ok".
var okHandler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })

// serve starts a real server of h behind m, stopped when t ends.
func serve(t *testing.T, m *httplimit.Middleware, h http.Handler) *httptest.Server {
	t.Helper()
	ts := httptest.NewServer(m.Handler(h))
	t.Cleanup(ts.Close)
	return ts
}

// get sends a GET for path to ts with the headers given as "Name: value"
// and returns the response, its body read.
func get(t *testing.T, ts *httptest.Server, path string, headers ...string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, ts.URL+path, nil)
	require.NoError(t, err)
	for _, h := range headers {
		name, value, ok := strings.Cut(h, ":")
		require.True(t, ok, h)
		req.Header.Add(name, strings.TrimSpace(value))
	}
	resp, err := ts.Client().Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp, string(body)
}

// intHeader returns header name of resp as an integer, failing t if it is
// missing or not one.
func intHeader(t *testing.T, resp *http.Response, name string) int64 {
	t.Helper()
	v := resp.Header.Values(name)
	require.Len(t, v, 1, name)
	n, err := strconv.ParseInt(v[0], 10, 64)
	require.NoError(t, err, name)
	return n
}

// problem is a problem+json body.
type problem struct {
	Type        string   `json:"type"`
	Title       string   `json:"title"`
	Status      int      `json:"status"`
	Violated    []string `json:"violated-policies"`
	Unavailable []string `json:"unavailable-policies"`
}

func parseProblem(t *testing.T, resp *http.Response, body string) problem {
	t.Helper()
	require.Equal(t, "application/problem+json", resp.Header.Get("Content-Type"))
	var p problem
	dec := json.NewDecoder(strings.NewReader(body))
	dec.DisallowUnknownFields()
	require.NoError(t, dec.Decode(&p), body)
	return p
}

// sfItem is a Structured Field list member: a string with integer
// parameters, the shape of RateLimit-Policy's and RateLimit's members.
type sfItem struct {
	Name   string
	Params map[string]int64
}

// parseSFList parses a Structured Field List (RFC 9651) whose members are
// strings with integer parameters, strictly: anything else is an error.
func parseSFList(s string) ([]sfItem, error) {
	p := sfParser{s: s}
	p.skip(' ')
	var out []sfItem
	if p.eof() {
		return nil, fmt.Errorf("empty list")
	}
	for {
		it, err := p.item()
		if err != nil {
			return nil, err
		}
		out = append(out, it)
		p.skip(' ', '\t')
		if p.eof() {
			return out, nil
		}
		if p.next() != ',' {
			return nil, fmt.Errorf("at %d: want ','", p.i-1)
		}
		p.skip(' ', '\t')
		if p.eof() {
			return nil, fmt.Errorf("trailing comma")
		}
	}
}

type sfParser struct {
	s string
	i int
}

func (p *sfParser) eof() bool { return p.i >= len(p.s) }
func (p *sfParser) next() byte {
	c := p.s[p.i]
	p.i++
	return c
}
func (p *sfParser) skip(cs ...byte) {
	for !p.eof() && strings.IndexByte(string(cs), p.s[p.i]) >= 0 {
		p.i++
	}
}

func (p *sfParser) item() (sfItem, error) {
	it := sfItem{Params: map[string]int64{}}
	if p.eof() || p.next() != '"' {
		return it, fmt.Errorf("at %d: want a string", p.i-1)
	}
	var b strings.Builder
	for {
		if p.eof() {
			return it, fmt.Errorf("unterminated string")
		}
		c := p.next()
		switch {
		case c == '\\':
			if p.eof() {
				return it, fmt.Errorf("bad escape")
			}
			c = p.next()
			if c != '"' && c != '\\' {
				return it, fmt.Errorf("bad escape %q", c)
			}
			b.WriteByte(c)
			continue
		case c == '"':
			it.Name = b.String()
		case c < 0x20 || c > 0x7e:
			return it, fmt.Errorf("byte %#x in a string", c)
		default:
			b.WriteByte(c)
			continue
		}
		break
	}
	for !p.eof() && p.s[p.i] == ';' {
		p.i++
		p.skip(' ')
		start := p.i
		for !p.eof() {
			c := p.s[p.i]
			if c >= 'a' && c <= 'z' || c == '*' || p.i > start && (c >= '0' && c <= '9' || c == '_' || c == '-' || c == '.') {
				p.i++
				continue
			}
			break
		}
		key := p.s[start:p.i]
		if key == "" {
			return it, fmt.Errorf("at %d: want a key", p.i)
		}
		if _, dup := it.Params[key]; dup {
			return it, fmt.Errorf("parameter %q twice", key)
		}
		if p.eof() || p.next() != '=' {
			return it, fmt.Errorf("parameter %q: want an integer value", key)
		}
		start = p.i
		if !p.eof() && p.s[p.i] == '-' {
			p.i++
		}
		for !p.eof() && p.s[p.i] >= '0' && p.s[p.i] <= '9' {
			p.i++
		}
		digits := strings.TrimPrefix(p.s[start:p.i], "-")
		if digits == "" || len(digits) > 15 {
			return it, fmt.Errorf("parameter %q: bad integer %q", key, p.s[start:p.i])
		}
		n, _ := strconv.ParseInt(p.s[start:p.i], 10, 64)
		it.Params[key] = n
	}
	return it, nil
}

func TestSFParser(t *testing.T) {
	good, err := parseSFList(`"a";q=10;w=60, "b-1";r=0;t=5`)
	require.NoError(t, err)
	require.Equal(t, []sfItem{{"a", map[string]int64{"q": 10, "w": 60}}, {"b-1", map[string]int64{"r": 0, "t": 5}}}, good)
	for _, bad := range []string{``, `a;q=1`, `"a";q`, `"a";q=x`, `"a",`, `"a" "b"`, `"a";q=1;q=2`, `"a`, `"a";Q=1`, `"a";q=1234567890123456`} {
		_, err := parseSFList(bad)
		require.Error(t, err, bad)
	}
}

// meterReader returns a MeterProvider and a reader of its sums.
func meterReader() (*metric.MeterProvider, func(t *testing.T, name string) int64) {
	r := metric.NewManualReader()
	mp := metric.NewMeterProvider(metric.WithReader(r))
	return mp, func(t *testing.T, name string) int64 {
		t.Helper()
		var rm metricdata.ResourceMetrics
		require.NoError(t, r.Collect(t.Context(), &rm))
		var n int64
		for _, sm := range rm.ScopeMetrics {
			for _, m := range sm.Metrics {
				if m.Name != name {
					continue
				}
				for _, dp := range m.Data.(metricdata.Sum[int64]).DataPoints {
					n += dp.Value
				}
			}
		}
		return n
	}
}

// writer is a ResponseWriter reused across requests, its header map
// cleared (keeping its room), as the overhead of the middleware alone is
// measured.
type writer struct {
	h    http.Header
	code int
}

func (w *writer) Header() http.Header         { return w.h }
func (w *writer) Write(b []byte) (int, error) { return len(b), nil }
func (w *writer) WriteHeader(code int)        { w.code = code }

// newLimiterB returns a Local Limiter on the system clock, closed when b
// ends.
func newLimiterB(b *testing.B) *hybrid.Limiter {
	l, err := hybrid.New(hybrid.Config{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { l.Close() })
	return l
}
