// Package httpbench measures the overhead of rate-limiting HTTP middleware
// on a request: a bare handler, hybrid/httplimit with one Local rule keyed
// by client IP, go-chi/httprate and didip/tollbooth, in the same run, each
// sending its rate-limit headers and admitting every request (a limit far
// above the traffic). Requests go straight to the handler's ServeHTTP with a
// reused ResponseWriter: what is measured is the middleware, not net/http.
//
//	Middleware/<mw>/<clients>/<serial|parallel>
//
// clients is 1 (one hot key) or 1000 (client IPs in turn). The row
// "decision" is the Limiter's AllowN alone, with httplimit's rule and the
// same keys, without HTTP: what of httplimit's overhead is the decision.
// docs/http.md has the table.
package httpbench

import (
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/didip/tollbooth/v7"
	"github.com/go-chi/httprate"

	"github.com/hybridlimit/hybridlimit/hybrid"
	"github.com/hybridlimit/hybridlimit/hybrid/httplimit"
	"github.com/hybridlimit/hybridlimit/internal/clocktest"
)

// huge is a limit no benchmark reaches.
const huge = 1 << 40

// writer is a ResponseWriter reused across requests, its header map
// cleared (keeping its room) before each.
type writer struct {
	h    http.Header
	code int
}

func (w *writer) Header() http.Header         { return w.h }
func (w *writer) Write(b []byte) (int, error) { return len(b), nil }
func (w *writer) WriteHeader(code int)        { w.code = code }

var bare = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusOK) })

// middlewares returns the handlers compared, each behind its middleware.
func middlewares(b *testing.B) []struct {
	name string
	h    http.Handler
} {
	l, err := hybrid.New(hybrid.Config{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { l.Close() })
	hl, err := httplimit.New(l, httplimit.Config{Rules: []httplimit.Rule{{
		ID: "per-ip", Key: httplimit.KeyIP, Endpoint: "/", Algorithm: hybrid.FixedWindow, Quota: huge, Window: time.Hour,
	}}})
	if err != nil {
		b.Fatal(err)
	}
	// httprate keyed by the peer's address, as its docs advise when no
	// proxy is trusted.
	// The same rule at a limit as people write them, 3,000 per second, on a
	// clock moved half a millisecond before each request, so that no window
	// fills (2,000 requests a window, in any order across goroutines) and
	// each of 1,000 clients comes back within its window:
	// the headers carry small numbers, as they do in production, where the
	// 2^40 limit above makes every remaining count a 13-digit one.
	clk := clocktest.New(time.UnixMicro(1_900_000_000_000_000))
	ls, err := hybrid.New(hybrid.Config{Clock: clk})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { ls.Close() })
	hs, err := httplimit.New(ls, httplimit.Config{Rules: []httplimit.Rule{{
		ID: "per-ip", Key: httplimit.KeyIP, Endpoint: "/", Algorithm: hybrid.FixedWindow, Quota: 3000, Window: time.Second,
	}}})
	if err != nil {
		b.Fatal(err)
	}
	hsh := hs.Handler(bare)
	stepped := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		clk.Add(500 * time.Microsecond)
		hsh.ServeHTTP(w, r)
	})
	hr := httprate.LimitBy(huge, time.Hour, func(r *http.Request) (string, error) {
		host, _, _ := strings.Cut(r.RemoteAddr, ":")
		return host, nil
	})
	tb := tollbooth.NewLimiter(1e9, nil).SetIPLookups([]string{"RemoteAddr"})
	hrule, err := l.Register(hybrid.Rule{Name: "decision", Limit: hybrid.Limit{Algorithm: hybrid.FixedWindow, Quota: huge, Window: time.Hour}})
	if err != nil {
		b.Fatal(err)
	}
	decision := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host, _, _ := strings.Cut(r.RemoteAddr, ":")
		if d, _ := l.AllowN(r.Context(), hrule, host, 1); d.Allowed() {
			w.WriteHeader(http.StatusOK)
		}
	})
	return []struct {
		name string
		h    http.Handler
	}{
		{"bare", bare},
		{"decision", decision},
		{"httplimit", hl.Handler(bare)},
		{"httplimit-3000/s", stepped},
		{"httprate", hr(bare)},
		{"tollbooth", tollbooth.LimitHandler(tb, bare)},
	}
}

// requests returns n requests from n client addresses.
func requests(n int) []*http.Request {
	rs := make([]*http.Request, n)
	for i := range rs {
		rs[i] = httptest.NewRequest(http.MethodGet, "/api/items", nil)
		rs[i].RemoteAddr = "10." + strconv.Itoa(i>>16&255) + "." + strconv.Itoa(i>>8&255) + "." + strconv.Itoa(i&255) + ":5000"
	}
	return rs
}

func BenchmarkMiddleware(b *testing.B) {
	for _, mw := range middlewares(b) {
		for _, clients := range []int{1, 1000} {
			rs := requests(clients)
			run := func(w *writer, i int) {
				clear(w.h)
				mw.h.ServeHTTP(w, rs[i%len(rs)])
				if w.code != http.StatusOK {
					b.Fatalf("%s: status %d", mw.name, w.code)
				}
			}
			b.Run(mw.name+"/"+strconv.Itoa(clients)+"/serial", func(b *testing.B) {
				b.ReportAllocs()
				w := &writer{h: http.Header{}}
				i := 0
				for b.Loop() {
					run(w, i)
					i++
				}
			})
			b.Run(mw.name+"/"+strconv.Itoa(clients)+"/parallel", func(b *testing.B) {
				b.ReportAllocs()
				b.RunParallel(func(pb *testing.PB) {
					w := &writer{h: http.Header{}}
					i := 0
					for pb.Next() {
						run(w, i)
						i++
					}
				})
			})
		}
	}
}
