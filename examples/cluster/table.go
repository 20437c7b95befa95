package main

import (
	"fmt"
	"io"
	"strings"
	"time"
	"unicode/utf8"
)

// table draws one row per second: redrawn in place on a terminal, one plain
// line each otherwise.
type table struct {
	w                 io.Writer
	live              bool
	o                 driverOptions
	wl                workload
	killAt, restartAt int
	notes             []string
	drawn             int // lines of the last live drawing
}

// note records an event (Redis killed, started again).
func (t *table) note(s string) {
	t.notes = append(t.notes, s)
	if !t.live {
		fmt.Fprintln(t.w, s)
	}
}

func (t *table) draw(r row) {
	if t.live {
		t.drawLive(r)
	} else {
		t.drawPlain(r)
	}
}

// perSec returns n per second over the row's interval.
func perSec(n int64, r row) float64 {
	if r.dt <= 0 {
		return 0
	}
	return float64(n) / r.dt
}

// classTotals sums a class's admitted, refused and failed over the nodes.
func classTotals(r row, cl int) (ok, limited, failed int64) {
	for n := range maxNodes {
		ok += r.ok[cl][n]
		limited += r.limited[cl][n]
		failed += r.failed[cl][n]
	}
	return
}

// perClient returns a class's admitted and refused per second and client.
func perClient(r row, cl int) (ok, limited float64) {
	o, l, _ := classTotals(r, cl)
	if r.clientSeconds[cl] <= 0 {
		return 0, 0
	}
	return float64(o) / r.clientSeconds[cl], float64(l) / r.clientSeconds[cl]
}

func modeName(n nodeRow) string {
	switch {
	case !n.reached:
		return "no answer"
	case n.available:
		return "redis (hybrid)"
	default:
		return fallbackName
	}
}

func redisState(r row) string {
	if r.redisUp {
		return "up"
	}
	return "DOWN"
}

func (t *table) drawPlain(r row) {
	var b strings.Builder
	fmt.Fprintf(&b, "t=%2ds %-6s redis=%-4s scripts/s=%-5.0f cmds/s=%-5.0f|", r.t, phaseNames[r.phase], redisState(r), perSec(r.scripts, r), perSec(r.cmds, r))
	for i, n := range r.nodes {
		fmt.Fprintf(&b, " n%d +%.0f -%.0f p99=%s %s |", i+1, perSec(n.admitted, r), perSec(n.refused, r), fmtDur(n.p99), modeName(n))
	}
	for _, cl := range []int{classAbuser, classSkewed, classNew} {
		ok, _ := perClient(r, cl)
		fmt.Fprintf(&b, " %s %.0f/%d", classNames[cl], ok, t.o.limit)
	}
	ok, lim := perClient(r, classSteady)
	fmt.Fprintf(&b, " steady %.0f refused %.0f", ok, lim)
	fmt.Fprintln(t.w, b.String())
}

func (t *table) drawLive(r row) {
	var b strings.Builder
	line := func(format string, a ...any) {
		b.WriteString("\x1b[2K") // clear the line
		fmt.Fprintf(&b, format, a...)
		b.WriteByte('\n')
	}
	if t.drawn > 0 {
		fmt.Fprintf(&b, "\x1b[%dA", t.drawn) // back to the drawing's first line
	}
	line("t=%ds of %d   phase: %-6s   Redis: %-4s   scripts/s: %.0f   commands/s: %.0f", r.t, int(t.o.duration/time.Second), phaseNames[r.phase], redisState(r), perSec(r.scripts, r), perSec(r.cmds, r))
	line("")
	line("%-5s %11s %10s %13s  %s", "node", "admitted/s", "refused/s", "p99 "+latencyName, "mode")
	for i, n := range r.nodes {
		line("%-5s %11.0f %10.0f %13s  %s", fmt.Sprintf("n%d", i+1), perSec(n.admitted, r), perSec(n.refused, r), fmtDur(n.p99), modeName(n))
	}
	line("")
	line("%s %11s %8s %10s", pad("client (demand ÷ limit)", 28), "admitted/s", "limit/s", "refused/s")
	l := float64(t.o.limit)
	rows := []struct {
		cl   int
		name string
	}{
		{classAbuser, fmt.Sprintf("abuser (%g×, even)", t.wl.abuserRate/l)},
		{classSkewed, fmt.Sprintf("skewed (%g×, %.0f%% on n1)", t.wl.skewedRate/l, 100*t.wl.skewShare)},
		{classNew, fmt.Sprintf("new, each of %d (%g×)", r.active[classNew], t.wl.newRate/l)},
		{classSteady, fmt.Sprintf("steady, each of %d (%g×)", r.active[classSteady], t.wl.steadyRate/l)},
	}
	for _, x := range rows {
		ok, lim := perClient(r, x.cl)
		line("%s %11.0f %8d %10.0f", pad(x.name, 28), ok, t.o.limit, lim)
	}
	line("")
	for _, n := range t.notes {
		line("%s", n)
	}
	t.drawn = strings.Count(b.String(), "\n")
	io.WriteString(t.w, b.String())
}

// pad pads s with spaces to n characters: fmt's %-Ns counts bytes, and the
// table's labels have multi-byte ones (×, ÷).
func pad(s string, n int) string {
	return s + strings.Repeat(" ", max(0, n-utf8.RuneCountInString(s)))
}

// fmtDur formats a latency for the table: µs with one decimal below 10 µs.
func fmtDur(d time.Duration) string {
	switch {
	case d == 0:
		return "-"
	case d < 10*time.Microsecond:
		return fmt.Sprintf("%.1fµs", float64(d)/1e3)
	case d < 10*time.Millisecond:
		return fmt.Sprintf("%.0fµs", float64(d)/1e3)
	default:
		return d.Round(time.Millisecond).String()
	}
}

// phaseSum adds up a phase's rows.
type phaseSum struct {
	seconds             float64
	ok, limited, failed [numClasses]int64
	clientSeconds       [numClasses]float64 // Σ clients active × seconds
	decisions, degraded int64
	limiterErrors       int64 // requests the nodes' Limiter could not decide
	scripts, cmds       int64
	lat                 []uint64
}

// summary is the run's figures per phase.
type summary struct {
	limit   int64
	wl      workload
	rows    []row
	phases  [numPhases]phaseSum
	sent    int64
	dropped int64 // arrivals the load generator could not send in time
}

func (s *summary) add(r row) {
	s.rows = append(s.rows, r)
	p := &s.phases[r.phase]
	p.seconds += r.dt
	for cl := range numClasses {
		ok, lim, f := classTotals(r, cl)
		p.ok[cl] += ok
		p.limited[cl] += lim
		p.failed[cl] += f
		p.clientSeconds[cl] += r.clientSeconds[cl]
	}
	for _, n := range r.nodes {
		p.decisions += n.admitted + n.refused
		p.degraded += n.degraded
		p.limiterErrors += n.failed
	}
	p.scripts += r.scripts
	p.cmds += r.cmds
	if p.lat == nil {
		p.lat = make([]uint64, histBuckets)
	}
	for i, n := range r.lat {
		p.lat[i] += n
	}
}

// failed returns the requests that failed in the run: answered 5xx or not
// at all, or let through because the Limiter could not decide.
func (s *summary) failed() int64 {
	var n int64
	for _, p := range s.phases {
		for cl := range numClasses {
			n += p.failed[cl]
		}
		n += p.limiterErrors
	}
	return n
}

// admittedOverLimit returns a class's admitted per client-second ÷ limit.
func (p *phaseSum) admittedOverLimit(cl int, limit int64) float64 {
	if p.clientSeconds[cl] == 0 {
		return 0
	}
	return float64(p.ok[cl]) / (p.clientSeconds[cl] * float64(limit))
}

func (s *summary) write(w io.Writer) {
	fmt.Fprint(w, pad("summary", 36))
	for _, n := range phaseNames {
		fmt.Fprintf(w, " %10s", n)
	}
	fmt.Fprintln(w)
	row := func(name string, f func(p *phaseSum) string) {
		fmt.Fprint(w, pad(name, 36))
		for i := range s.phases {
			fmt.Fprintf(w, " %10s", f(&s.phases[i]))
		}
		fmt.Fprintln(w)
	}
	row("seconds", func(p *phaseSum) string { return fmt.Sprintf("%.0f", p.seconds) })
	for _, cl := range []int{classAbuser, classSkewed, classNew} {
		row(classNames[cl]+": admitted ÷ limit", func(p *phaseSum) string {
			return fmt.Sprintf("%.2f", p.admittedOverLimit(cl, s.limit))
		})
	}
	row("steady: admitted ÷ sent", func(p *phaseSum) string {
		sent := p.ok[classSteady] + p.limited[classSteady] + p.failed[classSteady]
		if sent == 0 {
			return "-"
		}
		return fmt.Sprintf("%.3f", float64(p.ok[classSteady])/float64(sent))
	})
	row(latencyName+" latency p50", func(p *phaseSum) string { return fmtDur(quantile(p.lat, 0.5)) })
	row(latencyName+" latency p99", func(p *phaseSum) string { return fmtDur(quantile(p.lat, 0.99)) })
	row("decisions", func(p *phaseSum) string { return fmt.Sprint(p.decisions) })
	row("decisions by the failure policy", func(p *phaseSum) string { return fmt.Sprint(p.degraded) })
	row("Redis scripts per decision", func(p *phaseSum) string {
		if p.decisions == 0 {
			return "-"
		}
		return fmt.Sprintf("%.4f", float64(p.scripts)/float64(p.decisions))
	})
	row("Redis commands per decision", func(p *phaseSum) string {
		if p.decisions == 0 {
			return "-"
		}
		return fmt.Sprintf("%.4f", float64(p.cmds)/float64(p.decisions))
	})
	row("failed requests (5xx, no answer)", func(p *phaseSum) string {
		var n int64
		for cl := range numClasses {
			n += p.failed[cl]
		}
		return fmt.Sprint(n)
	})
	row("Limiter errors (let through)", func(p *phaseSum) string { return fmt.Sprint(p.limiterErrors) })
	fmt.Fprintf(w, "\nrequests failed because of Redis: %d (of %d sent", s.failed(), s.sent)
	if s.dropped > 0 {
		fmt.Fprintf(w, "; %d arrivals not sent: the load generator fell behind", s.dropped)
	}
	fmt.Fprintln(w, ")")
}
