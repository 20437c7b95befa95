package doccheck

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// repoRoot returns the repository's root: two levels above this package.
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	require.NoError(t, err)
	_, err = os.Stat(filepath.Join(root, "go.mod"))
	require.NoError(t, err, "the repository root has no go.mod")
	return root
}

// docs returns README.md and docs/*.md.
func docs(t *testing.T, root string) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	require.NoError(t, err)
	require.NotEmpty(t, files, "no docs/*.md found")
	return append([]string{filepath.Join(root, "README.md")}, files...)
}

// TestLinks checks every link of README.md and docs/*.md.
func TestLinks(t *testing.T) {
	root := repoRoot(t)
	tracked, err := trackedPaths(root)
	if err != nil {
		t.Logf("git ls-files: %v: links are checked against the files on disk only", err)
		tracked = nil
	}
	for _, f := range docs(t, root) {
		rel, err := filepath.Rel(root, f)
		require.NoError(t, err)
		t.Run(filepath.ToSlash(rel), func(t *testing.T) {
			problems, err := check(root, f, tracked)
			require.NoError(t, err)
			for _, p := range problems {
				assert.Fail(t, "a broken link", "%s:%d: link %q: %s", rel, p.line, p.target, p.why)
			}
		})
	}
}

// TestCheck holds the checker to what it must catch and what it must let
// through, on a repository built in a temporary directory.
func TestCheck(t *testing.T) {
	root := t.TempDir()
	write := func(name, body string) {
		p := filepath.Join(root, filepath.FromSlash(name))
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
		require.NoError(t, os.WriteFile(p, []byte(body), 0o644))
	}
	write("go.mod", "module example\n")
	write("docs/img/a.svg", "<svg/>\n")
	write("docs/other.md", "# Other page\n\n## Benchmarks\n\n## Benchmarks\n\n## `Allow` vs. x/time/rate's <a id=\"custom\"></a>\n")
	write("outside.txt", "")

	tests := []struct {
		name, link string
		ok         bool
	}{
		{"file", "other.md", true},
		{"image", "img/a.svg", true},
		{"heading", "other.md#benchmarks", true},
		{"repeated heading", "other.md#benchmarks-1", true},
		{"heading with code, punctuation and a tag", "other.md#allow-vs-xtimerates", true},
		{"explicit anchor", "other.md#custom", true},
		{"own heading", "#page", true},
		{"up and back in", "../docs/other.md", true},
		{"file at the root", "../outside.txt", true},
		{"standard", "https://datatracker.ietf.org/doc/html/rfc6585", true},
		{"missing file", "missing.md", false},
		{"missing heading", "other.md#nothing", false},
		{"missing own heading", "#nothing", false},
		{"outside the repository", "../../DESIGN.md", false},
		{"absolute path", "/etc/passwd", false},
		{"file URL", "file:///etc/passwd", false},
		{"other host", "https://example.com/post", false},
		{"empty", "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := filepath.Join(root, "docs", "page.md")
			write("docs/page.md", fmt.Sprintf("# Page\n\nSee [this](%s).\n\n```\n[in code](missing.md)\n```\n\n`[in a span](missing.md)`\n", tt.link))
			problems, err := check(root, f, nil)
			require.NoError(t, err)
			if tt.ok {
				assert.Empty(t, problems)
				return
			}
			require.Len(t, problems, 1)
			assert.Equal(t, 3, problems[0].line)
			assert.Equal(t, tt.link, problems[0].target)
		})
	}
}

func TestSlug(t *testing.T) {
	tests := map[string]string{
		"Benchmarks": "benchmarks",
		"The bucket algorithms are one formulation": "the-bucket-algorithms-are-one-formulation",
		"`Allow` against x/time/rate's":             "allow-against-xtimerates",
		"Memory per key (`L` = 1)":                  "memory-per-key-l--1",
		"See [the table](other.md)":                 "see-the-table",
	}
	for in, want := range tests {
		assert.Equal(t, want, slug(in), in)
	}
}

// TestNoHistory checks that no file under historyRoots tells how the
// repository was developed: the check of git grep -nE with historyWord's
// pattern, over historyRoots, images left out.
func TestNoHistory(t *testing.T) {
	root := repoRoot(t)
	hits, err := history(root, historyRoots)
	require.NoError(t, err)
	assert.Empty(t, hits)
}

// TestHistory holds the history check to what it must catch.
func TestHistory(t *testing.T) {
	root := t.TempDir()
	// Built from parts, so that this file does not match itself.
	bad := []string{"in st" + "op 22 on", "st" + "ops 3 and", "see iss" + "ue #12", "iss" + "ue 7", "../../shared/" + "DESIGN.md"}
	// Case counts, as in git grep without -i.
	good := []string{"a stopwatch 3", "stop the server", "issue 2a", "tissue 3", "shared/design", "St" + "op 3"}
	for i, line := range append(append([]string{}, bad...), good...) {
		require.NoError(t, os.WriteFile(filepath.Join(root, fmt.Sprintf("f%d.md", i)), []byte("x\n"+line+"\n"), 0o644))
	}
	require.NoError(t, os.WriteFile(filepath.Join(root, "img.svg"), []byte(bad[0]), 0o644))
	hits, err := history(root, []string{"."})
	require.NoError(t, err)
	assert.Len(t, hits, len(bad), "%q", hits)
	for _, h := range hits {
		assert.Contains(t, h, ":2: ")
	}
}

// TestCheckTracked holds the checker to the files git tracks, when given
// them: a file on disk that is not tracked is not in the repository.
func TestCheckTracked(t *testing.T) {
	root := t.TempDir()
	for name, body := range map[string]string{
		"docs/page.md":       "# Page\n\n[a](a.md) [b](b.md) [dir](img) [up](../README.md)\n",
		"docs/a.md":          "",
		"docs/b.md":          "",
		"docs/img/chart.svg": "",
		"README.md":          "",
	} {
		p := filepath.Join(root, filepath.FromSlash(name))
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
		require.NoError(t, os.WriteFile(p, []byte(body), 0o644))
	}
	tracked := map[string]bool{"docs": true, "docs/page.md": true, "docs/a.md": true, "docs/img": true, "docs/img/chart.svg": true, "README.md": true}
	problems, err := check(root, filepath.Join(root, "docs", "page.md"), tracked)
	require.NoError(t, err)
	require.Len(t, problems, 1)
	assert.Equal(t, "b.md", problems[0].target)
	assert.Equal(t, "not tracked by git", problems[0].why)
}

// TestTrackedPaths checks that git's files and their directories are found.
func TestTrackedPaths(t *testing.T) {
	tracked, err := trackedPaths(repoRoot(t))
	if err != nil {
		t.Skipf("git ls-files: %v", err)
	}
	for _, p := range []string{"README.md", "docs", "docs/performance.md", "internal", "internal/doccheck"} {
		assert.True(t, tracked[p], p)
	}
	assert.False(t, tracked[".run"])
}
