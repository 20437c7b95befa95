package accuracy

import (
	"fmt"
	"html"
	"math"
	"strings"
)

// Series is one line of a chart. Points marked Invalid are drawn hollow.
type Series struct {
	Name    string
	X, Y    []float64
	Invalid []bool
	Color   string
	Dash    bool
	Radius  float64 // of the markers; default 4
}

// Chart is a line chart with a log10 x axis (a linear one with LinearX),
// written as SVG by hand (no plotting dependency).
type Chart struct {
	Title, XLabel, YLabel string
	LogY                  bool
	LinearX               bool
	Series                []Series
}

const (
	chartW, chartH             = 840, 420
	padL, padR, padT, padB     = 80, 270, 40, 50
	plotW, plotH               = chartW - padL - padR, chartH - padT - padB
	fontAttrs                  = `font-family="sans-serif" font-size="12"`
	gridColor, axisColor, text = "#ddd", "#333", "#222"
)

// SVG renders the chart.
func (c Chart) SVG() string {
	xmin, xmax := math.Inf(1), math.Inf(-1)
	ymin, ymax := math.Inf(1), math.Inf(-1)
	fy := func(v float64) float64 {
		if c.LogY {
			return math.Log10(v)
		}
		return v
	}
	fx := func(v float64) float64 {
		if c.LinearX {
			return v
		}
		return math.Log10(v)
	}
	skipX := func(v float64) bool { return !c.LinearX && v <= 0 }
	for _, s := range c.Series {
		for i := range s.X {
			if skipX(s.X[i]) || math.IsNaN(s.Y[i]) || math.IsInf(s.Y[i], 0) || (c.LogY && s.Y[i] <= 0) {
				continue
			}
			xmin, xmax = min(xmin, fx(s.X[i])), max(xmax, fx(s.X[i]))
			ymin, ymax = min(ymin, fy(s.Y[i])), max(ymax, fy(s.Y[i]))
		}
	}
	if math.IsInf(xmin, 1) {
		xmin, xmax, ymin, ymax = 0, 1, 0, 1
	}
	if xmax == xmin {
		xmin, xmax = xmin-0.5, xmax+0.5
	}
	if c.LogY {
		ymin, ymax = math.Floor(ymin), math.Ceil(ymax)
	} else {
		ymin = min(ymin, 0)
		lo, hi, _ := niceRange(ymin, ymax)
		ymin, ymax = lo, hi
	}
	if ymax == ymin {
		ymax = ymin + 1
	}
	px := func(x float64) float64 { return padL + (fx(x)-xmin)/(xmax-xmin)*plotW }
	py := func(y float64) float64 { return padT + (1-(fy(y)-ymin)/(ymax-ymin))*plotH }

	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d">`+"\n", chartW, chartH, chartW, chartH)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	fmt.Fprintf(&b, `<text x="%d" y="22" font-family="sans-serif" font-size="15" fill="%s">%s</text>`+"\n", padL, text, html.EscapeString(c.Title))
	// x grid: decades, or round steps on a linear axis.
	xstep, xfirst := 1.0, math.Ceil(xmin)
	if c.LinearX {
		_, _, xstep = niceRange(xmin, xmax)
		xfirst = math.Ceil(xmin/xstep) * xstep
	}
	for e := xfirst; e <= xmax+1e-9; e += xstep {
		x := padL + (e-xmin)/(xmax-xmin)*plotW
		label := group(math.Pow(10, e))
		if c.LinearX {
			label = tickLabel(e)
		}
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="%s"/>`+"\n", x, padT, x, padT+plotH, gridColor)
		fmt.Fprintf(&b, `<text x="%.1f" y="%d" %s fill="%s" text-anchor="middle">%s</text>`+"\n", x, padT+plotH+18, fontAttrs, text, label)
	}
	// y grid.
	var ticks []float64
	if c.LogY {
		for e := ymin; e <= ymax+1e-9; e++ {
			ticks = append(ticks, math.Pow(10, e))
		}
	} else {
		_, _, step := niceRange(ymin, ymax)
		for v := ymin; v <= ymax+step/1e6; v += step {
			ticks = append(ticks, v)
		}
	}
	for _, t := range ticks {
		y := py(t)
		fmt.Fprintf(&b, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="%s"/>`+"\n", padL, y, padL+plotW, y, gridColor)
		fmt.Fprintf(&b, `<text x="%d" y="%.1f" %s fill="%s" text-anchor="end">%s</text>`+"\n", padL-6, y+4, fontAttrs, text, tickLabel(t))
	}
	if !c.LogY && ymin < 0 {
		fmt.Fprintf(&b, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="%s"/>`+"\n", padL, py(0), padL+plotW, py(0), axisColor)
	}
	fmt.Fprintf(&b, `<rect x="%d" y="%d" width="%d" height="%d" fill="none" stroke="%s"/>`+"\n", padL, padT, plotW, plotH, axisColor)
	fmt.Fprintf(&b, `<text x="%d" y="%d" %s fill="%s" text-anchor="middle">%s</text>`+"\n", padL+plotW/2, chartH-10, fontAttrs, text, html.EscapeString(c.XLabel))
	fmt.Fprintf(&b, `<text transform="translate(18 %d) rotate(-90)" %s fill="%s" text-anchor="middle">%s</text>`+"\n", padT+plotH/2, fontAttrs, text, html.EscapeString(c.YLabel))
	// Series.
	for i, s := range c.Series {
		var pts []string
		for j := range s.X {
			if skipX(s.X[j]) || math.IsNaN(s.Y[j]) || math.IsInf(s.Y[j], 0) || (c.LogY && s.Y[j] <= 0) {
				continue
			}
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", px(s.X[j]), py(s.Y[j])))
		}
		dash := ""
		if s.Dash {
			dash = ` stroke-dasharray="6 4"`
		}
		if len(pts) > 0 {
			fmt.Fprintf(&b, `<polyline points="%s" fill="none" stroke="%s" stroke-width="2"%s/>`+"\n", strings.Join(pts, " "), s.Color, dash)
		}
		for j := range s.X {
			if skipX(s.X[j]) || math.IsNaN(s.Y[j]) || math.IsInf(s.Y[j], 0) || (c.LogY && s.Y[j] <= 0) {
				continue
			}
			fill := s.Color
			if j < len(s.Invalid) && s.Invalid[j] {
				fill = "white"
			}
			r := s.Radius
			if r == 0 {
				r = 4
			}
			fmt.Fprintf(&b, `<circle cx="%.1f" cy="%.1f" r="%.0f" fill="%s" stroke="%s" stroke-width="1.5"/>`+"\n", px(s.X[j]), py(s.Y[j]), r, fill, s.Color)
		}
		ly := padT + 10 + i*20
		fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="%s" stroke-width="2"%s/>`+"\n", padL+plotW+12, ly, padL+plotW+40, ly, s.Color, dash)
		fmt.Fprintf(&b, `<text x="%d" y="%d" %s fill="%s">%s</text>`+"\n", padL+plotW+46, ly+4, fontAttrs, text, html.EscapeString(s.Name))
	}
	if c.anyInvalid() {
		ly := padT + 10 + len(c.Series)*20 + 10
		fmt.Fprintf(&b, `<circle cx="%d" cy="%d" r="4" fill="white" stroke="%s" stroke-width="1.5"/>`+"\n", padL+plotW+26, ly, axisColor)
		fmt.Fprintf(&b, `<text x="%d" y="%d" %s fill="%s">invalid run</text>`+"\n", padL+plotW+46, ly+4, fontAttrs, text)
	}
	b.WriteString("</svg>\n")
	return b.String()
}

// niceRange widens [lo, hi] to round ticks, about five of them.
func niceRange(lo, hi float64) (float64, float64, float64) {
	span := hi - lo
	if span <= 0 {
		span = math.Max(math.Abs(hi), 1)
	}
	raw := span / 5
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	step := mag
	for _, m := range []float64{1, 2, 2.5, 5, 10} {
		if m*mag >= raw {
			step = m * mag
			break
		}
	}
	return math.Floor(lo/step) * step, math.Ceil(hi/step) * step, step
}

func tickLabel(v float64) string {
	if math.Abs(v) >= 1000 || (v != 0 && math.Abs(v) < 0.01) {
		return fmt.Sprintf("%g", v)
	}
	return strings.TrimRight(strings.TrimRight(fmt.Sprintf("%.2f", v), "0"), ".")
}

// group writes an integer with thousands separators.
func group(v float64) string {
	s := fmt.Sprintf("%.0f", v)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

// anyInvalid reports whether a point of c is marked Invalid: the legend
// then says what a hollow marker means.
func (c Chart) anyInvalid() bool {
	for _, s := range c.Series {
		for _, v := range s.Invalid {
			if v {
				return true
			}
		}
	}
	return false
}
