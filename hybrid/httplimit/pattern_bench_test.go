package httplimit

import (
	"net/http"
	"net/http/httptest"
	"testing"
)

// BenchmarkMatch matches a request against five patterns: a clean path,
// which has one reading, and an escaped and an unclean one, which have
// more. The readings' buffer is reused, as the middleware's pool does.
func BenchmarkMatch(b *testing.B) {
	var ps []pattern
	for _, s := range []string{"GET /api/", "/api/{id}/x", "/files/{p...}", "example.com/", "POST /login"} {
		p, err := parsePattern(s)
		if err != nil {
			b.Fatal(err)
		}
		ps = append(ps, p)
	}
	for _, target := range []string{"/api/items", "/api/123/x", "/api/%2e%2e/x", "/api/x/../y"} {
		r := httptest.NewRequest(http.MethodGet, target, nil)
		b.Run(target, func(b *testing.B) {
			b.ReportAllocs()
			var buf []byte
			for b.Loop() {
				v := paths{buf: buf[:0]}
				for i := range ps {
					ps[i].match(r, &v)
				}
				buf = v.buf
			}
		})
	}
}
