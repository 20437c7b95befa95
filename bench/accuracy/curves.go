package accuracy

import "slices"

// CurveLimits and CurveNodes are the grid of the curves.
var (
	CurveLimits = []int64{10, 100, 1000, 10000}
	CurveNodes  = []int{2, 8}
	CurveModes  = []string{ModeHybrid, ModeCentral, ModeNaive}
)

// CurveSpecs returns the runs of the curves: uniform workload (10 × L),
// fixed window, for every L, N and mode of the grid, windows each. The
// point (L = 10,000, N = 8) is left out when skip says the main table has
// it.
func CurveSpecs(windows int, skip func(mode string, L int64, N int) bool) []Spec {
	var out []Spec
	for _, n := range CurveNodes {
		for _, l := range CurveLimits {
			for _, m := range CurveModes {
				if skip != nil && skip(m, l, n) {
					continue
				}
				s := NewSpec(m, AlgoFixed, WorkUniform, l, n, windows)
				s.Set = SetCurve
				s.ID = "curve-" + s.ID
				out = append(out, s)
			}
		}
	}
	return out
}

// curvePoint returns the result for (mode, L, N) on the curves: a curve run,
// or the main table's uniform fixed-window run.
func curvePoint(results []*Result, mode string, L int64, N int) *Result {
	if r := find(results, SetCurve, mode, AlgoFixed, WorkUniform, L, N); r != nil {
		return r
	}
	return find(results, SetMain, mode, AlgoFixed, WorkUniform, L, N)
}

// CurveCharts returns the three charts of the curves: over-admission (the
// worst window), false rejections, and scripts per decision, against L, one
// line per mode and N.
func CurveCharts(results []*Result) (over, falseRej, scripts Chart) {
	colors := map[string]string{ModeHybrid: "#1f77b4", ModeCentral: "#2ca02c", ModeNaive: "#d62728"}
	over = Chart{Title: "Over-admission, worst 1 s window (uniform, 10 × L, fixed window)", XLabel: "L (requests per second)", YLabel: "max over windows of admitted ÷ L − 1 (%)"}
	falseRej = Chart{Title: "False rejections (uniform, 10 × L, fixed window)", XLabel: "L (requests per second)", YLabel: "% of the exact replay's admissions"}
	scripts = Chart{Title: "Redis scripts per decision (uniform, 10 × L, fixed window)", XLabel: "L (requests per second)", YLabel: "EVALSHA + EVAL per decision", LogY: true}
	// Hybrid last, on top; central's markers larger, so that lines on one
	// another stay visible.
	for _, m := range []string{ModeCentral, ModeNaive, ModeHybrid} {
		for _, n := range CurveNodes {
			name := m + ", N=" + itoa(n)
			so := Series{Name: name, Color: colors[m], Dash: n == 2}
			if m == ModeCentral {
				so.Radius = 7
			}
			sf, ss := so, so
			for _, l := range CurveLimits {
				r := curvePoint(results, m, l, n)
				if r == nil {
					continue
				}
				if r.ModeRun != m {
					so.Name = name + " (ran " + r.ModeRun + " at small L)"
					sf.Name, ss.Name = so.Name, so.Name
				}
				x := float64(l)
				so.X, so.Y, so.Invalid = append(so.X, x), append(so.Y, 100*r.Over.Max), append(so.Invalid, !r.Valid)
				sf.X, sf.Y, sf.Invalid = append(sf.X, x), append(sf.Y, r.FalseRejPct), append(sf.Invalid, !r.Valid)
				ss.X, ss.Y, ss.Invalid = append(ss.X, x), append(ss.Y, r.ScriptsPerDecision), append(ss.Invalid, !r.Valid)
			}
			if len(so.X) > 0 {
				over.Series = append(over.Series, so)
				falseRej.Series = append(falseRej.Series, sf)
				scripts.Series = append(scripts.Series, ss)
			}
		}
	}
	return over, falseRej, scripts
}

// CurveResults returns the results on the curves, in grid order.
func CurveResults(results []*Result) []*Result {
	var out []*Result
	for _, n := range CurveNodes {
		for _, l := range CurveLimits {
			for _, m := range CurveModes {
				if r := curvePoint(results, m, l, n); r != nil && !slices.Contains(out, r) {
					out = append(out, r)
				}
			}
		}
	}
	return out
}

func itoa(n int) string {
	if n < 10 {
		return string(rune('0' + n))
	}
	return itoa(n/10) + string(rune('0'+n%10))
}
