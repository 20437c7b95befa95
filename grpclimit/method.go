package grpclimit

import (
	"errors"
	"strings"
)

// method is a rule's Endpoint as a pattern of gRPC full method names,
// matched without allocating:
//
//	""  "/"  "/*"          every method
//	"/pkg.Service/*"       every method of pkg.Service ("/pkg.Service/" too)
//	"/pkg.Service/Method"  that method
type method struct {
	kind   methodKind
	prefix string // "/pkg.Service/" for methodService, the full name for methodExact
}

type methodKind uint8

const (
	methodAll methodKind = iota
	methodService
	methodExact
)

// errMethod is the reason a method pattern is refused.
var errMethod = errors.New(`not a gRPC method pattern: "/pkg.Service/Method", "/pkg.Service/*" or "/*"`)

// parseMethod parses a rule's Endpoint as a method pattern.
func parseMethod(s string) (method, error) {
	if s == "" || s == "/" || s == "/*" {
		return method{kind: methodAll}, nil
	}
	if len(s) > maxMethod {
		return method{}, errMethod
	}
	svc, name, ok := strings.Cut(strings.TrimPrefix(s, "/"), "/")
	if !ok || s[0] != '/' || !validName(svc) {
		return method{}, errMethod
	}
	switch {
	case name == "" || name == "*":
		return method{kind: methodService, prefix: "/" + svc + "/"}, nil
	case validName(name):
		return method{kind: methodExact, prefix: s}, nil
	}
	return method{}, errMethod
}

// maxMethod is the longest method pattern, the bound of a value in a rules
// file.
const maxMethod = 1024

// validName reports whether s is a service or method name, possibly
// qualified by a package: letters, digits, '_' and '.', not starting with
// a dot. The names protoc accepts are a subset.
func validName(s string) bool {
	if s == "" || s[0] == '.' || s[len(s)-1] == '.' {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '.') {
			return false
		}
	}
	return true
}

// match reports whether fullMethod, "/pkg.Service/Method", is one of m's.
func (m *method) match(fullMethod string) bool {
	switch m.kind {
	case methodAll:
		return true
	case methodService:
		return len(fullMethod) > len(m.prefix) && strings.HasPrefix(fullMethod, m.prefix) &&
			strings.IndexByte(fullMethod[len(m.prefix):], '/') < 0
	default:
		return fullMethod == m.prefix
	}
}

// String returns m in its canonical form ("/*", "/pkg.Service/*" or the
// full method).
func (m method) String() string {
	switch m.kind {
	case methodAll:
		return "/*"
	case methodService:
		return m.prefix + "*"
	default:
		return m.prefix
	}
}
