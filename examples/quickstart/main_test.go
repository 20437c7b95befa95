package main

import (
	"context"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/internal/redistest"
)

// TestRun runs the program against the test Redis.
func TestRun(t *testing.T) {
	require.NoError(t, run(context.Background(), redistest.Addr(t)))
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
