package httplimit

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"unsafe"
)

// pattern is a ServeMux pattern, "[METHOD ][HOST]/[PATH]", matched without
// allocating. Unlike a ServeMux, which picks the most specific pattern, a
// middleware applies every rule whose pattern matches.
type pattern struct {
	method string // "" for any; GET also matches HEAD
	host   string // "" for any
	segs   []segment
	any    bool // the pattern matches every path: "/" or "/{x...}"
}

// segment is one segment of a pattern's path, as ServeMux holds it: a
// literal, unescaped ("/" for {$}, which matches a trailing slash), a
// wildcard {name} (one segment) or a multi, {name...} or a trailing slash
// (the rest of the path, possibly empty).
type segment struct {
	lit   string
	wild  bool
	multi bool
}

// parsePattern parses s as ServeMux does: s is first registered with a
// ServeMux, so that it accepts exactly ServeMux's syntax.
func parsePattern(s string) (p pattern, err error) {
	func() {
		defer func() {
			if r := recover(); r != nil {
				err = patternError(r)
			}
		}()
		http.NewServeMux().Handle(s, http.NotFoundHandler())
	}()
	if err != nil {
		return p, err
	}
	if i := strings.IndexAny(s, " \t"); i >= 0 {
		p.method, s = s[:i], strings.TrimLeft(s[i+1:], " \t")
	}
	i := strings.IndexByte(s, '/')
	p.host, s = s[:i], s[i:]
	for len(s) > 0 {
		s = s[1:] // s starts with '/'
		if s == "" {
			p.segs = append(p.segs, segment{multi: true}) // a trailing slash
			break
		}
		i := strings.IndexByte(s, '/')
		if i < 0 {
			i = len(s)
		}
		var seg string
		seg, s = s[:i], s[i:]
		switch {
		case seg == "{$}":
			p.segs = append(p.segs, segment{lit: "/"})
		case strings.HasSuffix(seg, "...}"):
			p.segs = append(p.segs, segment{multi: true})
		case strings.HasPrefix(seg, "{"):
			p.segs = append(p.segs, segment{wild: true})
		default:
			p.segs = append(p.segs, segment{lit: pathUnescape(seg)})
		}
	}
	p.any = len(p.segs) == 1 && p.segs[0].multi
	return p, nil
}

// patternError is the error of a pattern ServeMux refused, from its panic:
// what is wrong, without the pattern (which ServeMux quotes whole), and at
// most maxPatternError bytes of it (it may quote a wildcard's name).
func patternError(r any) error {
	msg := fmt.Sprint(r)
	if err, ok := r.(error); ok {
		if inner := errors.Unwrap(err); inner != nil {
			msg = inner.Error()
		}
	}
	if len(msg) > maxPatternError {
		msg = msg[:maxPatternError] + "…"
	}
	return errors.New(msg)
}

const maxPatternError = 128

// pathUnescape unescapes a path segment as ServeMux does: an invalid
// escape leaves it as it is.
func pathUnescape(s string) string {
	u, err := url.PathUnescape(s)
	if err != nil {
		return s
	}
	return u
}

// match reports whether r matches p under any of its paths' readings.
func (p *pattern) match(r *http.Request, v *paths) bool {
	if p.method != "" && p.method != r.Method && (p.method != http.MethodGet || r.Method != http.MethodHead) {
		return false
	}
	// ServeMux compares the host without its port, and CONNECT's with it.
	if p.host != "" && !strings.EqualFold(p.host, hostOnly(r.Host)) && !strings.EqualFold(p.host, r.Host) {
		return false
	}
	if p.any {
		return true
	}
	if v.n == 0 {
		v.read(r.URL)
	}
	for i := range v.n {
		if p.matchPath(v.path[i], v.escaped[i]) {
			return true
		}
	}
	return false
}

// matchPath reports whether path matches p's segments, as ServeMux's
// routing tree matches them (net/http's routingNode.matchPath): segment by
// segment, a trailing slash a segment "/" of its own. escaped says that
// the segments are percent-encoded, and compared unescaped.
func (p *pattern) matchPath(path string, escaped bool) bool {
	for _, s := range p.segs {
		if path == "" {
			return false
		}
		if s.multi {
			return true
		}
		var seg string
		if path == "/" {
			seg, path = "/", ""
		} else {
			path = path[1:]
			i := strings.IndexByte(path, '/')
			if i < 0 {
				i = len(path)
			}
			seg, path = path[:i], path[i:]
		}
		switch {
		case s.wild:
			// A wildcard takes any segment, even an empty one, but not a
			// trailing slash (nor "%2f", which ServeMux unescapes to one).
			if seg == "/" || escaped && (seg == "%2f" || seg == "%2F") {
				return false
			}
		case !escaped:
			if seg != s.lit {
				return false
			}
		case !segEqual(seg, s.lit):
			return false
		}
	}
	return path == ""
}

// segEqual reports whether escaped path segment seg is lit once unescaped
// (as pathUnescape, without allocating).
func segEqual(seg, lit string) bool {
	if strings.IndexByte(seg, '%') < 0 {
		return seg == lit
	}
	for i := 0; i < len(seg); i++ {
		if seg[i] == '%' && (i+2 >= len(seg) || !isHex(seg[i+1]) || !isHex(seg[i+2])) {
			return seg == lit // an invalid escape: ServeMux compares it as it is
		}
	}
	j := 0
	for i := 0; i < len(seg); i++ {
		c := seg[i]
		if c == '%' {
			c = unhex(seg[i+1])<<4 | unhex(seg[i+2])
			i += 2
		}
		if j == len(lit) || lit[j] != c {
			return false
		}
		j++
	}
	return j == len(lit)
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

func unhex(c byte) byte {
	switch {
	case c <= '9':
		return c - '0'
	case c <= 'F':
		return c - 'A' + 10
	}
	return c - 'a' + 10
}

// paths are the readings of a request's path that a router may route on,
// computed once per request, for the rules with a path to match:
//
//   - the decoded path (URL.Path), as it is: routers that do not clean it;
//   - the decoded path cleaned (ServeMux's cleanPath): routers that clean
//     it and serve the result;
//   - when the request has an escaped form that differs (URL.RawPath: %2e,
//     %2f, …), the escaped path, as it is and cleaned, its segments
//     unescaped one by one: what ServeMux routes on (it cleans and matches
//     EscapedPath, serving only an escaped path that was clean), and
//     routers on RawPath.
//
// A clean path without escapes has one reading, itself.
type paths struct {
	path    [4]string
	escaped [4]bool // path[i]'s segments are percent-encoded
	n       int     // readings in path; 0 until read
	buf     []byte  // the rooted and cleaned readings' bytes
}

// read sets v's readings of u's path.
func (v *paths) read(u *url.URL) {
	if p := u.Path; u.RawPath == "" && p != "" && p[0] == '/' && !unclean(p) {
		v.path[0], v.n = p, 1 // the common case: one reading
		return
	}
	v.add(u.Path, false)
	if u.RawPath != "" && u.RawPath != u.Path {
		v.add(u.RawPath, true)
	}
}

// add adds p, as it is and cleaned, to the readings.
func (v *paths) add(p string, escaped bool) {
	if p == "" || p[0] != '/' {
		v.buf = append(append(v.buf, '/'), p...)
		p = bytesString(v.buf[len(v.buf)-len(p)-1:])
	}
	v.addOne(p, escaped)
	if unclean(p) {
		n := len(v.buf)
		v.buf = appendClean(v.buf, p)
		v.addOne(bytesString(v.buf[n:]), escaped)
	}
}

func (v *paths) addOne(p string, escaped bool) {
	for i := range v.n {
		if v.path[i] == p && v.escaped[i] == escaped {
			return
		}
	}
	v.path[v.n], v.escaped[v.n] = p, escaped
	v.n++
}

// bytesString returns b as a string without copying: b is not written
// while the string is in use (the readings live for one request).
func bytesString(b []byte) string { return unsafe.String(unsafe.SliceData(b), len(b)) }

// unclean reports whether path p has an empty segment or one starting with
// a dot, which path.Clean may change: "//" or "/.".
func unclean(p string) bool {
	// A byte loop: request paths are short, and IndexByte's call per
	// segment costs more than it saves.
	for i := 0; i+1 < len(p); i++ {
		if p[i] == '/' && (p[i+1] == '/' || p[i+1] == '.') {
			return true
		}
	}
	return false
}

// appendClean appends rooted path p cleaned as ServeMux's cleanPath
// cleans it (path.Clean, a trailing slash kept) to b.
func appendClean(b []byte, p string) []byte {
	root := len(b) + 1 // b's length with the root '/' alone
	b = append(b, '/')
	for r, n := 1, len(p); r < n; {
		switch {
		case p[r] == '/':
			r++
		case p[r] == '.' && (r+1 == n || p[r+1] == '/'):
			r++
		case p[r] == '.' && p[r+1] == '.' && (r+2 == n || p[r+2] == '/'):
			r += 2
			// Back to the previous '/', never past the root.
			w := len(b)
			if w > root {
				w--
				for w > root && b[w] != '/' {
					w--
				}
			}
			b = b[:w]
		default:
			if len(b) != root {
				b = append(b, '/')
			}
			for ; r < n && p[r] != '/'; r++ {
				b = append(b, p[r])
			}
		}
	}
	if p[len(p)-1] == '/' && len(b) != root {
		b = append(b, '/')
	}
	return b
}

// hostOnly returns host without its port, as ServeMux's stripHostPort does
// (net.SplitHostPort's host, or host itself when that fails), without
// allocating.
func hostOnly(host string) string {
	i := strings.LastIndexByte(host, ':')
	if i < 0 {
		return host
	}
	h, j, k := host[:i], 0, 0
	if host[0] == '[' {
		end := strings.IndexByte(host, ']')
		if end < 0 || end+1 != i {
			return host
		}
		h, j, k = host[1:end], 1, end+1
	} else if strings.IndexByte(h, ':') >= 0 {
		return host
	}
	if strings.IndexByte(host[j:], '[') >= 0 || strings.IndexByte(host[k:], ']') >= 0 {
		return host
	}
	return h
}
