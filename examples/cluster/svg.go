package main

import (
	"fmt"
	"html"
	"math"
	"strings"
)

// The timeline's geometry: one panel per watched client, stacked.
const (
	svgW, panelH           = 860, 230
	svgPadL, svgPadR       = 70, 190
	svgPadT, svgPadB       = 46, 36
	svgPlotW, svgPlotH     = svgW - svgPadL - svgPadR, panelH - svgPadT - svgPadB
	svgFont                = `font-family="sans-serif" font-size="12"`
	svgGrid, svgAxis, svgT = "#ddd", "#333", "#222"
)

// nodeColors colour the nodes' lines; the cluster's total is black.
var nodeColors = []string{"#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22"}

// series is one line of a panel: y per row of the run.
type series struct {
	name  string
	color string
	width float64
	dash  bool
	y     []float64
}

// timelineSVG draws, per watched client, what the cluster admitted each
// second (a line per node and their total) against the limit, with the
// outage shaded. Written by hand: the example needs no plotting library.
func timelineSVG(s *summary, o driverOptions, killAt, restartAt int) string {
	panels := []struct {
		cl    int
		title string
	}{
		{classAbuser, fmt.Sprintf("abuser: %.0f requests/s spread evenly over the nodes", s.wl.abuserRate)},
		{classSkewed, fmt.Sprintf("skewed: %.0f requests/s, %.0f%% of them on n1", s.wl.skewedRate, 100*s.wl.skewShare)},
		{classNew, fmt.Sprintf("new clients: %.0f requests/s each for %v, one arriving every %v (per client)", s.wl.newRate, s.wl.newLife, s.wl.newEvery)},
	}
	var b strings.Builder
	h := 30 + len(panels)*panelH
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d">`+"\n", svgW, h, svgW, h)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	fmt.Fprintf(&b, `<text x="%d" y="22" font-family="sans-serif" font-size="15" fill="%s">%s</text>`+"\n", svgPadL, svgT,
		html.EscapeString(fmt.Sprintf("hybridlimit demo: admitted per second, %d nodes, limit %d/s per client; Redis down from t=%ds to t=%ds (shaded)", o.nodes, o.limit, killAt, restartAt)))
	for i, p := range panels {
		var ss []series
		total := make([]float64, len(s.rows))
		for n := range o.nodes {
			y := make([]float64, len(s.rows))
			for j, r := range s.rows {
				if p.cl == classNew {
					if r.clientSeconds[p.cl] > 0 {
						y[j] = float64(r.ok[p.cl][n]) / r.clientSeconds[p.cl]
					}
				} else {
					y[j] = perSec(r.ok[p.cl][n], r)
				}
				total[j] += y[j]
			}
			ss = append(ss, series{name: fmt.Sprintf("n%d", n+1), color: nodeColors[n%len(nodeColors)], width: 1.5, y: y})
		}
		limit := make([]float64, len(s.rows))
		for j := range limit {
			limit[j] = float64(o.limit)
		}
		ss = append(ss,
			series{name: "cluster", color: "black", width: 2.5, y: total},
			series{name: "limit", color: "#d62728", width: 1.5, dash: true, y: limit})
		panel(&b, 30+i*panelH, p.title, s.rows, ss, killAt, restartAt)
	}
	b.WriteString("</svg>\n")
	return b.String()
}

// panel draws one panel at vertical offset top: x is the row's second.
func panel(b *strings.Builder, top int, title string, rows []row, ss []series, killAt, restartAt int) {
	ymax := 0.0
	for _, s := range ss {
		for _, v := range s.y {
			ymax = max(ymax, v)
		}
	}
	ymax, step := niceMax(ymax * 1.1)
	xmax := float64(max(len(rows), 1))
	x0, y0 := float64(svgPadL), float64(top+svgPadT)
	px := func(t float64) float64 { return x0 + t/xmax*svgPlotW }
	py := func(v float64) float64 { return y0 + (1-v/ymax)*svgPlotH }

	fmt.Fprintf(b, `<text x="%d" y="%d" %s fill="%s">%s</text>`+"\n", svgPadL, top+svgPadT-10, svgFont, svgT, html.EscapeString(title))
	fmt.Fprintf(b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%d" fill="#eee"/>`+"\n", px(float64(killAt)), y0, px(float64(restartAt))-px(float64(killAt)), svgPlotH)
	for v := 0.0; v <= ymax+step/1e6; v += step {
		fmt.Fprintf(b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s"/>`+"\n", x0, py(v), x0+svgPlotW, py(v), svgGrid)
		fmt.Fprintf(b, `<text x="%.1f" y="%.1f" %s fill="%s" text-anchor="end">%.0f</text>`+"\n", x0-6, py(v)+4, svgFont, svgT, v)
	}
	xstep := max(1, int(math.Ceil(xmax/10)))
	for t := 0; t <= int(xmax); t += xstep {
		fmt.Fprintf(b, `<text x="%.1f" y="%.1f" %s fill="%s" text-anchor="middle">%ds</text>`+"\n", px(float64(t)), y0+svgPlotH+16, svgFont, svgT, t)
	}
	fmt.Fprintf(b, `<rect x="%.1f" y="%.1f" width="%d" height="%d" fill="none" stroke="%s"/>`+"\n", x0, y0, svgPlotW, svgPlotH, svgAxis)
	for i, s := range ss {
		pts := make([]string, 0, len(rows))
		for j, r := range rows {
			// A row's figure is the second that ends at r.t: drawn at its middle.
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", px(float64(r.t)-0.5), py(s.y[j])))
		}
		dash := ""
		if s.dash {
			dash = ` stroke-dasharray="6 4"`
		}
		fmt.Fprintf(b, `<polyline points="%s" fill="none" stroke="%s" stroke-width="%.1f"%s/>`+"\n", strings.Join(pts, " "), s.color, s.width, dash)
		ly := y0 + 8 + float64(i)*18
		fmt.Fprintf(b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-width="%.1f"%s/>`+"\n", x0+svgPlotW+14, ly, x0+svgPlotW+40, ly, s.color, s.width, dash)
		fmt.Fprintf(b, `<text x="%.1f" y="%.1f" %s fill="%s">%s</text>`+"\n", x0+svgPlotW+46, ly+4, svgFont, svgT, html.EscapeString(s.name))
	}
}

// niceMax rounds v up to a round axis maximum and returns it with a tick step
// (about five ticks).
func niceMax(v float64) (float64, float64) {
	if v <= 0 {
		return 1, 0.2
	}
	raw := v / 5
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	step := 10 * mag
	for _, m := range []float64{1, 2, 2.5, 5} {
		if m*mag >= raw {
			step = m * mag
			break
		}
	}
	return math.Ceil(v/step) * step, step
}
