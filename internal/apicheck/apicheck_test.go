package apicheck_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/internal/apicheck"
)

// TestPackage lists a small package of every kind of declaration: names
// counted as the API's, fields and interface methods on lines of their own,
// unexported names and other platforms' files left out.
func TestPackage(t *testing.T) {
	dir := t.TempDir()
	src := `package p

type T struct {
	A, b int
	C    []string // c
	*Embedded
	hidden
}

type Embedded struct{}
type hidden struct{}

type I interface {
	M(x int) (string, error)
	m()
}

type Alias = T

const (
	K1 T0 = iota
	K2
	k3
)

type T0 int

const Max = 1 << 10

var V, w = 1, 2

func F(a, b int, c ...string) error { return nil }
func f()                            {}
func (t *T) Do(ctx int) (n int, err error) { return }
func (t T) do()                     {}
func (h hidden) Exported()          {}
func G[X any](x X) X                { return x }
`
	require.NoError(t, os.WriteFile(filepath.Join(dir, "p.go"), []byte(src), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "p_plan9.go"), []byte("package p\n\nfunc Plan9() {}\n"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "ignored.go"), []byte("//go:build ignore\n\npackage p\n\nfunc Ignored() {}\n"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "p_test.go"), []byte("package p\n\nfunc TestX() {}\n"), 0o644))
	lines, n, err := apicheck.Package(dir, "p")
	require.NoError(t, err)
	assert.Equal(t, []string{
		"pkg p, const K1 T0",
		"pkg p, const K2 T0",
		"pkg p, const Max = 1 << 10",
		"pkg p, func F(int, int, ...string) error",
		"pkg p, func G[X any](X) X",
		"pkg p, method (*T) Do(int) (int, error)",
		"pkg p, type Alias = T",
		"pkg p, type Embedded struct",
		"pkg p, type I interface { M, m }",
		"pkg p, type I interface, M(int) (string, error)",
		"pkg p, type T struct",
		"pkg p, type T struct, A int",
		"pkg p, type T struct, C []string",
		"pkg p, type T struct, embedded *Embedded",
		"pkg p, type T0 int",
		"pkg p, var V",
	}, lines)
	// K1, K2, Max, F, G, Do, Alias, Embedded, I, T, T0, V.
	assert.Equal(t, 12, n)
}
