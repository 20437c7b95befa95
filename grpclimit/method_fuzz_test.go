package grpclimit

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// matchReference is the meaning of a method pattern, written plainly:
// "/*" every method; "/svc/*" the methods of svc; else the method itself.
// A full method is "/svc/name", neither part empty nor holding a '/'.
func matchReference(pattern, fullMethod string) bool {
	parts := strings.Split(fullMethod, "/")
	if len(parts) != 3 || parts[0] != "" || parts[1] == "" || parts[2] == "" {
		return pattern == "/*" // a malformed name: only the catch-all matches it
	}
	switch {
	case pattern == "/*":
		return true
	case strings.HasSuffix(pattern, "/*"):
		return pattern == "/"+parts[1]+"/*"
	default:
		return pattern == fullMethod
	}
}

// TestMethodMatch: the patterns of a rules file and the methods they
// match.
func TestMethodMatch(t *testing.T) {
	for _, tc := range []struct {
		pattern string
		match   []string
		miss    []string
	}{
		{"", []string{"/a.B/C", "/x/y"}, nil},
		{"/", []string{"/a.B/C"}, nil},
		{"/*", []string{"/a.B/C"}, nil},
		{"/pkg.Svc/*", []string{"/pkg.Svc/A", "/pkg.Svc/Get_2"}, []string{"/pkg.Svc/", "/pkg.Svc", "/pkg.SvcX/A", "/pkg.Sv/A", "/pkg.Svc/A/B", "/other.Svc/A"}},
		{"/pkg.Svc/", []string{"/pkg.Svc/A"}, []string{"/pkg.Svc2/A"}},
		{"/pkg.Svc/Get", []string{"/pkg.Svc/Get"}, []string{"/pkg.Svc/GetX", "/pkg.Svc/Ge", "/pkg.Svc/get"}},
	} {
		m, err := parseMethod(tc.pattern)
		require.NoError(t, err, tc.pattern)
		for _, s := range tc.match {
			assert.True(t, m.match(s), "%q should match %q", tc.pattern, s)
		}
		for _, s := range tc.miss {
			assert.False(t, m.match(s), "%q should not match %q", tc.pattern, s)
		}
	}
	for _, bad := range []string{"GET /x", "x/y", "/pkg.Svc", "/pkg.Svc/a/b", "/pkg.*/A", "/*/A", "/pkg.Svc/A*", "/.a/B", "/a./B", "//A", "/a b/C", "/pkg.Svc/{x}", "*"} {
		_, err := parseMethod(bad)
		assert.ErrorIs(t, err, errMethod, bad)
	}
}

// FuzzMethod: a pattern that parses matches exactly what its canonical
// form means (matchReference), and parses again to the same pattern;
// nothing panics.
func FuzzMethod(f *testing.F) {
	for _, s := range [][2]string{
		{"/*", "/a.B/C"}, {"/pkg.Svc/*", "/pkg.Svc/A"}, {"/pkg.Svc/", "/pkg.SvcX/A"},
		{"/pkg.Svc/Get", "/pkg.Svc/Get"}, {"/pkg.Svc/Get", "/pkg.Svc/Get/x"}, {"/a/b", "a/b"}, {"", "/"},
	} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, pattern, fullMethod string) {
		m, err := parseMethod(pattern)
		if err != nil {
			return
		}
		canon := m.String()
		again, err := parseMethod(canon)
		require.NoError(t, err, canon)
		require.Equal(t, m, again, canon)
		require.Equal(t, matchReference(canon, fullMethod), m.match(fullMethod), "%q (%q) on %q", pattern, canon, fullMethod)
	})
}
