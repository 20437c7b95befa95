// Package apicheck lists the exported API of a Go package from its source,
// one line per name, as Go's own api files do: the test of this package
// compares the module's public packages with the golden file api/v1.txt, so
// that every change to the surface is deliberate and visible in review.
package apicheck

import (
	"bytes"
	"fmt"
	"go/ast"
	"go/build"
	"go/parser"
	"go/printer"
	"go/token"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// Package returns the exported API of the package in dir (its files that
// are not tests), sorted, each line starting "pkg <name>, ", and how many
// names it exports: top-level types, functions, constants and variables,
// and the exported methods of exported types. Struct fields and interface
// methods have lines of their own but are not names.
func Package(dir, name string) (lines []string, names int, err error) {
	fset := token.NewFileSet()
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, 0, err
	}
	var files []*ast.File
	for _, e := range ents {
		n := e.Name()
		if e.IsDir() || !strings.HasSuffix(n, ".go") || strings.HasSuffix(n, "_test.go") {
			continue
		}
		// The files this platform builds: the API is the same on every
		// platform the public packages build on.
		if ok, err := build.Default.MatchFile(dir, n); err != nil || !ok {
			if err != nil {
				return nil, 0, err
			}
			continue
		}
		f, err := parser.ParseFile(fset, filepath.Join(dir, n), nil, parser.SkipObjectResolution)
		if err != nil {
			return nil, 0, err
		}
		files = append(files, f)
	}
	p := &lister{fset: fset, prefix: "pkg " + name + ", ", types: map[string]bool{}}
	for _, f := range files {
		for _, d := range f.Decls {
			if g, ok := d.(*ast.GenDecl); ok && g.Tok == token.TYPE {
				for _, s := range g.Specs {
					if ts := s.(*ast.TypeSpec); ts.Name.IsExported() {
						p.types[ts.Name.Name] = true
					}
				}
			}
		}
	}
	for _, f := range files {
		for _, d := range f.Decls {
			p.decl(d)
		}
	}
	sort.Strings(p.lines)
	return p.lines, p.names, nil
}

type lister struct {
	fset   *token.FileSet
	prefix string
	types  map[string]bool
	lines  []string
	names  int
}

func (p *lister) add(format string, args ...any) {
	p.lines = append(p.lines, p.prefix+fmt.Sprintf(format, args...))
}

// expr prints e as written, on one line.
func (p *lister) expr(e ast.Expr) string {
	var b bytes.Buffer
	printer.Fprint(&b, p.fset, e)
	return strings.Join(strings.Fields(b.String()), " ")
}

func (p *lister) decl(d ast.Decl) {
	switch d := d.(type) {
	case *ast.FuncDecl:
		if !d.Name.IsExported() {
			return
		}
		sig := p.signature(d.Type)
		if d.Recv == nil {
			name := d.Name.Name
			if d.Type.TypeParams != nil {
				name += "[" + p.fields(d.Type.TypeParams, true) + "]"
			}
			p.names++
			p.add("func %s%s", name, sig)
			return
		}
		recv := d.Recv.List[0].Type
		base := recv
		if s, ok := base.(*ast.StarExpr); ok {
			base = s.X
		}
		switch b := base.(type) {
		case *ast.IndexExpr:
			base = b.X
		case *ast.IndexListExpr:
			base = b.X
		}
		if id, ok := base.(*ast.Ident); ok && p.types[id.Name] {
			p.names++
			p.add("method (%s) %s%s", p.expr(recv), d.Name.Name, sig)
		}
	case *ast.GenDecl:
		var last ast.Expr // a const's type carries on to the names after it
		for _, s := range d.Specs {
			switch s := s.(type) {
			case *ast.TypeSpec:
				if s.Name.IsExported() {
					p.names++
					p.typ(s)
				}
			case *ast.ValueSpec:
				if s.Type != nil || len(s.Values) > 0 {
					last = s.Type
				}
				for i, n := range s.Names {
					if !n.IsExported() {
						continue
					}
					p.names++
					kind := strings.ToLower(d.Tok.String())
					switch {
					case last != nil:
						p.add("%s %s %s", kind, n.Name, p.expr(last))
					case d.Tok == token.CONST && i < len(s.Values):
						// An untyped constant's value is its API: a
						// default, a bound.
						p.add("%s %s = %s", kind, n.Name, p.expr(s.Values[i]))
					default:
						p.add("%s %s", kind, n.Name)
					}
				}
			}
		}
	}
}

func (p *lister) typ(s *ast.TypeSpec) {
	name := s.Name.Name
	if s.TypeParams != nil {
		name += "[" + p.fields(s.TypeParams, true) + "]"
	}
	if s.Assign.IsValid() {
		p.add("type %s = %s", name, p.expr(s.Type))
		return
	}
	switch t := s.Type.(type) {
	case *ast.StructType:
		p.add("type %s struct", name)
		for _, f := range t.Fields.List {
			if len(f.Names) == 0 {
				if id := embedded(f.Type); id != "" && ast.IsExported(id) {
					p.add("type %s struct, embedded %s", name, p.expr(f.Type))
				}
				continue
			}
			for _, n := range f.Names {
				if n.IsExported() {
					p.add("type %s struct, %s %s", name, n.Name, p.expr(f.Type))
				}
			}
		}
	case *ast.InterfaceType:
		p.add("type %s interface { %s }", name, p.ifaceNames(t))
		for _, m := range t.Methods.List {
			if ft, ok := m.Type.(*ast.FuncType); ok {
				for _, n := range m.Names {
					if n.IsExported() {
						p.add("type %s interface, %s%s", name, n.Name, p.signature(ft))
					}
				}
			} else {
				p.add("type %s interface, embedded %s", name, p.expr(m.Type))
			}
		}
	default:
		p.add("type %s %s", name, p.expr(s.Type))
	}
}

// ifaceNames lists an interface's method names, unexported ones too, which
// decide who can implement it.
func (p *lister) ifaceNames(t *ast.InterfaceType) string {
	var ns []string
	for _, m := range t.Methods.List {
		for _, n := range m.Names {
			ns = append(ns, n.Name)
		}
		if len(m.Names) == 0 {
			ns = append(ns, p.expr(m.Type))
		}
	}
	return strings.Join(ns, ", ")
}

func embedded(e ast.Expr) string {
	switch t := e.(type) {
	case *ast.StarExpr:
		return embedded(t.X)
	case *ast.Ident:
		return t.Name
	case *ast.SelectorExpr:
		return t.Sel.Name
	}
	return ""
}

// signature prints a function type's parameters and results without their
// names: renaming a parameter does not change the API.
func (p *lister) signature(t *ast.FuncType) string {
	s := "(" + p.fields(t.Params, false) + ")"
	if t.Results != nil && len(t.Results.List) > 0 {
		r := p.fields(t.Results, false)
		if len(t.Results.List) == 1 && len(t.Results.List[0].Names) <= 1 {
			s += " " + r
		} else {
			s += " (" + r + ")"
		}
	}
	return s
}

func (p *lister) fields(l *ast.FieldList, named bool) string {
	if l == nil {
		return ""
	}
	var parts []string
	for _, f := range l.List {
		typ := p.expr(f.Type)
		n := len(f.Names)
		if n == 0 {
			n = 1
		}
		for i := 0; i < n; i++ {
			if named && len(f.Names) > 0 {
				parts = append(parts, f.Names[i].Name+" "+typ)
			} else {
				parts = append(parts, typ)
			}
		}
	}
	return strings.Join(parts, ", ")
}
