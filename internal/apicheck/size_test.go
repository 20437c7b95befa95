package apicheck_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The most lines a library file, and a function in it, may have: code a
// reader can hold at once.
const (
	maxFileLines = 600
	maxFuncLines = 80
)

// TestCodeSize holds the library's files (the module's packages but its
// tests, examples, commands and the bench module) to maxFileLines and its
// functions, from the func line to the closing brace, to maxFuncLines.
func TestCodeSize(t *testing.T) {
	root := filepath.Join("..", "..")
	fset := token.NewFileSet()
	files := 0
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if d.IsDir() {
			switch rel {
			case "bench", "examples", filepath.Join("internal", "cmd"):
				return filepath.SkipDir
			}
			if strings.HasPrefix(d.Name(), ".") && rel != "." || d.Name() == "testdata" {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		files++
		lines := fset.File(f.Pos()).LineCount()
		assert.LessOrEqual(t, lines, maxFileLines, "%s: lines", rel)
		for _, decl := range f.Decls {
			fd, ok := decl.(*ast.FuncDecl)
			if !ok || fd.Body == nil {
				continue
			}
			n := fset.Position(fd.End()).Line - fset.Position(fd.Pos()).Line + 1
			assert.LessOrEqual(t, n, maxFuncLines, "%s: func %s: lines", rel, fd.Name.Name)
		}
		return nil
	})
	require.NoError(t, err)
	require.Greater(t, files, 50, "library files read")
}
