package httplimit

import (
	"fmt"
	"net/http"
	"path"
	"strings"
)

// pattern is a ServeMux pattern, "[METHOD ][HOST]/[PATH]", matched without
// allocating. Unlike a ServeMux, which picks the most specific pattern, a
// middleware applies every rule whose pattern matches.
type pattern struct {
	method string // "" for any; GET also matches HEAD
	host   string // "" for any
	segs   []segment
	prefix bool // the pattern ends in "/": it matches any rest of the path
}

// segment is one segment of a pattern's path: a literal, a wildcard {name}
// (one non-empty segment) or {name...} (the rest of the path).
type segment struct {
	lit  string
	wild bool
	rest bool
}

// parsePattern parses s as ServeMux does: s is first registered with a
// ServeMux, so that it accepts exactly ServeMux's syntax.
func parsePattern(s string) (p pattern, err error) {
	func() {
		defer func() {
			if r := recover(); r != nil {
				err = fmt.Errorf("%v", r)
			}
		}()
		http.NewServeMux().Handle(s, http.NotFoundHandler())
	}()
	if err != nil {
		return p, err
	}
	s = strings.TrimSpace(s)
	if i := strings.IndexAny(s, " \t"); i >= 0 {
		p.method, s = s[:i], strings.TrimLeft(s[i:], " \t")
	}
	i := strings.IndexByte(s, '/')
	p.host, s = s[:i], s[i+1:]
	if s == "" {
		p.prefix = true
		return p, nil
	}
	parts := strings.Split(s, "/")
	if parts[len(parts)-1] == "" {
		p.prefix, parts = true, parts[:len(parts)-1]
	}
	for _, part := range parts {
		switch {
		case part == "{$}":
			p.segs, p.prefix = append(p.segs, segment{}), false
		case strings.HasSuffix(part, "...}"):
			p.segs = append(p.segs, segment{rest: true})
		case strings.HasPrefix(part, "{"):
			p.segs = append(p.segs, segment{wild: true})
		default:
			p.segs = append(p.segs, segment{lit: part})
		}
	}
	return p, nil
}

// match reports whether r matches p.
func (p *pattern) match(r *http.Request) bool {
	if p.method != "" && p.method != r.Method && (p.method != http.MethodGet || r.Method != http.MethodHead) {
		return false
	}
	if p.host != "" && !strings.EqualFold(p.host, stripPort(r.Host)) {
		return false
	}
	if len(p.segs) == 0 && p.prefix {
		return true // "/": every path
	}
	pth := r.URL.Path
	if pth == "" || pth[0] != '/' {
		pth = "/" + pth
	}
	if unclean(pth) {
		// Match what the path means, however it is written.
		c := path.Clean(pth)
		if strings.HasSuffix(pth, "/") && c != "/" {
			c += "/"
		}
		pth = c
	}
	rest := pth[1:]
	more := true // whether rest holds a segment, possibly empty
	for _, s := range p.segs {
		if !more {
			return false
		}
		if s.rest {
			return true
		}
		var seg string
		if i := strings.IndexByte(rest, '/'); i >= 0 {
			seg, rest = rest[:i], rest[i+1:]
		} else {
			seg, rest, more = rest, "", false
		}
		if s.wild && seg == "" || !s.wild && seg != s.lit {
			return false
		}
	}
	if p.prefix {
		return more
	}
	return !more
}

// unclean reports whether path p has an empty segment or one starting with
// a dot, which path.Clean may change: "//" or "/.".
func unclean(p string) bool {
	for {
		i := strings.IndexByte(p, '/')
		if i < 0 || i+1 == len(p) {
			return false
		}
		if c := p[i+1]; c == '/' || c == '.' {
			return true
		}
		p = p[i+1:]
	}
}

// stripPort returns host without its port.
func stripPort(host string) string {
	i := strings.LastIndexByte(host, ':')
	if i < 0 || strings.IndexByte(host[i:], ']') >= 0 {
		return host
	}
	if host[0] == '[' {
		return host[1 : i-1]
	}
	return host[:i]
}
