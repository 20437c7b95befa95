package doctable

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// recorder is a testing.TB that records what Check reports.
type recorder struct {
	testing.TB
	errs []string
}

func (r *recorder) Helper() {}

func (r *recorder) Errorf(format string, args ...any) {
	r.errs = append(r.errs, fmt.Sprintf(format, args...))
}

func (r *recorder) Fatal(args ...any) {
	r.errs = append(r.errs, fmt.Sprint(args...))
	runtime.Goexit()
}

const table = "# Operating it\n\n## Defaults\n\n" +
	"| package | Config | field | default | constant |\n" +
	"|---|---|---|---|---|\n" +
	"| p | Config | Interval | 100ms | `defaultInterval` |\n" +
	"| p | Config | Horizon | 2 × Interval (200ms) | `defaultHorizonIntervals` |\n" +
	"| p | Config | Gap | Interval ÷ 10 (10ms) | `defaultGapsPerInterval` |\n" +
	"| p | Config | Safety | Gap (10ms) | — |\n" +
	"| p | Config | Name | `\"hl\"` | `defaultName` |\n" +
	"| p | Config | Keys | 1,048,576 | `defaultKeys` |\n" +
	"| p | Config | Inner.Rate | 0.05 | `defaultRate` |\n" +
	"| p | Config | Clock | a clock of 1ms that New starts | `defaultResolution` |\n" +
	"| q | Config | Other | 1 | `defaultOther` |\n" +
	"\n### Bounds\n\n" +
	"| package | bound | value | constant |\n" +
	"|---|---|---|---|\n" +
	"| p | Window | 366 days | `maxWindow` |\n" +
	"\n## Metrics\n\n| package | Config | field | default | constant |\n|---|---|---|---|---|\n| p | Config | Stray | 1 | — |\n"

const source = `package p

const (
	defaultInterval         = 100 * time.Millisecond
	defaultHorizonIntervals = 2
	defaultGapsPerInterval  = 10
	defaultName             = "hl"
	defaultKeys             = 1 << 20
	defaultRate             = 0.05
	defaultResolution       = time.Millisecond
	maxWindow               = 366 * 24 * time.Hour
	otherConstant           = 3
)
`

type inner struct{ Rate float64 }

type config struct {
	Interval, Horizon, Gap, Safety time.Duration
	Name                           string
	Keys                           int
	Inner                          inner
	Clock                          any
	Extra                          int
}

func filled() config {
	return config{
		Interval: 100 * time.Millisecond, Horizon: 200 * time.Millisecond, Gap: 10 * time.Millisecond,
		Safety: 10 * time.Millisecond, Name: "hl", Keys: 1 << 20, Inner: inner{Rate: 0.05},
	}
}

// pkg is p's declaration, as it agrees with the table and the source.
func pkg(c config) Package {
	return Package{
		Name: "p",
		Defaults: []Default{
			{Config: "Config", Field: "Interval", Const: "defaultInterval", Value: 100 * time.Millisecond, Got: c.Interval},
			{Config: "Config", Field: "Horizon", Const: "defaultHorizonIntervals", Value: 2, Doc: "2 × Interval (200ms)", Got: c.Horizon},
			{Config: "Config", Field: "Gap", Const: "defaultGapsPerInterval", Value: 10, Doc: "Interval ÷ 10 (10ms)", Got: c.Gap},
			{Config: "Config", Field: "Safety", Doc: "Gap (10ms)", Got: c.Safety},
			{Config: "Config", Field: "Name", Const: "defaultName", Value: "hl", Got: c.Name},
			{Config: "Config", Field: "Keys", Const: "defaultKeys", Value: 1 << 20, Got: c.Keys},
			{Config: "Config", Field: "Inner.Rate", Const: "defaultRate", Value: 0.05, Got: c.Inner.Rate},
			{Config: "Config", Field: "Clock", Const: "defaultResolution", Value: time.Millisecond, Doc: "a clock of 1ms that New starts", Got: c.Clock, Built: true},
		},
		Bounds: []Bound{{What: "Window", Const: "maxWindow", Value: 366 * 24 * time.Hour, Doc: "366 days"}},
		Filled: []Filled{{Config: "Config", Zero: config{}, With: c}},
	}
}

// run checks p against doc and src, written to a directory of their own,
// and returns what it reported.
func run(t *testing.T, p Package, doc, src string) []string {
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "operating.md"), []byte(doc), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "p.go"), []byte(src), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "p_test.go"), []byte("package p\n\nconst defaultInTest = 1\n"), 0o644))
	r := &recorder{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		check(r, p, filepath.Join(dir, "operating.md"), dir)
	}()
	<-done
	return r.errs
}

// TestCheck: a package that agrees with its rows passes, rows of other
// packages and of other sections do not count, and each way the table,
// the constants or withDefaults can disagree is reported, naming the row.
func TestCheck(t *testing.T) {
	require.Empty(t, run(t, pkg(filled()), table, source), "the declaration agrees with the table")

	for _, tc := range []struct {
		name     string
		edit     func(p *Package, doc, src *string)
		reported string
	}{
		{"a value differs", func(_ *Package, doc, _ *string) {
			*doc = strings.Replace(*doc, "| 100ms |", "| 256ms |", 1)
		}, `p.Config.Interval: the table says "256ms", the code "100ms"`},
		{"a constant differs", func(_ *Package, doc, _ *string) {
			*doc = strings.Replace(*doc, "`defaultKeys`", "`defaultMaxKeys`", 1)
		}, `the table names constant "defaultMaxKeys", the code "defaultKeys"`},
		{"a row is missing", func(_ *Package, doc, _ *string) {
			*doc = strings.Replace(*doc, "| p | Config | Keys | 1,048,576 | `defaultKeys` |\n", "", 1)
		}, `p.Config.Keys: the default "1,048,576" (constant defaultKeys) has no row`},
		{"a row names no default", func(_ *Package, doc, _ *string) {
			*doc = strings.Replace(*doc, "| q |", "| p | Config | Batch | 256 | `defaultBatch` |\n| q |", 1)
		}, "the row for p Config.Batch names no default of the code"},
		{"a default constant is not declared", func(_ *Package, _, src *string) {
			*src = strings.Replace(*src, "otherConstant", "defaultOther", 1)
		}, "constant defaultOther is no declared default"},
		{"withDefaults fills an undeclared field", func(p *Package, _, _ *string) {
			c := filled()
			c.Extra = 1
			p.Filled[0].With = c
		}, "withDefaults fills in Extra, which no Default declares"},
		{"withDefaults fills a field the test did not declare", func(p *Package, _, _ *string) {
			p.Defaults = p.Defaults[1:]
		}, "withDefaults fills in Interval, which no Default declares"},
		{"withDefaults fills another value", func(p *Package, _, _ *string) {
			p.Defaults[0].Got = 200 * time.Millisecond
		}, "p.Config.Interval: withDefaults fills in 200ms (time.Duration), constant defaultInterval is 100ms"},
		{"withDefaults leaves a default zero", func(p *Package, _, _ *string) {
			p.Defaults[4].Got = ""
		}, "p.Config.Name: withDefaults leaves it zero"},
		{"the table's default differs from the declaration", func(_ *Package, doc, _ *string) {
			*doc = strings.Replace(*doc, "2 × Interval (200ms)", "3 × Interval (200ms)", 1)
		}, `p.Config.Horizon: the table says "3 × Interval (200ms)", the code "2 × Interval (200ms)"`},
		{"a factor differs from its constant", func(p *Package, doc, _ *string) {
			p.Defaults[1].Doc = "3 × Interval (200ms)"
			*doc = strings.Replace(*doc, "2 × Interval (200ms)", "3 × Interval (200ms)", 1)
		}, "the table's factor is 3, constant defaultHorizonIntervals is 2"},
		{"a derived default is not derived", func(p *Package, _, _ *string) {
			p.Defaults[1].Got = 300 * time.Millisecond
		}, "p.Config.Horizon: withDefaults fills in 300ms, not 2 × Interval (100ms)"},
		{"a derived default's value at the defaults differs", func(p *Package, doc, _ *string) {
			p.Defaults[2].Doc = "Interval ÷ 10 (5ms)"
			*doc = strings.Replace(*doc, "(10ms) | `defaultGaps", "(5ms) | `defaultGaps", 1)
		}, `p.Config.Gap: the table gives "5ms" for its value at the defaults, withDefaults 10ms`},
		{"a copied default is not a copy", func(p *Package, _, _ *string) {
			p.Defaults[3].Got = 20 * time.Millisecond
		}, "p.Config.Safety: withDefaults fills in 20ms, not Gap (10ms)"},
		{"a built default is filled", func(p *Package, _, _ *string) {
			p.Defaults[7].Got = "a clock"
		}, "p.Config.Clock: built by New, but withDefaults filled in a clock"},
		{"a bound differs", func(_ *Package, doc, _ *string) {
			*doc = strings.Replace(*doc, "| 366 days |", "| 365 days |", 1)
		}, `p: bound Window: the table says "365 days", the code "366 days"`},
		{"a bound's doc misses its value", func(p *Package, doc, _ *string) {
			p.Bounds[0].Doc = "a year"
			*doc = strings.Replace(*doc, "| 366 days |", "| a year |", 1)
		}, `p: bound Window: "a year" does not give maxWindow's value 366 days`},
		{"a bound row names no bound", func(_ *Package, doc, _ *string) {
			*doc = strings.Replace(*doc, "| p | Window |", "| p | Rules | 2,048 | `maxRules` |\n| p | Window |", 1)
		}, `the bound "Rules" of p is no declared bound of the code`},
		{"two rows for one field", func(_ *Package, doc, _ *string) {
			*doc = strings.Replace(*doc, "| q |", "| p | Config | Keys | 1,048,576 | `defaultKeys` |\n| q |", 1)
		}, "a second row for p Config.Keys"},
		{"no section", func(_ *Package, doc, _ *string) {
			*doc = strings.Replace(*doc, "## Defaults", "## Settings", 1)
		}, `no table of defaults in a section "## Defaults"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, doc, src := pkg(filled()), table, source
			tc.edit(&p, &doc, &src)
			errs := run(t, p, doc, src)
			require.NotEmpty(t, errs, "nothing reported")
			assert.Contains(t, strings.Join(errs, "\n"), tc.reported)
		})
	}
}

// TestFormat: values as the table writes them.
func TestFormat(t *testing.T) {
	for _, tc := range []struct {
		v    any
		want string
	}{
		{100 * time.Millisecond, "100ms"},
		{time.Minute, "1m"},
		{90 * time.Minute, "1h30m"},
		{2 * time.Hour, "2h"},
		{366 * 24 * time.Hour, "366 days"},
		{64, "64"},
		{1 << 20, "1,048,576"},
		{100_000, "100,000"},
		{-1024, "-1,024"},
		{0.05, "0.05"},
		{"X-API-Key", `"X-API-Key"`},
		{time.Month(2), "February"},
	} {
		assert.Equal(t, tc.want, Format(tc.v), "%v", tc.v)
	}
}
