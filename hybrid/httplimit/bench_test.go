package httplimit_test

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/hybridlimit/hybridlimit/hybrid/httplimit"
)

// BenchmarkMiddleware measures a request through the middleware with one
// Local rule keyed by IP, against the bare handler in the same run.
func BenchmarkMiddleware(b *testing.B) {
	bare := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(200) })
	l := newLimiterB(b)
	m, err := httplimit.New(l, httplimit.Config{Rules: []httplimit.Rule{perIP("ip", "GET /api/", 1<<40, time.Hour)}})
	if err != nil {
		b.Fatal(err)
	}
	for _, bc := range []struct {
		name string
		h    http.Handler
	}{{"bare", bare}, {"httplimit", m.Handler(bare)}} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				r := httptest.NewRequest(http.MethodGet, "/api/items", nil)
				r.RemoteAddr = "192.0.2.1:5000"
				w := &writer{h: http.Header{}}
				for pb.Next() {
					clear(w.h)
					bc.h.ServeHTTP(w, r)
				}
			})
		})
	}
}
