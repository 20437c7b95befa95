package httplimit

import (
	"net/http"
	"net/netip"
)

// xffHeader is X-Forwarded-For in canonical form.
const xffHeader = "X-Forwarded-For"

// ClientIP returns the client's address as the middleware sees it (before
// IPv6 grouping): the socket's peer, or what trusted proxies forwarded. It
// is invalid when the peer is not an IP (a Unix socket).
func (m *Middleware) ClientIP(r *http.Request) netip.Addr {
	a, _ := m.ip.Resolve(r.RemoteAddr, r.Header)
	return a
}
