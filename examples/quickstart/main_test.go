package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/internal/redistest"
)

// TestRun runs the program against the test Redis, its keys cleared
// first, and checks that it prints the output the README shows: five of
// five admitted, as an exact limiter admits them.
func TestRun(t *testing.T) {
	addr := redistest.Addr(t)
	ctx := context.Background()
	c := redistest.Client(t, addr)
	keys, err := redistest.Keys(ctx, c, "quickstart")
	require.NoError(t, err)
	if len(keys) > 0 {
		require.NoError(t, c.Del(ctx, keys...).Err())
	}
	out := captureStdout(t, func() { require.NoError(t, run(ctx, addr)) })
	readme, err := os.ReadFile("../../README.md")
	require.NoError(t, err)
	_, after, ok := strings.Cut(string(readme), "it prints (its test\nchecks this output):\n\n```\n")
	require.True(t, ok, "README.md: no expected output after the quick start")
	want, _, _ := strings.Cut(after, "```\n")
	assert.Equal(t, 5, strings.Count(out, "allowed"), "five requests in a row on a new key, all admitted")
	// The README's output, but for a token refilled (one each 10ms at
	// 100/s) while a request waited for its lease on a loaded machine.
	gotLines, wantLines := strings.Split(out, "\n"), strings.Split(want, "\n")
	require.Len(t, gotLines, len(wantLines), "the lines the README shows:\n%s\ngot:\n%s", want, out)
	for i, w := range wantLines {
		if w == "" {
			continue
		}
		var gi, gr, wi, wr int
		_, err := fmt.Sscanf(gotLines[i], "request %d: allowed, %d remaining", &gi, &gr)
		require.NoError(t, err, "line %d: %q", i, gotLines[i])
		_, err = fmt.Sscanf(w, "request %d: allowed, %d remaining", &wi, &wr)
		require.NoError(t, err, "README line %d: %q", i, w)
		assert.Equal(t, wi, gi, "line %d", i)
		assert.GreaterOrEqual(t, gr, wr, "line %d: remaining, as the README shows or more (a token refilled)", i)
		assert.LessOrEqual(t, gr, wr+i, "line %d: at most a token refilled per request before it", i)
	}
}

// captureStdout returns what f writes to os.Stdout.
func captureStdout(t *testing.T, f func()) string {
	t.Helper()
	r, w, err := os.Pipe()
	require.NoError(t, err)
	saved := os.Stdout
	os.Stdout = w
	done := make(chan string)
	go func() {
		b, _ := io.ReadAll(r)
		done <- string(b)
	}()
	defer func() { os.Stdout = saved }()
	f()
	w.Close()
	return <-done
}

// TestRunNoRedis: with RequireRedis, the program stops at New when Redis
// does not answer.
func TestRunNoRedis(t *testing.T) {
	assert.ErrorContains(t, run(context.Background(), "127.0.0.1:1"), "RequireRedis")
}

// TestReadmeQuotesProgram: the README's Go example is this program,
// verbatim.
func TestReadmeQuotesProgram(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	require.NoError(t, err)
	src, err := os.ReadFile("main.go")
	require.NoError(t, err)
	_, block, ok := strings.Cut(string(readme), "```go\n// Command quickstart")
	require.True(t, ok, "README.md has no Go block opening with // Command quickstart")
	block, _, ok = strings.Cut(block, "```\n")
	require.True(t, ok, "README.md: the Go block does not end")
	assert.Equal(t, string(src), "// Command quickstart"+block, "README.md's Go example differs from examples/quickstart/main.go")
}
