package accuracy

import (
	"fmt"
	"math"
	"strings"
)

// The api-users and outage tables: one row per mode and algorithm.

var usersColumns = []string{
	"mode", "algo", "keys", "win", "achieved/s", "late p99 ms",
	"lat p50 µs", "lat p99 µs", "lat p99.9 µs", "on-CPU p50/p99 µs",
	"waited", "wait p50/p99 µs",
	"under: false rej", "under: rejected",
	"over, later windows p99/max", "over, first window p99/max", "cold bound",
	"scripts/dec", "Redis CPU", "Redis CPU µs/dec", "vs central",
	"node CPU µs/dec", "vs local",
	"failed", "policy", "verdict",
}

var outageColumns = []string{
	"mode", "algo", "keys", "down s", "lat p99 µs (run)", "worst 1 s p99 µs (second of the run)",
	"down p50/p99/max µs", "decided while down", "after restart p99 µs",
	"failed", "policy", "dropped", "worst user, outage window", "worst user, window after",
	"late p99 ms", "verdict",
}

func us(v Float) string {
	f := float64(v)
	switch {
	case math.IsNaN(f):
		return "-"
	case f < 10:
		return fmt.Sprintf("%.2f", f)
	}
	return fmt.Sprintf("%.0f", f)
}

func pctPair(d Dist) string { return Pct(d.P99) + " / " + Pct(d.Max) }

// localOf returns the Local-mode run of the same set and algorithm as r:
// the floor of the node's CPU on the same arrivals (a Cluster row's too:
// Local mode reaches no Redis).
func localOf(results []*Result, r *Result) *Result {
	for _, c := range results {
		if c.Spec.Set == r.Spec.Set && c.Spec.Mode == ModeLocal && c.Spec.Algo == r.Spec.Algo {
			return c
		}
	}
	return nil
}

// centralOf returns the central run of the same set, algorithm and Redis
// (one server, or a Cluster) as r.
func centralOf(results []*Result, r *Result) *Result {
	for _, c := range results {
		if c.Spec.Set == r.Spec.Set && c.Spec.Mode == ModeCentral && c.Spec.Algo == r.Spec.Algo && c.Spec.Cluster == r.Spec.Cluster {
			return c
		}
	}
	return nil
}

func (r *Result) usersCells(results []*Result) []string {
	s, u := r.Spec, r.Users
	if u == nil {
		u = &UsersResult{}
	}
	vs := "-"
	if c := centralOf(results, r); c != nil && c != r && c.RedisCPUusPerDecision > 0 {
		vs = fmt.Sprintf("%.2f×", r.RedisCPUusPerDecision/c.RedisCPUusPerDecision)
	}
	vsLocal := "-"
	if l := localOf(results, r); l != nil && l != r && l.NodeCPUusPerDecision > 0 {
		vsLocal = fmt.Sprintf("%.2f×", r.NodeCPUusPerDecision/l.NodeCPUusPerDecision)
	}
	return []string{
		r.ran(), s.Algo, fmt.Sprint(s.Keys), fmt.Sprint(s.Windows), fmt.Sprintf("%.0f", r.AchievedRate), fmt.Sprintf("%.1f", r.Lateness.P99),
		us(r.Latency.P50), us(r.Latency.P99), us(r.Latency.P999), us(r.Latency.OnCPUP50) + " / " + us(r.Latency.OnCPUP99),
		fmt.Sprintf("%d (%s)", r.Latency.Waited, pctOf(r.Latency.Waited, int64(r.Decided))), us(r.Latency.WaitP50) + " / " + us(r.Latency.WaitP99),
		fmt.Sprintf("%.3f%%", u.UnderFalseRejPct), fmt.Sprintf("%.3f%%", u.UnderRejPct),
		pctPair(u.OverLater), pctPair(u.OverFirst), Pct(float64(u.ColdBound)),
		Num(r.ScriptsPerDecision), fmt.Sprintf("%.0f%%", r.RedisCPUPct), fmt.Sprintf("%.2f", r.RedisCPUusPerDecision), vs,
		us(Float(r.NodeCPUusPerDecision)), vsLocal,
		fmt.Sprint(r.Errors), fmt.Sprint(r.Unavailable), r.Verdict(),
	}
}

func (r *Result) outageCells() []string {
	s, u := r.Spec, r.Users
	worst := func(w int) string {
		if u == nil || w < 1 || w > len(u.OverByWindow) {
			return "-"
		}
		return Pct(float64(u.OverByWindow[w-1]))
	}
	killW := int(s.KillAt / s.Window)
	afterW := int((s.KillAt + s.Down + s.Window - 1) / s.Window)
	return []string{
		r.ran(), s.Algo, fmt.Sprint(s.Keys), fmt.Sprintf("%.0f", s.Down.Seconds()), us(r.Latency.P99), fmt.Sprintf("%s (s %d)", us(r.Latency.WorstP99), r.Latency.WorstSecond),
		us(r.Latency.DownP50) + " / " + us(r.Latency.DownP99) + " / " + us(r.Latency.DownMax), fmt.Sprint(r.Latency.DownDecided), us(r.Latency.AfterP99),
		fmt.Sprint(r.Errors), fmt.Sprint(r.Unavailable), fmt.Sprint(r.Dropped), worst(killW), worst(afterW),
		fmt.Sprintf("%.1f", r.Lateness.P99), r.Verdict(),
	}
}

func setOf(results []*Result, set string) []*Result {
	var out []*Result
	for _, r := range Sorted(results) {
		if r.Spec.Set == set {
			out = append(out, r)
		}
	}
	return out
}

// UsersTables renders the api-users table and the outage table as aligned
// text (empty strings when there is no such run).
func UsersTables(results []*Result) (users, outage string) { return usersRender(results, align) }

// UsersMarkdown renders the same tables as Markdown.
func UsersMarkdown(results []*Result) (users, outage string) {
	return usersRender(results, markdownRows)
}

func usersRender(results []*Result, render func(columns []string, rows [][]string, left int) string) (users, outage string) {
	var ru, ro [][]string
	for _, r := range setOf(results, SetUsers) {
		ru = append(ru, r.usersCells(results))
	}
	for _, r := range setOf(results, SetOutage) {
		ro = append(ro, r.outageCells())
	}
	if len(ru) > 0 {
		users = render(usersColumns, ru, 2)
	}
	if len(ro) > 0 {
		outage = render(outageColumns, ro, 2)
	}
	return users, outage
}

// align renders rows under columns as aligned text, the first left columns
// left-aligned and the last one unpadded.
func align(columns []string, rows [][]string, left int) string {
	rows = append([][]string{columns}, rows...)
	width := make([]int, len(columns))
	for _, row := range rows {
		for i, c := range row {
			width[i] = max(width[i], len([]rune(c)))
		}
	}
	var b strings.Builder
	for _, row := range rows {
		for i, c := range row {
			pad := width[i] - len([]rune(c))
			switch {
			case i == len(row)-1:
				b.WriteString(c)
			case i < left:
				b.WriteString(c + strings.Repeat(" ", pad) + "  ")
			default:
				b.WriteString(strings.Repeat(" ", pad) + c + "  ")
			}
		}
		b.WriteString("\n")
	}
	return b.String()
}

func markdownRows(columns []string, rows [][]string, left int) string {
	var b strings.Builder
	b.WriteString("| " + strings.Join(columns, " | ") + " |\n|")
	for i := range columns {
		if i < left || i == len(columns)-1 {
			b.WriteString("---|")
		} else {
			b.WriteString("---:|")
		}
	}
	b.WriteString("\n")
	for _, row := range rows {
		b.WriteString("| " + strings.Join(row, " | ") + " |\n")
	}
	return b.String()
}

// The api-users table's targets for decisions that wait for a lease: at
// most this share of all decisions, and their p99 at most this multiple of
// the same run's central p50 (a round trip).
const (
	TargetWaitedFrac = 0.01
	TargetWaitP99    = 2.0
)

// UsersTargets checks the api-users and outage targets.
func UsersTargets(results []*Result) []Check {
	var out []Check
	add := func(target, measured string, pass bool, note string) {
		out = append(out, Check{Target: target, Measured: measured, Pass: pass, Note: note})
	}
	for _, r := range setOf(results, SetUsers) {
		u, s := r.Users, r.Spec
		if u == nil {
			continue
		}
		note := ""
		if !r.Valid {
			note = "run " + r.Verdict()
		}
		if r.ModeRun != s.Mode {
			note = strings.TrimSpace(note + " ran " + r.ModeRun)
		}
		what := "api-users, " + r.ran() + ", " + s.Algo
		if s.Mode == ModeHybrid {
			lnote := note
			if !math.IsNaN(float64(r.Latency.OnCPUP99)) {
				lnote = strings.TrimSpace(fmt.Sprintf("on the CPU: p99 %s µs %s", us(r.Latency.OnCPUP99), note))
			}
			if !math.IsNaN(float64(r.Latency.WarmP99)) {
				lnote = fmt.Sprintf("%s; one key back to back in the same nodes: p50 %s, p99 %s µs", lnote, us(r.Latency.WarmP50), us(r.Latency.WarmP99))
			}
			add("decision latency p99 ≤ 2 µs (the decisions that did not wait): "+what, us(r.Latency.P99)+" µs", float64(r.Latency.P99) <= 2, lnote)
			frac := 0.0
			if r.Decided > 0 {
				frac = float64(r.Latency.Waited) / float64(r.Decided)
			}
			add(fmt.Sprintf("decisions that waited for a lease ≤ %.0f%%: %s", 100*TargetWaitedFrac, what),
				fmt.Sprintf("%d of %d (%.3f%%)", r.Latency.Waited, r.Decided, 100*frac), frac <= TargetWaitedFrac, note)
			if c := centralOf(results, r); c != nil && c != r {
				bound := TargetWaitP99 * float64(c.Latency.P50)
				if r.Latency.Waited == 0 {
					add(fmt.Sprintf("wait p99 ≤ %.0f× central's p50: %s", TargetWaitP99, what), fmt.Sprintf("none waited (central p50 %s µs)", us(c.Latency.P50)), true, note)
				} else {
					add(fmt.Sprintf("wait p99 ≤ %.0f× central's p50: %s", TargetWaitP99, what), fmt.Sprintf("%s µs vs central p50 %s µs", us(r.Latency.WaitP99), us(c.Latency.P50)),
						float64(r.Latency.WaitP99) <= bound, note)
				}
			}
			if c := centralOf(results, r); c != nil && c.RedisCPUusPerDecision > 0 {
				ratio := r.RedisCPUusPerDecision / c.RedisCPUusPerDecision
				add("Redis CPU ≤ 0.5× central's: "+what, fmt.Sprintf("%.2f vs %.2f µs/decision: %.2f×", r.RedisCPUusPerDecision, c.RedisCPUusPerDecision, ratio), ratio <= 0.5, note)
			}
		}
		if s.Mode != ModeCentral && s.Mode != ModeLocal {
			if l := localOf(results, r); l != nil && l.NodeCPUusPerDecision > 0 {
				ratio := r.NodeCPUusPerDecision / l.NodeCPUusPerDecision
				add(fmt.Sprintf("node CPU ≤ %.1f× Local mode's on the same arrivals: %s", TargetNodeCPUvsLocal, what),
					fmt.Sprintf("%.1f vs %.1f µs/decision: %.2f×", r.NodeCPUusPerDecision, l.NodeCPUusPerDecision, ratio), ratio <= TargetNodeCPUvsLocal, note)
			}
		}
		if s.Mode == ModeNaive || s.Mode == ModeLocal {
			continue // reported, not a target: the peer design, and the floor
		}
		add("users under the limit lose ≤ 0.1%: "+what, fmt.Sprintf("%.3f%% falsely rejected (%.3f%% rejected)", u.UnderFalseRejPct, u.UnderRejPct), u.UnderFalseRejPct <= 0.1, note)
		add("over-admission ≤ 5% per window after the first: "+what, "max "+Pct(u.OverLater.Max)+", p99 "+Pct(u.OverLater.P99), u.OverLater.Max <= 0.05, note)
		cb := float64(u.ColdBound)
		add("first window within the cold-start bound "+Pct(cb)+": "+what, "max "+Pct(u.OverFirst.Max)+", p99 "+Pct(u.OverFirst.P99), u.OverFirst.Max <= cb+1e-9, note)
	}
	for _, r := range setOf(results, SetOutage) {
		what := "outage, " + r.ran() + ", " + r.Spec.Algo
		if r.Spec.Mode == ModeCentral || r.Spec.Mode == ModeHybrid {
			add("p99 ≤ 1 ms throughout (every second): "+what, "worst second's p99 "+us(r.Latency.WorstP99)+" µs; while down "+us(r.Latency.DownP99)+" µs",
				float64(r.Latency.WorstP99) <= 1000, "")
		}
		add("no request failed because of Redis: "+what, fmt.Sprintf("%d failed, %d dropped, %d decided by the policy", r.Errors, r.Dropped, r.Unavailable),
			r.Errors == 0 && r.Dropped == 0, "")
	}
	return out
}
