package httplimit

import (
	"net"
	"path"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
)

// pathHelperCases are paths, hosts and segments for the helpers that
// redo net/http's work without allocating.
var pathHelperCases = []string{
	"", "/", "//", "/a/b", "/a//b/", "/./a", "/a/./b/.", "/a/../b", "/../a", "/a/b/..", "/a/b/../", "/...", "/..a/.b",
	"a/b", "%2e%2e", "%2E", "%2f", "a%2Fb", "%", "%4", "%zz", "%41%42", "sp%20ace", "+",
	"example.com", "example.com:80", "[::1]", "[::1]:80", "[::1]x:80", "a:b:c", ":80", "[a]:b]:1", "host:",
}

// TestPathHelpers: appendClean is ServeMux's cleanPath, hostOnly its
// stripHostPort, segEqual a comparison with pathUnescape's result.
func TestPathHelpers(t *testing.T) {
	for _, s := range pathHelperCases {
		checkPathHelpers(t, s)
	}
}

func FuzzPathHelpers(f *testing.F) {
	for _, s := range pathHelperCases {
		f.Add(s)
	}
	f.Fuzz(checkPathHelpers)
}

func checkPathHelpers(t *testing.T, s string) {
	p := "/" + s
	want := path.Clean(p)
	if strings.HasSuffix(p, "/") && want != "/" {
		want += "/"
	}
	assert.Equal(t, want, string(appendClean([]byte("x"), p)[1:]), "appendClean(%q)", p)

	wantHost := s
	if strings.Contains(s, ":") {
		if h, _, err := net.SplitHostPort(s); err == nil {
			wantHost = h
		}
	}
	assert.Equal(t, wantHost, hostOnly(s), "hostOnly(%q)", s)

	seg, _, _ := strings.Cut(s, "/")
	for _, lit := range []string{pathUnescape(seg), seg, seg + "x", ""} {
		assert.Equal(t, pathUnescape(seg) == lit, segEqual(seg, lit), "segEqual(%q, %q)", seg, lit)
	}
}
