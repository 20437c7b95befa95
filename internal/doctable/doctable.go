// Package doctable holds the Defaults section of docs/operating.md against
// the code. Each package with a Config calls Check from a test of its own
// package, which sees its unexported constants and its withDefaults: every
// default the code fills in has a row, every row names a default the code
// has, and each row's value and constant are the code's.
package doctable

import (
	"bufio"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Default is one default of a Config, as a package's test declares it.
type Default struct {
	Config string // the Config's name: "Config", "SyncConfig", …
	Field  string // the field's path: "Shards", "Keyspace.Prefix"
	// When qualifies a default that depends on how the Config is used:
	// the table's field cell is then "Field (When)".
	When string
	// Const names the constant that holds the default, and Value is its
	// value; Const is "" for a default that is not a constant
	// (slog.Default(), a value derived from another field).
	Const string
	Value any
	// Doc is the table's default cell. "" means Value as Format writes it.
	// A default derived from another field reads "N × Field", "Field ÷ N"
	// (N the constant) or "Field", with its value at the defaults in
	// parentheses: "2 × Interval (200ms)".
	Doc string
	// Got is what withDefaults fills in for a zero field.
	Got any
	// Built marks a default New builds (a clock it starts, a random ID),
	// which withDefaults leaves zero.
	Built bool
}

// Bound is a bound of validation, as a package's test declares it.
type Bound struct {
	What  string // the table's bound cell: "Limit.Window"
	Const string // the constant's name
	Value any    // its value
	Doc   string // the table's value cell, which contains Value as Format writes it
}

// Filled is a Config before and after withDefaults: every field that
// withDefaults changed must be declared a Default.
type Filled struct {
	Config string
	Zero   any
	With   any
}

// Package is what a package's test declares.
type Package struct {
	Name     string // the package's name, as the table's package column writes it
	Defaults []Default
	Bounds   []Bound
	Filled   []Filled
}

// Check holds p against docs/operating.md (found in the docs directory of
// the first parent of the working directory that has one) and against the
// source of the package in the working directory, and reports each
// difference on t.
func Check(t testing.TB, p Package) {
	t.Helper()
	doc, err := findDoc()
	if err != nil {
		t.Fatal(err)
	}
	check(t, p, doc, ".")
}

func findDoc() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		doc := filepath.Join(dir, "docs", "operating.md")
		if _, err := os.Stat(doc); err == nil {
			return doc, nil
		}
		up := filepath.Dir(dir)
		if up == dir {
			return "", fmt.Errorf("doctable: no docs/operating.md above the working directory")
		}
		dir = up
	}
}

// check is Check with the table's file and the package's directory given.
func check(t testing.TB, p Package, doc, dir string) {
	t.Helper()
	defaults, bounds, err := readTables(doc)
	if err != nil {
		t.Fatal(err)
	}
	consts, err := constNames(dir)
	if err != nil {
		t.Fatal(err)
	}
	checkDefaults(t, p, rowsOf(defaults, p.Name), consts)
	checkBounds(t, p, rowsOf(bounds, p.Name), consts)
}

// row is one row of a table, its cells by header, code spans unquoted.
type row struct {
	line  int
	cells map[string]string
}

func rowsOf(rows []row, pkg string) []row {
	var out []row
	for _, r := range rows {
		if r.cells["package"] == pkg {
			out = append(out, r)
		}
	}
	return out
}

// readTables returns the rows of the two tables of the section "Defaults":
// the defaults (a header with "default") and the bounds (one with "bound").
func readTables(doc string) (defaults, bounds []row, err error) {
	f, err := os.Open(doc)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	in := false
	var header []string
	var table *[]row
	for n := 1; sc.Scan(); n++ {
		l := strings.TrimSpace(sc.Text())
		if strings.HasPrefix(l, "## ") {
			in = l == "## Defaults"
			continue
		}
		if !in {
			continue
		}
		if !strings.HasPrefix(l, "|") {
			header, table = nil, nil
			continue
		}
		cells := splitRow(l)
		switch {
		case header == nil:
			header = cells
			for _, h := range header {
				switch h {
				case "default":
					table = &defaults
				case "bound":
					table = &bounds
				}
			}
		case strings.Trim(l, "|-: ") == "":
			// the delimiter row
		case table != nil:
			if len(cells) != len(header) {
				return nil, nil, fmt.Errorf("%s:%d: %d cells, the header has %d", doc, n, len(cells), len(header))
			}
			r := row{line: n, cells: map[string]string{}}
			for i, h := range header {
				r.cells[h] = cells[i]
			}
			*table = append(*table, r)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, nil, err
	}
	if len(defaults) == 0 {
		return nil, nil, fmt.Errorf("%s: no table of defaults in a section \"## Defaults\"", doc)
	}
	return defaults, bounds, nil
}

// splitRow returns a table row's cells, trimmed, with code spans' backticks
// removed.
func splitRow(l string) []string {
	l = strings.TrimSuffix(strings.TrimPrefix(l, "|"), "|")
	cells := strings.Split(l, "|")
	for i, c := range cells {
		cells[i] = strings.TrimSpace(strings.ReplaceAll(c, "`", ""))
	}
	return cells
}

// constNames returns the constants declared in the Go files of dir but
// its tests.
func constNames(dir string) (map[string]bool, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		return nil, err
	}
	fset := token.NewFileSet()
	out := map[string]bool{}
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.SkipObjectResolution)
		if err != nil {
			return nil, err
		}
		for _, d := range f.Decls {
			g, ok := d.(*ast.GenDecl)
			if !ok || g.Tok != token.CONST {
				continue
			}
			for _, s := range g.Specs {
				for _, id := range s.(*ast.ValueSpec).Names {
					out[id.Name] = true
				}
			}
		}
	}
	return out, nil
}

// fieldCell is d's field as the table writes it.
func (d Default) fieldCell() string {
	if d.When != "" {
		return d.Field + " (" + d.When + ")"
	}
	return d.Field
}

func (d Default) doc() string {
	if d.Doc != "" {
		return d.Doc
	}
	return Format(d.Value)
}

func constCell(name string) string {
	if name == "" {
		return "—"
	}
	return name
}

var (
	times   = regexp.MustCompile(`^(\d+) × ([A-Z][\w.]*)(?: \((.*)\))?$`)
	divided = regexp.MustCompile(`^([A-Z][\w.]*) ÷ (\d+)(?: \((.*)\))?$`)
	same    = regexp.MustCompile(`^([A-Z][\w.]*)(?: \((.*)\))?$`)
)

// checkDefaults holds p's defaults against rows, the rows of p's package in
// the table of defaults, and consts, the constants p's source declares.
func checkDefaults(t testing.TB, p Package, rows []row, consts map[string]bool) {
	t.Helper()
	byKey := rowsByField(t, p.Name, rows)
	declared := map[string]bool{}
	for _, d := range p.Defaults {
		name := p.Name + "." + d.Config + "." + d.fieldCell()
		k := d.Config + "." + d.fieldCell()
		declared[k] = true
		if d.Const != "" {
			declared["const "+d.Const] = true
			if !consts[d.Const] {
				t.Errorf("%s: constant %s is not declared in package %s", name, d.Const, p.Name)
			}
		}
		r, ok := byKey[k]
		switch {
		case !ok:
			t.Errorf("%s: the default %q (constant %s) has no row in docs/operating.md's Defaults table", name, d.doc(), constCell(d.Const))
		default:
			if got := r.cells["default"]; got != d.doc() {
				t.Errorf("docs/operating.md:%d: %s: the table says %q, the code %q", r.line, name, got, d.doc())
			}
			if got := r.cells["constant"]; got != constCell(d.Const) {
				t.Errorf("docs/operating.md:%d: %s: the table names constant %q, the code %q", r.line, name, got, constCell(d.Const))
			}
		}
		checkDefaultValue(t, p, name, d)
	}
	checkUndeclared(t, p, rows, consts, declared)
}

// rowsByField returns the rows of package pkg by "Config.field", and
// reports a field with two.
func rowsByField(t testing.TB, pkg string, rows []row) map[string]row {
	t.Helper()
	byKey := map[string]row{}
	for _, r := range rows {
		k := r.cells["Config"] + "." + r.cells["field"]
		if _, dup := byKey[k]; dup {
			t.Errorf("docs/operating.md:%d: a second row for %s %s", r.line, pkg, k)
		}
		byKey[k] = r
	}
	return byKey
}

// find returns p's default for field of config under when, or one that
// holds whatever the use (When ""), or nil.
func (p Package) find(config, field, when string) *Default {
	for i := range p.Defaults {
		d := &p.Defaults[i]
		if d.Config == config && d.Field == field && (d.When == when || d.When == "") {
			return d
		}
	}
	return nil
}

// checkDefaultValue holds what withDefaults fills in for d, named name in
// the errors, against d's cell: a default New builds is left zero; one
// derived from another field ("N × Field", "Field ÷ N", "Field") is that
// field's default so derived; any other is its constant's value.
func checkDefaultValue(t testing.TB, p Package, name string, d Default) {
	t.Helper()
	if d.Built {
		if !isZero(d.Got) {
			t.Errorf("%s: built by New, but withDefaults filled in %v", name, d.Got)
		}
		if d.Const != "" && !strings.Contains(d.doc(), Format(d.Value)) {
			t.Errorf("%s: the default %q does not give %s's value %s", name, d.doc(), d.Const, Format(d.Value))
		}
		return
	}
	if isZero(d.Got) {
		t.Errorf("%s: withDefaults leaves it zero", name)
		return
	}
	base := func(field string) *Default {
		b := p.find(d.Config, field, d.When)
		if b == nil {
			t.Errorf("%s: derived from %s, which declares no default", name, field)
		}
		return b
	}
	shown := func(v string) {
		if v != "" && v != Format(d.Got) {
			t.Errorf("%s: the table gives %q for its value at the defaults, withDefaults %s", name, v, Format(d.Got))
		}
	}
	doc := d.doc()
	if m := times.FindStringSubmatch(doc); m != nil {
		checkFactor(t, name, d, m[1])
		if b := base(m[2]); b != nil && asInt(d.Got) != mustAtoi(m[1])*asInt(b.Got) {
			t.Errorf("%s: withDefaults fills in %s, not %s × %s (%s)", name, Format(d.Got), m[1], m[2], Format(b.Got))
		}
		shown(m[3])
		return
	}
	if m := divided.FindStringSubmatch(doc); m != nil {
		checkFactor(t, name, d, m[2])
		if b := base(m[1]); b != nil && asInt(d.Got) != asInt(b.Got)/mustAtoi(m[2]) {
			t.Errorf("%s: withDefaults fills in %s, not %s ÷ %s (%s)", name, Format(d.Got), m[1], m[2], Format(b.Got))
		}
		shown(m[3])
		return
	}
	if m := same.FindStringSubmatch(doc); m != nil && d.Const == "" && p.find(d.Config, m[1], d.When) != nil {
		if b := base(m[1]); !reflect.DeepEqual(d.Got, b.Got) {
			t.Errorf("%s: withDefaults fills in %s, not %s (%s)", name, Format(d.Got), m[1], Format(b.Got))
		}
		shown(m[2])
		return
	}
	if d.Const != "" && !equal(d.Got, d.Value) {
		t.Errorf("%s: withDefaults fills in %s (%T), constant %s is %s (%T)", name, Format(d.Got), d.Got, d.Const, Format(d.Value), d.Value)
	}
}

// checkUndeclared reports what the table or the code has that p does not
// declare: a row naming no default, a constant named default… that is no
// declared default's, a field withDefaults fills in (Filled) that no
// Default names. declared holds the "Config.field" and "const Name" of
// p's defaults.
func checkUndeclared(t testing.TB, p Package, rows []row, consts, declared map[string]bool) {
	t.Helper()
	for _, r := range rows {
		if !declared[r.cells["Config"]+"."+r.cells["field"]] {
			t.Errorf("docs/operating.md:%d: the row for %s %s.%s names no default of the code", r.line, p.Name, r.cells["Config"], r.cells["field"])
		}
	}
	for name := range consts {
		if strings.HasPrefix(name, "default") && !declared["const "+name] {
			t.Errorf("package %s: constant %s is no declared default: give it a row (and a Default in the test), or another name", p.Name, name)
		}
	}
	for _, f := range p.Filled {
		for _, path := range changed(reflect.ValueOf(f.Zero), reflect.ValueOf(f.With), "") {
			if !anyWhen(p.Defaults, f.Config, path) {
				t.Errorf("%s.%s: withDefaults fills in %s, which no Default declares (nor the table)", p.Name, f.Config, path)
			}
		}
	}
}

func anyWhen(ds []Default, config, field string) bool {
	for _, d := range ds {
		if d.Config == config && d.Field == field {
			return true
		}
	}
	return false
}

// checkFactor reports a derived default whose factor in the table is not
// its constant's value.
func checkFactor(t testing.TB, name string, d Default, n string) {
	t.Helper()
	if d.Const == "" {
		t.Errorf("%s: a factor (%s) needs a constant", name, n)
		return
	}
	if asInt(d.Value) != mustAtoi(n) {
		t.Errorf("%s: the table's factor is %s, constant %s is %s", name, n, d.Const, Format(d.Value))
	}
}

func checkBounds(t testing.TB, p Package, rows []row, consts map[string]bool) {
	t.Helper()
	declared := map[string]bool{}
	for _, b := range p.Bounds {
		name := p.Name + ": bound " + b.What
		declared[b.What] = true
		if !consts[b.Const] {
			t.Errorf("%s: constant %s is not declared in package %s", name, b.Const, p.Name)
		}
		if !strings.Contains(b.Doc, Format(b.Value)) {
			t.Errorf("%s: %q does not give %s's value %s", name, b.Doc, b.Const, Format(b.Value))
		}
		var r *row
		for i := range rows {
			if rows[i].cells["bound"] == b.What {
				r = &rows[i]
			}
		}
		if r == nil {
			t.Errorf("%s (%s, %s) has no row in docs/operating.md's table of bounds", name, b.Doc, b.Const)
			continue
		}
		if got := r.cells["value"]; got != b.Doc {
			t.Errorf("docs/operating.md:%d: %s: the table says %q, the code %q", r.line, name, got, b.Doc)
		}
		if got := r.cells["constant"]; got != b.Const {
			t.Errorf("docs/operating.md:%d: %s: the table names constant %q, the code %q", r.line, name, got, b.Const)
		}
	}
	for _, r := range rows {
		if !declared[r.cells["bound"]] {
			t.Errorf("docs/operating.md:%d: the bound %q of %s is no declared bound of the code", r.line, r.cells["bound"], p.Name)
		}
	}
}

// changed returns the paths of the fields that differ between two values of
// one struct type, descending into struct fields (not pointers).
func changed(a, b reflect.Value, prefix string) []string {
	var out []string
	for i := range a.NumField() {
		f := a.Type().Field(i)
		if !f.IsExported() {
			continue
		}
		path := prefix + f.Name
		x, y := a.Field(i), b.Field(i)
		if f.Type.Kind() == reflect.Struct {
			out = append(out, changed(x, y, path+".")...)
			continue
		}
		if !reflect.DeepEqual(x.Interface(), y.Interface()) {
			out = append(out, path)
		}
	}
	return out
}

// equal reports whether a and b are equal: integers of different types (a
// field's int64, an untyped constant's int) by value, unless one is a
// duration.
func equal(a, b any) bool {
	_, da := a.(time.Duration)
	_, db := b.(time.Duration)
	if x, y := asInt(a), asInt(b); x != noInt && y != noInt && da == db {
		return x == y
	}
	return reflect.DeepEqual(a, b)
}

// isZero reports whether v is its type's zero value. A value of an empty
// struct type, which is all zero, is not: it was put in an interface field
// (clocktest.Wall{} as a Clock).
func isZero(v any) bool {
	if v == nil {
		return true
	}
	rv := reflect.ValueOf(v)
	if rv.Kind() == reflect.Struct && rv.NumField() == 0 {
		return false
	}
	return rv.IsZero()
}

// asInt returns an integer or a duration as an int64.
func asInt(v any) int64 {
	rv := reflect.ValueOf(v)
	switch rv.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return rv.Int()
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return int64(rv.Uint())
	}
	return noInt
}

// noInt is what asInt returns for a value that is not an integer.
const noInt = -1 << 63

func mustAtoi(s string) int64 {
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		panic(err)
	}
	return n
}

// Format returns a value as the tables write it: a duration as Go writes
// it without zero units ("1m", not "1m0s"; whole days as "366 days"), an
// integer with thousands separated by commas, a string quoted.
func Format(v any) string {
	switch v := v.(type) {
	case time.Duration:
		if v > 0 && v%(24*time.Hour) == 0 {
			return strconv.FormatInt(int64(v/(24*time.Hour)), 10) + " days"
		}
		s := v.String()
		if strings.HasSuffix(s, "m0s") {
			s = strings.TrimSuffix(s, "0s")
		}
		if strings.HasSuffix(s, "h0m") {
			s = strings.TrimSuffix(s, "0m")
		}
		return s
	case string:
		return strconv.Quote(v)
	case float32, float64:
		return fmt.Sprint(v)
	}
	rv := reflect.ValueOf(v)
	switch rv.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		if _, named := v.(fmt.Stringer); !named {
			return group(asInt(v))
		}
	}
	return fmt.Sprint(v)
}

// group writes n with its thousands separated by commas.
func group(n int64) string {
	s := strconv.FormatInt(n, 10)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}
