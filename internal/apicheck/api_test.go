package apicheck_test

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/internal/apicheck"
)

var update = flag.Bool("update", false, "rewrite api/v1.txt from the source")

// public are the module's public packages, by directory from the module's
// root, and the name each is imported as.
var public = []struct{ dir, name string }{
	{"local", "local"},
	{"syncer", "syncer"},
	{"fallback", "fallback"},
	{"hybrid", "hybrid"},
	{"hybrid/httplimit", "httplimit"},
}

const golden = "../../api/v1.txt"

// maxNames bounds the public surface: exported top-level types, functions,
// constants and variables, and exported methods of exported types.
const maxNames = 145

// TestAPI compares the exported API of the public packages with the golden
// file: a change to the surface changes api/v1.txt in the same commit
// (go test ./internal/apicheck -update writes it).
func TestAPI(t *testing.T) {
	var b strings.Builder
	total := 0
	for _, p := range public {
		lines, n, err := apicheck.Package(filepath.Join("..", "..", p.dir), p.name)
		require.NoError(t, err)
		if len(lines) == 0 {
			lines = []string{"pkg " + p.name + ", (nothing exported)"}
		}
		t.Logf("%s: %d exported names", p.dir, n)
		total += n
		for _, l := range lines {
			b.WriteString(l + "\n")
		}
	}
	t.Logf("total: %d exported names", total)
	assert.LessOrEqual(t, total, maxNames, "exported names of the public packages")
	got := b.String()
	if *update {
		require.NoError(t, os.MkdirAll(filepath.Dir(golden), 0o755))
		require.NoError(t, os.WriteFile(golden, []byte(got), 0o644))
	}
	want, err := os.ReadFile(golden)
	require.NoError(t, err, "run go test ./internal/apicheck -update to write it")
	assert.Equal(t, string(want), got, "the public API differs from api/v1.txt: if the change is meant, run go test ./internal/apicheck -update and commit the file")
}
