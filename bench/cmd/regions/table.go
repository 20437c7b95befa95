package main

import (
	"fmt"
	"math"
	"os"
	"strings"

	"github.com/hybridlimit/hybridlimit/bench/internal/table"
)

// baselines names the modes in the table.
var baselines = map[string]string{
	modeGlobal:  "C: two-level leases (Rule.Global)",
	modeCentral: "A: central, global Redis",
	modeSplit:   "B: L ÷ regions per region",
}

// printTable prints a row per scenario and baseline.
func printTable(o opts, results []result) {
	rows := [][]string{{"scenario", "baseline", "admitted ÷ L per window: mean [min–max]", "per region (mean ÷ L)",
		"fault windows (mean ÷ L)", "over L", "false refusals", "degraded", "decision p50", "p99", "late arrivals",
		"global Redis commands/s", "cross-region KB/s"}}
	for _, r := range results {
		for _, m := range o.modes {
			mr := r.modes[m]
			var sum, lo, hi, fault, over, falseRef, exact float64
			lo = 1e18
			per := make([]float64, o.regions)
			var admitted, offered int64
			for w := range o.windows {
				a, off := float64(total(mr.admitted[w])), float64(total(mr.offered[w]))
				admitted, offered = admitted+int64(a), offered+int64(off)
				g := a / float64(o.limit)
				sum += g
				lo, hi = min(lo, g), max(hi, g)
				if w >= o.faultFrom && w < o.faultTo {
					fault += g
				}
				over += max(0, a-float64(o.limit))
				ex := min(off, float64(o.limit))
				exact += ex
				falseRef += max(0, ex-a)
				for i := range per {
					per[i] += float64(mr.admitted[w][i]) / float64(o.limit) / float64(o.windows)
				}
			}
			n := float64(o.windows)
			var ps []string
			for _, p := range per {
				ps = append(ps, fmt.Sprintf("%.2f", p))
			}
			faultCol := "—"
			if r.sc.fault != "" {
				faultCol = fmt.Sprintf("%.2f", fault/float64(o.faultTo-o.faultFrom))
			}
			cmds, link := "—", "—"
			if m != modeSplit { // B never reaches a global Redis
				cmds, link = fmt.Sprintf("%.0f", r.cmds[m]), fmt.Sprintf("%.1f", r.linkBytes[m]/1e3)
				if math.IsNaN(r.cmds[m]) {
					cmds = "n/a (INFO timed out)"
				}
			}
			rows = append(rows, []string{r.sc.name, baselines[m], fmt.Sprintf("%.2f [%.2f–%.2f]", sum/n, lo, hi),
				strings.Join(ps, " / "), faultCol, pct(over, float64(o.limit)*n), pct(falseRef, exact),
				pct(float64(mr.degraded), float64(admitted)), ms(quantile(mr.lat, 0.5)), ms(quantile(mr.lat, 0.99)), pct(float64(mr.late), float64(offered)), cmds, link})
		}
	}
	table.Print(os.Stdout, rows, true)
	fmt.Println()
	for _, r := range results {
		if r.sc.fault != "" {
			fmt.Printf("- fault windows: the mean over the windows %d to %d, while the last region's link is cut (cut) or the global Redis is down (kill).\n", o.faultFrom, o.faultTo-1)
			break
		}
	}
	fmt.Printf(`- admitted ÷ L: all regions' admissions in a window over the global limit; per region, each region's mean.
- over L: admissions beyond L, summed over the windows, ÷ L × windows.
- false refusals: requests refused while the window's global count was under L: Σ max(0, min(offered, L) − admitted) ÷ Σ min(offered, L).
- degraded: admissions the failure policy made (A: FailLocal, L ÷ %d nodes each) ÷ admissions.
- late arrivals: arrivals a node began to decide 50 ms or more after their time, a node starved of CPU: where they are many, the row measures the machine more than the limiter.
- global Redis commands/s: INFO total_commands_processed over the measured windows, A's alone (B's nodes never reach the global Redis); cross-region KB/s: bytes both ways on the links of regions 1 to %d.
`, o.regions*o.nodes, o.regions-1)
}

// printWindows prints each window of r: offered ÷ L and each baseline's
// admitted ÷ L, globally and per region.
func printWindows(o opts, r result) {
	head := []string{"offered (per region)"}
	for _, m := range o.modes {
		head = append(head, baselines[m][:1]+" admitted (per region)")
	}
	if r.modes[modeCentral] != nil {
		head = append(head, "A's admissions degraded", "late arrivals")
	}
	fmt.Printf("%s: per window, ÷ L: %s\n", r.sc.name, strings.Join(head, " | "))
	L := float64(o.limit)
	for w := range o.windows {
		var b strings.Builder
		fmt.Fprintf(&b, "  w%-3d", w)
		var off float64
		var per []string
		for _, x := range r.offered[w] {
			off += x
			per = append(per, fmt.Sprintf("%.2f", x/L))
		}
		fmt.Fprintf(&b, " %.2f (%s)", off/L, strings.Join(per, " "))
		for _, m := range o.modes {
			mr := r.modes[m]
			per = per[:0]
			for _, a := range mr.admitted[w] {
				per = append(per, fmt.Sprintf("%.2f", float64(a)/L))
			}
			fmt.Fprintf(&b, " | %.2f (%s)", float64(total(mr.admitted[w]))/L, strings.Join(per, " "))
		}
		if mr := r.modes[modeCentral]; mr != nil {
			fmt.Fprintf(&b, " | %s | %s", pct(float64(mr.degW[w]), float64(total(mr.admitted[w]))), pct(float64(mr.lateW[w]), float64(total(mr.offered[w]))))
		}
		fmt.Println(b.String())
	}
	fmt.Println()
}

func pct(a, b float64) string {
	if b == 0 {
		return "—"
	}
	return fmt.Sprintf("%.1f%%", 100*a/b)
}

// quantile is the q-quantile of sorted v (µs).
func quantile(v []int32, q float64) int64 {
	if len(v) == 0 {
		return 0
	}
	return int64(v[min(int(q*float64(len(v))), len(v)-1)])
}

func ms(us int64) string { return fmt.Sprintf("%.1f ms", float64(us)/1e3) }
