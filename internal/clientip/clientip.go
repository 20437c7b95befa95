// Package clientip resolves a request's client address from its socket
// peer and, from trusted proxies only, its forwarding headers: the one
// logic of httplimit and grpclimit, which differ only in how their headers
// are spelled (canonical HTTP names, lower-case gRPC metadata keys).
package clientip

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"
)

// Resolver resolves client addresses. Its zero value trusts no proxy: the
// client is the socket's peer. It is safe for concurrent use once built.
type Resolver struct {
	// Trusted are the trusted proxies (ParsePrefix's prefixes).
	Trusted []netip.Prefix
	// Hops is the number of proxies every request passes through, when
	// their addresses are not known (0: none).
	Hops int
	// Header is the single-value header a trusted proxy sets to the
	// client's address, spelled as the headers' map holds it, or "".
	Header string
	// Forwarded is X-Forwarded-For, spelled as the headers' map holds it.
	Forwarded string
	// V6Bits groups IPv6 clients by their first V6Bits bits (0: none).
	V6Bits int
}

// trustedAddr reports whether a is one of the trusted proxies.
func (c *Resolver) trustedAddr(a netip.Addr) bool {
	for _, p := range c.Trusted {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// Resolve returns the client's address and the text it was read from (a
// substring of peer or of a header value, so that keying by it allocates
// nothing), or an invalid address and peer itself when the peer is not an
// IP (a Unix socket). h is read only when the peer is trusted.
func (c *Resolver) Resolve(peer string, h map[string][]string) (netip.Addr, string) {
	pa, text, ok := ParseHost(peer)
	if !ok {
		return netip.Addr{}, peer
	}
	return c.From(pa, text, h)
}

// Believes reports whether the forwarding headers of a request from peer
// pa are read: pa is a trusted proxy, or Hops is set.
func (c *Resolver) Believes(pa netip.Addr) bool {
	return c.Hops > 0 || len(c.Trusted) > 0 && c.trustedAddr(pa)
}

// From is Resolve for a peer already parsed, pa, unmapped and without a
// zone, written text; text may be "" (the peer not written out), which
// Key then formats.
func (c *Resolver) From(pa netip.Addr, text string, h map[string][]string) (netip.Addr, string) {
	if !c.Believes(pa) {
		return pa, text
	}
	// The peer is a trusted proxy: believe what it says.
	if c.Header != "" {
		if v := h[c.Header]; len(v) == 1 {
			if a, t, ok := ParseHost(strings.TrimSpace(v[0])); ok {
				return a, t
			}
		}
	}
	xff := h[c.Forwarded]
	n := 0 // entries seen, right to left
	last, lastText := pa, text
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
			a, t, ok := ParseHost(e)
			if c.Hops > 0 {
				if n < c.Hops {
					continue
				}
				if ok {
					return a, t
				}
				return pa, text
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
	if c.Hops > 0 {
		return pa, text // fewer entries than hops: not through the proxies
	}
	return last, lastText
}

// ParsePrefix parses a CIDR, or a single address as its own prefix.
func ParsePrefix(s string) (netip.Prefix, error) {
	s = strings.TrimSpace(s)
	if strings.Contains(s, "/") {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return p, err
		}
		if p.Addr().Is4In6() {
			p = netip.PrefixFrom(p.Addr().Unmap(), max(p.Bits()-96, 0))
		}
		return p.Masked(), nil
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Prefix{}, err
	}
	a = a.Unmap()
	return netip.PrefixFrom(a, a.BitLen()), nil
}

// ParseHost parses an address, with or without a port ("1.2.3.4",
// "1.2.3.4:80", "[::1]:80", "::1"), IPv4-mapped addresses unmapped and
// IPv6 zones dropped ("fe80::1%eth0" is fe80::1: a zone names an
// interface of the receiver, which a client may vary to be several keys).
// It returns the address and the text of the address alone. The port is
// cut off before parsing: a failed parse allocates its error.
func ParseHost(s string) (netip.Addr, string, bool) {
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

// Key returns the key of client address a, read from text: the canonical
// form of a, or of its IPv6 prefix when IPv6 clients are grouped. It is
// text itself when text is already canonical, so that the common case
// allocates nothing.
func (c *Resolver) Key(a netip.Addr, text string) string {
	if !a.IsValid() {
		return text
	}
	if c.V6Bits > 0 && a.Is6() {
		p, _ := a.Prefix(c.V6Bits)
		return p.String()
	}
	if text == "" {
		return a.String()
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

// Fields are the client IP fields of httplimit's and grpclimit's Configs.
type Fields struct {
	TrustedProxies []string
	TrustedHops    int
	ClientIPHeader string
	IPv6Prefix     int
}

// Check reports f's first bad field: its name as the Configs spell it, its
// value and why; field is "" when f is good.
func (f Fields) Check() (field string, value any, reason string) {
	for i, s := range f.TrustedProxies {
		if _, err := ParsePrefix(s); err != nil {
			return fmt.Sprintf("TrustedProxies[%d]", i), strconv.Quote(s), err.Error()
		}
	}
	switch {
	case f.TrustedHops < 0:
		return "TrustedHops", f.TrustedHops, "must not be negative"
	case f.TrustedHops > 0 && len(f.TrustedProxies) > 0:
		return "TrustedHops", f.TrustedHops, "set with TrustedProxies; use one"
	case f.IPv6Prefix < 0 || f.IPv6Prefix > 128:
		return "IPv6Prefix", f.IPv6Prefix, "must be from 1 to 128"
	case f.ClientIPHeader != "" && len(f.TrustedProxies) == 0 && f.TrustedHops == 0:
		return "ClientIPHeader", strconv.Quote(f.ClientIPHeader), "needs TrustedProxies or TrustedHops, or anyone could set it"
	}
	return "", nil, ""
}

// Resolver returns the Resolver of f, which Check found good; header is
// f.ClientIPHeader and forwarded X-Forwarded-For, spelled as the headers'
// map holds them.
func (f Fields) Resolver(header, forwarded string) Resolver {
	r := Resolver{Hops: f.TrustedHops, V6Bits: f.IPv6Prefix, Header: header, Forwarded: forwarded}
	for _, s := range f.TrustedProxies {
		p, _ := ParsePrefix(s) // Check parsed it
		r.Trusted = append(r.Trusted, p)
	}
	return r
}
