package httplimit_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/hybridlimit/hybridlimit/hybrid"
	"github.com/hybridlimit/hybridlimit/hybrid/httplimit"
)

// stoppedClock always tells the same time, so the example's output is
// fixed. Real programs leave hybrid.Config.Clock nil.
type stoppedClock struct{ t time.Time }

func (c stoppedClock) Now() time.Time { return c.t }

// A per-IP limit of 2 requests per minute on the API, and the headers of
// the draft beside the X-RateLimit-* ones. Time is a stopped clock's.
func Example() {
	l, err := hybrid.New(hybrid.Config{Clock: stoppedClock{time.Date(2026, time.January, 1, 0, 0, 0, 0, time.UTC)}})
	if err != nil {
		panic(err)
	}
	defer l.Close()
	m, err := httplimit.New(l, httplimit.Config{
		Rules: []httplimit.Rule{{
			ID: "api-per-ip", Key: httplimit.KeyIP, Endpoint: "/api/",
			Algorithm: hybrid.FixedWindow, Quota: 2, Window: time.Minute,
		}},
		RateLimitHeaders: true,
	})
	if err != nil {
		panic(err)
	}
	h := m.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "ok") }))
	for range 3 {
		r := httptest.NewRequest(http.MethodGet, "/api/items", nil)
		r.RemoteAddr = "192.0.2.1:5000"
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		fmt.Printf("%d %s retry=%q\n", w.Code, w.Header().Get("RateLimit"), w.Header().Get("Retry-After"))
	}
	// Output:
	// 200 "api-per-ip";r=1;t=60 retry=""
	// 200 "api-per-ip";r=0;t=60 retry=""
	// 429 "api-per-ip";r=0;t=60 retry="60"
}
