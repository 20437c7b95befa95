package main

import (
	"encoding/json"
	"fmt"
	"math"
	"os"

	"github.com/hybridlimit/hybridlimit/bench/accuracy"
)

// modeWindows is one mode's windows of one scenario, as -json writes them.
type modeWindows struct {
	Scenario, Mode     string
	Limit              int64
	FaultFrom, FaultTo int // the fault's windows, for cut and kill
	// Admitted and Offered are per window and region.
	Admitted, Offered [][]int64
	P50, P99          int64   // decision latency, µs
	Commands          float64 // the mode's global Redis's commands per second (-1: unknown; 0: none)
	LinkBytes         float64 // bytes per second across the links outside the home region
}

// writeJSON writes every scenario's windows, per mode, to path.
func writeJSON(o opts, results []result, path string) error {
	var out []modeWindows
	for _, r := range results {
		for _, m := range o.modes {
			mr := r.modes[m]
			mw := modeWindows{Scenario: r.sc.name, Mode: m, Limit: o.limit, Admitted: mr.admitted, Offered: mr.offered,
				P50: quantile(mr.lat, 0.5), P99: quantile(mr.lat, 0.99), Commands: r.cmds[m], LinkBytes: r.linkBytes[m]}
			if math.IsNaN(mw.Commands) {
				mw.Commands = -1
			}
			if r.sc.fault != "" {
				mw.FaultFrom, mw.FaultTo = o.faultFrom, o.faultTo
			}
			out = append(out, mw)
		}
	}
	b, err := json.MarshalIndent(out, "", " ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o644)
}

// regionColors are the regions' colours in the plot.
var regionColors = []string{"#1b9e77", "#d95f02", "#7570b3", "#e7298a", "#66a61e"}

// plotShift draws the shift scenario: each region's offered load (dashed)
// and what C admitted there, and C's and B's totals, ÷ L per window.
func plotShift(o opts, r result) string {
	c := accuracy.Chart{
		Title:  fmt.Sprintf("traffic moving between %d regions, %.0f × L offered: two-level leases", o.regions, o.load),
		XLabel: fmt.Sprintf("window (%v)", o.window), YLabel: "÷ L", LinearX: true,
	}
	L := float64(o.limit)
	add := func(name, color string, dash bool, y func(w int) float64) {
		s := accuracy.Series{Name: name, Color: color, Dash: dash, Radius: 2}
		for w := range o.windows {
			s.X, s.Y = append(s.X, float64(w)), append(s.Y, y(w))
		}
		c.Series = append(c.Series, s)
	}
	if mr := r.modes[modeGlobal]; mr != nil {
		add("C admitted, all regions", "#222", false, func(w int) float64 { return float64(total(mr.admitted[w])) / L })
		for i := range o.regions {
			col := regionColors[i%len(regionColors)]
			add(fmt.Sprintf("region %d offered", i), col, true, func(w int) float64 { return r.offered[w][i] / L })
			add(fmt.Sprintf("region %d: C admitted", i), col, false, func(w int) float64 { return float64(mr.admitted[w][i]) / L })
		}
	}
	if mr := r.modes[modeSplit]; mr != nil {
		add("B (L ÷ regions) admitted, all", "#999", false, func(w int) float64 { return float64(total(mr.admitted[w])) / L })
	}
	return c.SVG()
}
