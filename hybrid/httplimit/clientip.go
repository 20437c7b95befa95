package httplimit

import (
	"net/http"
	"net/netip"
	"strings"
)

// xffHeader is X-Forwarded-For in canonical form.
const xffHeader = "X-Forwarded-For"

// trustedAddr reports whether a is one of the trusted proxies.
func (c *clientIP) trustedAddr(a netip.Addr) bool {
	for _, p := range c.trusted {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// resolve returns the client's address and the text it was read from (a
// substring of the request, so that keying by it allocates nothing), or
// an invalid address and the raw RemoteAddr when the peer is not an IP
// (a Unix socket).
func (c *clientIP) resolve(r *http.Request) (netip.Addr, string) {
	peer, text, ok := parseHost(r.RemoteAddr)
	if !ok {
		return netip.Addr{}, r.RemoteAddr
	}
	if c.hops == 0 && (len(c.trusted) == 0 || !c.trustedAddr(peer)) {
		return peer, text
	}
	// The peer is a trusted proxy: believe what it says.
	if c.header != "" {
		if v := r.Header[c.header]; len(v) == 1 {
			if a, t, ok := parseHost(strings.TrimSpace(v[0])); ok {
				return a, t
			}
		}
	}
	xff := r.Header[xffHeader]
	n := 0 // entries seen, right to left
	last, lastText := peer, text
	for i := len(xff) - 1; i >= 0; i-- {
		v := xff[i]
		for v != "" {
			var e string
			if j := strings.LastIndexByte(v, ','); j >= 0 {
				e, v = v[j+1:], v[:j]
			} else {
				e, v = v, ""
			}
			e = strings.TrimSpace(e)
			if e == "" {
				continue
			}
			n++
			a, t, ok := parseHost(e)
			if c.hops > 0 {
				if n < c.hops {
					continue
				}
				if ok {
					return a, t
				}
				return peer, text
			}
			if !ok {
				// Not an address: written by the client, not by a trusted
				// proxy; the nearest hop a trusted proxy saw is all we know.
				return last, lastText
			}
			if !c.trustedAddr(a) {
				return a, t
			}
			last, lastText = a, t
		}
	}
	if c.hops > 0 {
		return peer, text // fewer entries than hops: not through the proxies
	}
	return last, lastText
}

// parseHost parses an address, with or without a port ("1.2.3.4",
// "1.2.3.4:80", "[::1]:80", "::1"), IPv4-mapped addresses unmapped and
// IPv6 zones dropped ("fe80::1%eth0" is fe80::1: a zone names an
// interface of the receiver, which a client may vary to be several keys).
// It returns the address and the text of the address alone. The port is
// cut off before parsing: a failed parse allocates its error.
func parseHost(s string) (netip.Addr, string, bool) {
	t := s
	switch i := strings.LastIndexByte(s, ':'); {
	case len(s) > 0 && s[0] == '[':
		j := strings.IndexByte(s, ']')
		if j < 0 || j+1 < len(s) && (s[j+1] != ':' || j+1 != i) {
			return netip.Addr{}, "", false
		}
		t = s[1:j]
	case i >= 0 && strings.IndexByte(s[:i], ':') < 0:
		t = s[:i] // IPv4 and a port
	}
	if a, ok := parseIPv4(t); ok {
		return a, t, true
	}
	a, err := netip.ParseAddr(t)
	if err != nil {
		return netip.Addr{}, "", false
	}
	if i := strings.IndexByte(t, '%'); i >= 0 {
		a, t = a.WithZone(""), t[:i]
	}
	return a.Unmap(), t, true
}

// parseIPv4 parses s as a dotted-decimal IPv4 address in the form
// netip.ParseAddr accepts (four fields, 0 to 255, no leading zeros), in one
// pass: the common client address, parsed without ParseAddr's scan for the
// address family. It returns false for anything else, which ParseAddr then
// decides.
func parseIPv4(s string) (netip.Addr, bool) {
	var ip [4]byte
	field, val, digits := 0, 0, 0
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c >= '0' && c <= '9':
			if digits == 1 && val == 0 {
				return netip.Addr{}, false // a leading zero
			}
			val = val*10 + int(c-'0')
			digits++
			if val > 255 {
				return netip.Addr{}, false
			}
		case c == '.' && digits > 0 && field < 3:
			ip[field] = byte(val)
			field, val, digits = field+1, 0, 0
		default:
			return netip.Addr{}, false
		}
	}
	if field != 3 || digits == 0 {
		return netip.Addr{}, false
	}
	ip[3] = byte(val)
	return netip.AddrFrom4(ip), true
}

// key returns the key of client address a, read from text: the canonical
// form of a, or of its IPv6 prefix when IPv6 clients are grouped. It is
// text itself when text is already canonical, so that the common case
// allocates nothing.
func (c *clientIP) key(a netip.Addr, text string) string {
	if !a.IsValid() {
		return text
	}
	if c.v6bits > 0 && a.Is6() {
		p, _ := a.Prefix(c.v6bits)
		return p.String()
	}
	if a.Is4() && strings.IndexByte(text, ':') < 0 {
		// ParseAddr takes IPv4 only in its canonical dotted form (no
		// leading zeros); a mapped IPv6 form has colons.
		return text
	}
	var buf [64]byte
	b := a.AppendTo(buf[:0])
	if string(b) == text {
		return text
	}
	return string(b)
}

// ClientIP returns the client's address as the middleware sees it (before
// IPv6 grouping): the socket's peer, or what trusted proxies forwarded. It
// is invalid when the peer is not an IP (a Unix socket).
func (m *Middleware) ClientIP(r *http.Request) netip.Addr {
	a, _ := m.ip.resolve(r)
	return a
}
