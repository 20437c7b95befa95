package doccheck

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// readmeExamples are the Example functions README.md quotes, by the file
// that holds each. go test runs them and checks their output, so the
// README's quick start cannot drift from a program that works.
var readmeExamples = []struct{ file, name string }{
	{"local/example_test.go", "ExampleLimiter_AllowNAt"},
	{"hybrid/httplimit/example_test.go", "Example"},
}

// funcSource returns the source of the top-level function name in src,
// from "func name(" to the closing brace at the start of a line.
func funcSource(src, name string) (string, bool) {
	_, rest, ok := strings.Cut(src, "\nfunc "+name+"(")
	if !ok {
		return "", false
	}
	body, _, ok := strings.Cut(rest, "\n}\n")
	if !ok {
		return "", false
	}
	return "func " + name + "(" + body + "\n}\n", true
}

// TestReadmeQuotesExamples: each Example the README quotes appears in it
// verbatim, as a Go block of its own.
func TestReadmeQuotesExamples(t *testing.T) {
	root := repoRoot(t)
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	require.NoError(t, err)
	for _, ex := range readmeExamples {
		t.Run(ex.name, func(t *testing.T) {
			src, err := os.ReadFile(filepath.Join(root, ex.file))
			require.NoError(t, err)
			fn, ok := funcSource(string(src), ex.name)
			require.True(t, ok, "%s has no func %s", ex.file, ex.name)
			assert.Contains(t, string(readme), "```go\n"+fn+"```\n",
				"README.md does not quote %s of %s verbatim", ex.name, ex.file)
		})
	}
}

// TestReadmeQuotesExampleConfig: the README gives the value of the local
// Example's exampleConfig, which the quoted function uses, as it is.
func TestReadmeQuotesExampleConfig(t *testing.T) {
	root := repoRoot(t)
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	require.NoError(t, err)
	src, err := os.ReadFile(filepath.Join(root, "local", "example_test.go"))
	require.NoError(t, err)
	_, val, ok := strings.Cut(string(src), "\nvar exampleConfig = ")
	require.True(t, ok, "local/example_test.go has no exampleConfig")
	val, _, _ = strings.Cut(val, "\n")
	// The README wraps lines: compare with its line breaks as spaces.
	flat := strings.ReplaceAll(string(readme), "\n", " ")
	assert.Contains(t, flat, "`exampleConfig` is `"+val+"`", "README.md does not give exampleConfig's value")
}

// TestFuncSource: the extraction finds a whole function and only it, and
// reports a missing one.
func TestFuncSource(t *testing.T) {
	src := "package p\n\nfunc ExampleA() {\n\tif x {\n\t}\n}\n\nfunc ExampleAB() {\n}\n"
	fn, ok := funcSource(src, "ExampleA")
	require.True(t, ok)
	assert.Equal(t, "func ExampleA() {\n\tif x {\n\t}\n}\n", fn)
	fn, ok = funcSource(src, "ExampleAB")
	require.True(t, ok)
	assert.Equal(t, "func ExampleAB() {\n}\n", fn)
	_, ok = funcSource(src, "ExampleB")
	assert.False(t, ok)
}
