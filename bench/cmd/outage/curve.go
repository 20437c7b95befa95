package main

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/hybridlimit/hybridlimit/internal/outage"
)

// curveModes are the modes whose bucket rows are checked against the
// arrival curve: FailOpen and alone admit past it by design.
var curveModes = []string{outage.ModeFallback, outage.ModeFailLocal, outage.ModeFailClosed}

// excess is the most a mode's admissions, all nodes together, went past
// the bucket's arrival curve (burst B, then rate L per window), ÷ B: max
// over s ≤ t of A(s, t) − (B + rate·(t − s)), for t before the fault,
// from the fault to Redis's return, and after it (s any time since the
// key's first request: a burst taken twice shows however far apart).
type excess struct {
	before, outage, after float64
	at                    [3]int64 // when each was reached: µs from the first warm window
}

// curveExcess computes s's excess for mode from the admissions' times: a
// virtual queue that each admission fills by one and the rate drains (its
// level is the most admitted over any span ending then, less what the rate
// gave for it).
func curveExcess(s *scenario, mode string, limit int64, W time.Duration) excess {
	wus := W.Microseconds()
	var ts []int64
	for id, l := range s.wins[mode] {
		for _, t := range l.Times {
			ts = append(ts, id*wus+t)
		}
	}
	slices.Sort(ts)
	burst := float64(max(limit/10, 1)) // internal/outage's bucket: burst L/10
	rate := float64(limit) / float64(wus)
	ex := excess{before: math.Inf(-1), outage: math.Inf(-1), after: math.Inf(-1)}
	cols := [3]*float64{&ex.before, &ex.outage, &ex.after}
	q, last := 0.0, int64(0)
	for i, t := range ts {
		if i > 0 {
			q = max(0, q-rate*float64(t-last))
		}
		q, last = q+1, t
		c := 2
		switch w := t/wus - s.w0; {
		case w < warm:
			c = 0
		case w < warm+outageW:
			c = 1
		}
		if x := (q - burst) / burst; x > *cols[c] {
			*cols[c], ex.at[c] = x, t-s.w0*wus
		}
	}
	return ex
}

// curveReport is the bucket rows' table: per mode, the excess over the
// arrival curve before the fault / through it / after Redis returned.
func curveReport(all []*scenario, limit int64, W time.Duration) string {
	var b strings.Builder
	b.WriteString("| Redis | arrivals | offered | workload |")
	sep := "|---|---|---|---|"
	var modes []string
	for _, m := range curveModes {
		if slices.Contains(opts.modes, m) {
			modes = append(modes, m)
			b.WriteString(" " + modeNames[m] + " |")
			sep += "---|"
		}
	}
	b.WriteString("\n" + sep + "\n")
	for _, s := range all {
		if s.algo != "token bucket" {
			continue
		}
		fmt.Fprintf(&b, "| %s | %s | %.1f × L | %s |", s.fault, s.arrivals, s.load, s.wl)
		for _, m := range modes {
			ex := curveExcess(s, m, limit, W)
			fmt.Fprintf(&b, " %s / %s / %s |", cell(ex.before), cell(ex.outage), cell(ex.after))
		}
		b.WriteString("\n")
	}
	return b.String()
}

// cell is an excess ÷ B, 0 when the admissions stayed within the curve.
func cell(x float64) string {
	if math.IsInf(x, -1) {
		return "–"
	}
	return fmt.Sprintf("%.2f", max(x, 0))
}
