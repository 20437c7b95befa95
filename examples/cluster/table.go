package main

import (
	"fmt"
	"io"
	"strings"
	"time"
	"unicode/utf8"
)

// table draws one row per window, once the window has ended: redrawn in
// place on a terminal, one plain line each otherwise.
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

// windowName names row r's window by its start and end, in seconds since
// the load began.
func windowName(r row) string { return fmt.Sprintf("%d-%ds", r.t, r.t+1) }

// fmtRatio formats a ÷ b with the given decimals, "-" when b is 0.
func fmtRatio(a, b int64, decimals int) string {
	x, ok := ratio(a, b)
	if !ok {
		return "-"
	}
	return fmt.Sprintf("%.*f", decimals, x)
}

// drawPlain prints one line per window: the nodes' figures, then per class
// what the cluster admitted and what the exact replay admits.
func (t *table) drawPlain(r row) {
	var b strings.Builder
	fmt.Fprintf(&b, "t=%-6s %-6s redis=%-4s scripts/s=%-5d cmds/s=%-5d|", windowName(r), phaseNames[r.phase], redisState(r), r.scripts, r.cmds)
	for i, n := range r.nodes {
		var ok int64
		for cl := range numClasses {
			ok += r.win.nodeAdmitted[cl][i]
		}
		fmt.Fprintf(&b, " n%d +%d -%d p99=%s %s |", i+1, ok, r.win.nodeRefused[i], fmtDur(n.p99), modeName(n))
	}
	for cl := range numClasses {
		name := classNames[cl]
		if c := r.win.clients[cl]; c != 1 {
			name = fmt.Sprintf("%s×%d", name, c)
		}
		fmt.Fprintf(&b, " %s %d exact %d", name, r.win.admitted[cl], r.win.exact[cl])
		if cl == classSteady {
			fmt.Fprintf(&b, " refused %d", r.win.refused[cl])
		}
	}
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
	line("window %s of %ds   phase: %-6s   Redis: %-4s   scripts/s: %d   commands/s: %d", windowName(r), int(t.o.duration/time.Second), phaseNames[r.phase], redisState(r), r.scripts, r.cmds)
	line("")
	line("%-5s %9s %8s %13s  %s", "node", "admitted", "refused", "p99 "+latencyName, "mode")
	for i, n := range r.nodes {
		var ok int64
		for cl := range numClasses {
			ok += r.win.nodeAdmitted[cl][i]
		}
		line("%-5s %9d %8d %13s  %s", fmt.Sprintf("n%d", i+1), ok, r.win.nodeRefused[i], fmtDur(n.p99), modeName(n))
	}
	line("")
	line("in this window (%v, aligned to Redis's clock), beside one exact limiter deciding the same requests:", ruleWindow)
	line("%s %7s %9s %13s %16s %8s %8s", pad("client (demand ÷ limit)", 24), "clients", "admitted", "exact replay", "limit × clients", "÷ exact", "refused")
	l := float64(t.o.limit)
	names := [numClasses]string{
		classAbuser: fmt.Sprintf("abuser (%g×, even)", t.wl.abuserRate/l),
		classSkewed: fmt.Sprintf("skewed (%g×, %.0f%% on n1)", t.wl.skewedRate/l, 100*t.wl.skewShare),
		classNew:    fmt.Sprintf("new (%g× each)", t.wl.newRate/l),
		classSteady: fmt.Sprintf("steady (%g× each)", t.wl.steadyRate/l),
	}
	for cl := range numClasses {
		w := &r.win
		line("%s %7d %9d %13d %16d %8s %8d", pad(names[cl], 24), w.clients[cl], w.admitted[cl], w.exact[cl],
			w.clients[cl]*t.o.limit, fmtRatio(w.admitted[cl], w.exact[cl], 2), w.refused[cl])
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

// phaseSum adds up a phase's windows.
type phaseSum struct {
	windows             int
	admitted, exact     [numClasses]int64 // by the cluster, by the exact replay
	most                [numClasses]int64 // the most admitted for one client in one window
	over, under         int64             // Σ per client and window, beyond and short of the exact replay
	decisions, degraded int64
	lost                [numClasses]int64 // requests answered 5xx or not at all
	limiterErrors       int64             // requests the nodes' Limiter could not decide
	scripts, cmds       int64
	lat                 []uint64
}

// summary is the run's figures per phase, from its windows.
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
	p.windows++
	for cl := range numClasses {
		p.admitted[cl] += r.win.admitted[cl]
		p.exact[cl] += r.win.exact[cl]
		p.most[cl] = max(p.most[cl], r.win.most[cl])
		p.over += r.win.over[cl]
		p.under += r.win.under[cl]
		p.lost[cl] += r.lost[cl]
	}
	p.decisions += r.win.decisions
	for _, n := range r.nodes {
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
			n += p.lost[cl]
		}
		n += p.limiterErrors
	}
	return n
}

func (s *summary) write(w io.Writer) {
	const nameW = 46
	fmt.Fprint(w, pad(fmt.Sprintf("summary, per window of %v", ruleWindow), nameW))
	for _, n := range phaseNames {
		fmt.Fprintf(w, " %10s", n)
	}
	fmt.Fprintln(w)
	row := func(name string, f func(p *phaseSum) string) {
		fmt.Fprint(w, pad(name, nameW))
		for i := range s.phases {
			fmt.Fprintf(w, " %10s", f(&s.phases[i]))
		}
		fmt.Fprintln(w)
	}
	row("windows", func(p *phaseSum) string { return fmt.Sprint(p.windows) })
	for _, cl := range []int{classAbuser, classSkewed, classNew} {
		row(classNames[cl]+": admitted ÷ exact replay", func(p *phaseSum) string {
			return fmtRatio(p.admitted[cl], p.exact[cl], 2)
		})
		row(classNames[cl]+": most for a client in a window ÷ limit", func(p *phaseSum) string {
			if p.admitted[cl]+p.exact[cl] == 0 {
				return "-" // no request of the class
			}
			return fmtRatio(p.most[cl], s.limit, 2)
		})
	}
	row("steady: admitted ÷ exact replay", func(p *phaseSum) string {
		return fmtRatio(p.admitted[classSteady], p.exact[classSteady], 3)
	})
	row("admitted beyond the exact replay", func(p *phaseSum) string { return fmt.Sprint(p.over) })
	row("admitted short of the exact replay", func(p *phaseSum) string { return fmt.Sprint(p.under) })
	row(latencyName+" latency p50", func(p *phaseSum) string { return fmtDur(quantile(p.lat, 0.5)) })
	row(latencyName+" latency p99", func(p *phaseSum) string { return fmtDur(quantile(p.lat, 0.99)) })
	row("decisions", func(p *phaseSum) string { return fmt.Sprint(p.decisions) })
	row("decisions by the failure policy", func(p *phaseSum) string { return fmt.Sprint(p.degraded) })
	row("Redis scripts per decision", func(p *phaseSum) string { return fmtRatio(p.scripts, p.decisions, 4) })
	row("Redis commands per decision", func(p *phaseSum) string { return fmtRatio(p.cmds, p.decisions, 4) })
	row("failed requests (5xx, no answer)", func(p *phaseSum) string {
		var n int64
		for cl := range numClasses {
			n += p.lost[cl]
		}
		return fmt.Sprint(n)
	})
	row("Limiter errors (let through)", func(p *phaseSum) string { return fmt.Sprint(p.limiterErrors) })
	fmt.Fprintf(w, "\nexact replay: one local.Limiter under the same rule deciding the same requests at the times the nodes\n"+
		"decided them, on Redis's clock. \"beyond\" and \"short of\" add up, per client and window, what the cluster\n"+
		"admitted more and less than it.\n")
	fmt.Fprintf(w, "\nrequests failed because of Redis: %d (of %d sent", s.failed(), s.sent)
	if s.dropped > 0 {
		fmt.Fprintf(w, "; %d arrivals not sent: the load generator fell behind", s.dropped)
	}
	fmt.Fprintln(w, ")")
}
