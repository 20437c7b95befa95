package main

import (
	"fmt"
	"html"
	"math"
	"strings"
)

// The timeline's geometry: a title, then one panel per watched client,
// stacked, sharing the x axis.
const (
	svgW, panelH       = 960, 230
	svgTitleH          = 58
	svgPadL, svgPadR   = 84, 170
	svgPadT, svgPadB   = 40, 34
	svgPlotW, svgPlotH = svgW - svgPadL - svgPadR, panelH - svgPadT - svgPadB
	svgFontSize        = 12
	svgTitleSize       = 15
	svgGrid, svgAxis   = "#ddd", "#333"
	svgText, svgShade  = "#222", "#eee"
	svgExact, svgLimit = "black", "#d62728"
)

// nodeColors colour each node's share of the bars.
var nodeColors = []string{"#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22"}

// timelineTitle returns the plot's title lines.
func timelineTitle(o driverOptions, killAt, restartAt int) []string {
	return []string{
		fmt.Sprintf("hybridlimit demo: %d nodes, a limit of %d per client per %v window (%s)", o.nodes, o.limit, ruleWindow, o.algo),
		"Bars: what the cluster admitted in each window (aligned to Redis's clock), by node. Black caps: what one",
		fmt.Sprintf("exact limiter admits deciding the same requests at the same times. Shaded: Redis down, t=%ds to t=%ds.", killAt, restartAt),
	}
}

// timelineSVG draws, per watched client and window, what the cluster
// admitted (a bar, stacked by node) beside what the exact replay admits and
// the limit, with the outage shaded. Written by hand: the example needs no
// plotting library.
func timelineSVG(s *summary, o driverOptions, killAt, restartAt int) string {
	panels := []struct {
		cl    int
		title string
	}{
		{classAbuser, fmt.Sprintf("abuser: %.0f requests/s spread evenly over the nodes", s.wl.abuserRate)},
		{classSkewed, fmt.Sprintf("skewed: %.0f requests/s, %.0f%% of them on n1", s.wl.skewedRate, 100*s.wl.skewShare)},
		{classNew, fmt.Sprintf("new clients, together: %.0f requests/s each for %v, one arriving every %v", s.wl.newRate, s.wl.newLife, s.wl.newEvery)},
	}
	var b strings.Builder
	h := svgTitleH + len(panels)*panelH + 20
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d">`+"\n", svgW, h, svgW, h)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	for i, line := range timelineTitle(o, killAt, restartAt) {
		size := svgFontSize
		if i == 0 {
			size = svgTitleSize
		}
		text(&b, 16, 22+float64(i)*17, size, "start", line)
	}
	for i, p := range panels {
		limitName := "limit"
		if p.cl == classNew {
			limitName = "limit × clients"
		}
		pn := panelData{title: p.title, limitName: limitName, nodes: o.nodes, killAt: killAt, restartAt: restartAt}
		for _, r := range s.rows {
			pn.byNode = append(pn.byNode, r.win.nodeAdmitted[p.cl][:o.nodes])
			pn.exact = append(pn.exact, float64(r.win.exact[p.cl]))
			pn.limit = append(pn.limit, float64(r.win.clients[p.cl]*o.limit))
		}
		pn.last = i == len(panels)-1
		panel(&b, svgTitleH+i*panelH, pn)
	}
	b.WriteString("</svg>\n")
	return b.String()
}

// panelData is one panel: per window, the cluster's admissions by node, the
// exact replay's, and the limit.
type panelData struct {
	title, limitName  string
	nodes             int
	byNode            [][]int64 // per window, per node
	exact, limit      []float64 // per window
	killAt, restartAt int
	last              bool // the bottom panel: it names the x axis
}

// text writes one text element at (x, y).
func text(b *strings.Builder, x, y float64, size int, anchor, s string) {
	fmt.Fprintf(b, `<text x="%.1f" y="%.1f" font-family="sans-serif" font-size="%d" fill="%s" text-anchor="%s">%s</text>`+"\n",
		x, y, size, svgText, anchor, html.EscapeString(s))
}

// steps returns the points of a step line: y[i] across window i.
func steps(y []float64, px, py func(float64) float64) string {
	pts := make([]string, 0, 2*len(y))
	for i, v := range y {
		pts = append(pts, fmt.Sprintf("%.1f,%.1f %.1f,%.1f", px(float64(i)), py(v), px(float64(i+1)), py(v)))
	}
	return strings.Join(pts, " ")
}

// panel draws one panel at vertical offset top: x is the window's start.
func panel(b *strings.Builder, top int, p panelData) {
	ymax := 0.0
	for i, ns := range p.byNode {
		var sum int64
		for _, n := range ns {
			sum += n
		}
		ymax = max(ymax, float64(sum), p.exact[i], p.limit[i])
	}
	ymax, step := niceMax(ymax * 1.1)
	xmax := float64(max(len(p.byNode), 1))
	x0, y0 := float64(svgPadL), float64(top+svgPadT)
	px := func(t float64) float64 { return x0 + t/xmax*svgPlotW }
	py := func(v float64) float64 { return y0 + (1-v/ymax)*svgPlotH }

	text(b, x0, y0-10, svgFontSize+1, "start", p.title)
	fmt.Fprintf(b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%d" fill="%s"/>`+"\n", px(float64(p.killAt)), y0, px(float64(p.restartAt))-px(float64(p.killAt)), svgPlotH, svgShade)
	text(b, (px(float64(p.killAt))+px(float64(p.restartAt)))/2, y0+14, svgFontSize-1, "middle", "Redis down")
	for v := 0.0; v <= ymax+step/1e6; v += step {
		fmt.Fprintf(b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s"/>`+"\n", x0, py(v), x0+svgPlotW, py(v), svgGrid)
		text(b, x0-6, py(v)+4, svgFontSize, "end", fmt.Sprintf("%.0f", v))
	}
	// The y axis's name, turned to read upwards.
	cx, cy := float64(svgPadL-50), y0+svgPlotH/2
	fmt.Fprintf(b, `<text x="%.1f" y="%.1f" font-family="sans-serif" font-size="%d" fill="%s" text-anchor="middle" transform="rotate(-90 %.1f %.1f)">admitted per window</text>`+"\n",
		cx, cy, svgFontSize, svgText, cx, cy)
	xstep := max(1, int(math.Ceil(xmax/15)))
	for t := 0; t <= int(xmax); t += xstep {
		text(b, px(float64(t)), y0+svgPlotH+16, svgFontSize, "middle", fmt.Sprintf("%ds", t))
	}
	if p.last {
		text(b, x0+svgPlotW/2, y0+svgPlotH+32, svgFontSize, "middle", "window start, seconds since the load began")
	}
	// The bars: each window's admissions, stacked by node.
	bw := svgPlotW / xmax
	for i, ns := range p.byNode {
		base := 0.0
		for n, v := range ns {
			if v == 0 {
				continue
			}
			fmt.Fprintf(b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s"/>`+"\n",
				px(float64(i))+0.15*bw, py(base+float64(v)), 0.7*bw, py(base)-py(base+float64(v)), nodeColors[n%len(nodeColors)])
			base += float64(v)
		}
	}
	// The exact replay: a cap across each window's bar, which the bar's
	// top meets when the cluster admitted what the replay admits; drawn
	// thicker than the limit's line, which it often lies on.
	var caps strings.Builder
	for i, v := range p.exact {
		fmt.Fprintf(&caps, "M%.1f %.1fH%.1f", px(float64(i))+0.05*bw, py(v), px(float64(i+1))-0.05*bw)
	}
	fmt.Fprintf(b, `<path d="%s" fill="none" stroke="%s" stroke-width="3"/>`+"\n", caps.String(), svgExact)
	fmt.Fprintf(b, `<polyline points="%s" fill="none" stroke="%s" stroke-width="1.5" stroke-dasharray="6 4"/>`+"\n", steps(p.limit, px, py), svgLimit)
	fmt.Fprintf(b, `<rect x="%.1f" y="%.1f" width="%d" height="%d" fill="none" stroke="%s"/>`+"\n", x0, y0, svgPlotW, svgPlotH, svgAxis)

	// The legend, right of the plot.
	lx, ly := x0+svgPlotW+14, y0+8
	for n := range p.nodes {
		fmt.Fprintf(b, `<rect x="%.1f" y="%.1f" width="12" height="12" fill="%s"/>`+"\n", lx+7, ly-6, nodeColors[n%len(nodeColors)])
		text(b, lx+32, ly+4, svgFontSize, "start", fmt.Sprintf("via n%d", n+1))
		ly += 17
	}
	fmt.Fprintf(b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-width="3"/>`+"\n", lx, ly, lx+26, ly, svgExact)
	text(b, lx+32, ly+4, svgFontSize, "start", "exact replay")
	ly += 17
	fmt.Fprintf(b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-width="1.5" stroke-dasharray="6 4"/>`+"\n", lx, ly, lx+26, ly, svgLimit)
	text(b, lx+32, ly+4, svgFontSize, "start", p.limitName)
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
