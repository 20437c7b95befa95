package accuracy

import (
	"fmt"
	"math"
	"strings"
)

// The api-patterns table: one row per pattern and algorithm, hybrid beside
// central on the same planned arrivals, each beside its own exact replay.

// The targets of the api-patterns table.
const (
	TargetFalseRefusalPct = 0.1 // false refusals, % of what the exact replay admits
	TargetRetryRefusedPct = 1.0 // retries at RetryAfter refused again, % of retries
	TargetOverLater       = 0.05
)

var patternsColumns = []string{
	"pattern", "algo", "keys", "requests",
	"refused: hybrid / central / exact",
	"exact replay admits",
	"false refusals: hybrid", "central", "target",
	"retries refused again: hybrid", "central", "exact replay", "target",
	"over, later windows max: hybrid", "central", "target",
	"over, first window max: hybrid / central",
	"waited: hybrid", "wait p50/p99 µs",
}

// patternRuns returns the api-patterns runs in mode m, if any.
func patternRuns(results []*Result, m string) *Result {
	for _, r := range results {
		if r.Spec.Set == SetPatterns && r.Spec.Mode == m {
			return r
		}
	}
	return nil
}

// patternOf returns r's figures for pattern p with algorithm a, nil when r
// is nil or has none.
func patternOf(r *Result, p, a string) *PatternResult {
	if r == nil {
		return nil
	}
	for _, pr := range r.Patterns {
		if pr.Pattern == p && pr.Algo == a {
			return pr
		}
	}
	return nil
}

func pctOf(n, of int64) string {
	if of == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f%%", 100*float64(n)/float64(of))
}

// patternCells renders one row: h and c are the hybrid and central
// figures (either may be nil).
func patternCells(p, a string, h, c *PatternResult) []string {
	get := func(pr *PatternResult, f func(*PatternResult) string) string {
		if pr == nil {
			return "-"
		}
		return f(pr)
	}
	ref := get(h, func(pr *PatternResult) string { return pctOf(pr.Refused, pr.Requests) }) + " / " +
		get(c, func(pr *PatternResult) string { return pctOf(pr.Refused, pr.Requests) }) + " / " +
		get(h, func(pr *PatternResult) string { return pctOf(pr.ExactRefused, pr.Requests) })
	fr := func(pr *PatternResult) string {
		return fmt.Sprintf("%.3f%% (%d)", pr.FalseRefusalPct, pr.FalseRefusals)
	}
	retry, retryC, retryX, retryT := "-", "-", "-", "-"
	if p == PatRetry {
		retry = get(h, func(pr *PatternResult) string {
			return fmt.Sprintf("%s (%d of %d)", pctOf(pr.RetriesRefused, pr.Retries), pr.RetriesRefused, pr.Retries)
		})
		retryC = get(c, func(pr *PatternResult) string { return pctOf(pr.RetriesRefused, pr.Retries) })
		retryX = get(h, func(pr *PatternResult) string { return pctOf(pr.RetriesExactRefused, pr.Retries) })
		retryT = fmt.Sprintf("≤ %.0f%%", TargetRetryRefusedPct)
	}
	waited := get(h, func(pr *PatternResult) string {
		return fmt.Sprintf("%d (%s)", pr.Waited, pctOf(pr.Waited, pr.Requests))
	})
	wait := get(h, func(pr *PatternResult) string { return us(pr.WaitP50) + " / " + us(pr.WaitP99) })
	return []string{
		p, a, get(h, func(pr *PatternResult) string { return fmt.Sprint(pr.Keys) }), get(h, func(pr *PatternResult) string { return fmt.Sprint(pr.Requests) }),
		ref,
		get(h, func(pr *PatternResult) string { return fmt.Sprint(pr.Exact) }),
		get(h, fr), get(c, fr), fmt.Sprintf("≤ %.1f%%", TargetFalseRefusalPct),
		retry, retryC, retryX, retryT,
		get(h, func(pr *PatternResult) string { return Pct(pr.OverLater.Max) }), get(c, func(pr *PatternResult) string { return Pct(pr.OverLater.Max) }),
		"≤ " + Pct(TargetOverLater),
		get(h, func(pr *PatternResult) string { return Pct(pr.OverFirst.Max) }) + " / " + get(c, func(pr *PatternResult) string { return Pct(pr.OverFirst.Max) }),
		waited, wait,
	}
}

func patternsRender(results []*Result, render func(columns []string, rows [][]string, left int) string) string {
	h, c := patternRuns(results, ModeHybrid), patternRuns(results, ModeCentral)
	if h == nil && c == nil {
		return ""
	}
	var rows [][]string
	for _, p := range Patterns {
		for _, a := range PatternsAlgos {
			hp, cp := patternOf(h, p, a), patternOf(c, p, a)
			if hp == nil && cp == nil {
				continue
			}
			rows = append(rows, patternCells(p, a, hp, cp))
		}
	}
	return render(patternsColumns, rows, 2)
}

// PatternsTable renders the api-patterns table as aligned text, with a line
// per run below it (empty when there is no such run).
func PatternsTable(results []*Result) string {
	t := patternsRender(results, align)
	if t == "" {
		return ""
	}
	return t + patternsRunsText(results, "")
}

// PatternsMarkdown renders the api-patterns table as Markdown, with a line
// per run below it.
func PatternsMarkdown(results []*Result) string {
	t := patternsRender(results, markdownRows)
	if t == "" {
		return ""
	}
	return t + "\n" + patternsRunsText(results, "- ")
}

// patternsRunsText describes each api-patterns run in a line: its
// verdict, rates, lateness and Redis cost.
func patternsRunsText(results []*Result, bullet string) string {
	var b strings.Builder
	for _, m := range PatternsModes {
		r := patternRuns(results, m)
		if r == nil {
			continue
		}
		fmt.Fprintf(&b, "%s%s run: %s; %.0f requests/s offered, %.0f decided on time; late p99 %.1f ms; decision latency p50/p99 %s / %s µs; ",
			bullet, r.ran(), r.Verdict(), r.OfferedRate, r.AchievedRate, r.Lateness.P99, us(r.Latency.P50), us(r.Latency.P99))
		fmt.Fprintf(&b, "%s scripts per decision; Redis CPU %.0f%%", Num(r.ScriptsPerDecision), r.RedisCPUPct)
		if r.ModeRun == ModeHybrid && r.Rounds > 1 {
			fmt.Fprintf(&b, "; sync p50/p99 %s/%s ms", ms(r.Sync.P50), ms(r.Sync.P99))
		}
		if pr := patternOf(r, PatChange, AlgoFixed); pr != nil && !math.IsNaN(float64(pr.ChangeSpread)) {
			fmt.Fprintf(&b, "; the nodes applied each limit change within %.1f ms of each other", float64(pr.ChangeSpread))
		}
		if r.Spec.Wait != "" {
			fmt.Fprintf(&b, "; hybrid rules' wait: %s", r.Spec.Wait)
		}
		b.WriteString("\n")
	}
	return b.String()
}

// PatternsTargets checks the api-patterns targets against the hybrid run,
// each beside central's figure on the same planned arrivals.
func PatternsTargets(results []*Result) []Check {
	h, c := patternRuns(results, ModeHybrid), patternRuns(results, ModeCentral)
	if h == nil {
		return nil
	}
	var out []Check
	note := ""
	if !h.Valid {
		note = "run " + h.Verdict()
	}
	for _, p := range Patterns {
		for _, a := range PatternsAlgos {
			hp := patternOf(h, p, a)
			if hp == nil {
				continue
			}
			cp := patternOf(c, p, a)
			what := p + ", " + a
			cf := func(f func(*PatternResult) string) string {
				if cp == nil {
					return ""
				}
				return "; central " + f(cp)
			}
			out = append(out, Check{
				Target: fmt.Sprintf("false refusals ≤ %.1f%% of the exact replay's admissions: %s", TargetFalseRefusalPct, what),
				Measured: fmt.Sprintf("%.3f%% (%d of %d)%s", hp.FalseRefusalPct, hp.FalseRefusals, hp.Exact,
					cf(func(pr *PatternResult) string { return fmt.Sprintf("%.3f%%", pr.FalseRefusalPct) })),
				Pass: hp.FalseRefusalPct <= TargetFalseRefusalPct, Note: note,
			})
			if p == PatRetry {
				out = append(out, Check{
					Target: fmt.Sprintf("retries at RetryAfter refused again ≤ %.0f%%: %s", TargetRetryRefusedPct, what),
					Measured: fmt.Sprintf("%.2f%% (%d of %d; exact replay %.2f%%)%s", hp.RetryRefusedPct, hp.RetriesRefused, hp.Retries, hp.RetryExactRefusedPct,
						cf(func(pr *PatternResult) string { return fmt.Sprintf("%.2f%%", pr.RetryRefusedPct) })),
					Pass: hp.RetryRefusedPct <= TargetRetryRefusedPct, Note: note,
				})
			}
			out = append(out, Check{
				Target:   fmt.Sprintf("over-admission ≤ %s per window after a key's first: %s", Pct(TargetOverLater), what),
				Measured: "max " + Pct(hp.OverLater.Max) + cf(func(pr *PatternResult) string { return "max " + Pct(pr.OverLater.Max) }),
				Pass:     !(hp.OverLater.Max > TargetOverLater), Note: note,
			})
		}
	}
	return out
}

// patternsSection renders the api-patterns table, its targets and its
// method under a heading of level h ("##"); empty without such runs.
func patternsSection(results []*Result, h string) string {
	t := PatternsMarkdown(results)
	if t == "" {
		return ""
	}
	var b strings.Builder
	fmt.Fprintf(&b, "\n%s API patterns: false refusals\n\n", h)
	b.WriteString(patternsText(results) + "\n\n")
	b.WriteString(t)
	fmt.Fprintf(&b, "\n%s# API patterns targets\n\n", h)
	b.WriteString(ChecksMarkdown(PatternsTargets(results)))
	fmt.Fprintf(&b, "\n%s# API patterns: method\n\n", h)
	b.WriteString(patternsMethod)
	return b.String()
}

// patternsText describes the api-patterns runs as they were run.
func patternsText(results []*Result) string {
	var s Spec
	for _, m := range PatternsModes {
		if r := patternRuns(results, m); r != nil {
			s = r.Spec
			break
		}
	}
	return fmt.Sprintf("The patterns an API meets first, each on users of its own, with the fixed window and GCRA: N = %d node processes, "+
		"one warm-up window, then %d measured windows of %v; hybrid (the library's defaults) and central mode decide the same planned arrivals, "+
		"each run beside an exact replay of its own decisions. Every user's rule is %d per %v (GCRA: burst %d); each session lasts one window "+
		"and starts at a random time, so users keep arriving cold; each request goes to a random node unless said otherwise. "+
		"**burst**: a session opens with k requests at one instant, one per node in turn, k log-uniform from 2 to the capacity (the limit; GCRA's burst), "+
		"then steady use at most half of what the window has left (GCRA: half the rate). "+
		"**two-rules**: every request is one AllowMulti of the user's rule and its IP's (%d per %v, GCRA burst %d), all or nothing; "+
		"half the IPs have one user, the others 2 to 5, each from 5 to 60 requests per window, one in twenty at twice the user limit. "+
		"**retry**: clients asking from 0.5 to 3 × the limit; refused, a client sends nothing until the refusal's time + RetryAfter, then the same request "+
		"(to a random node), and again while refused (at most %d times). "+
		"**limit-change**: users asking 0.3 to 1.8 × the limit; every node calls Limiter.SetLimit at one planned instant to raise the limit to %d "+
		"(a third through the measured windows), then to lower it to %d (two thirds through), GCRA's burst a tenth of the limit.",
		s.Nodes, s.Windows, s.Window, PatLimit, s.Window, PatBurstB, PatIPLimit, s.Window, PatIPBurstB, PatMaxRetries, PatPhases[1], PatPhases[2])
}

const patternsMethod = `**False refusals.** A false refusal is a request refused where an exact limiter admits it: one
local.Limiter (one per rule) replaying the same requests at the same times, the times on Redis's clock at
which they were decided, with a limit change applied as each node applied it. It is measured per key and
window as Σ max(0, exact − admitted), divided by what the exact replay admits, leaving out the requests within
one clock resolution (1 ms) of a window's edge, where the time a node read from its clock cannot tell which
window the limiter decided in. The replay's times: a fixed window's decision is at the end of the window it
counted in less its ResetAfter, which is the limiter's own clock (Redis's in central mode, the node's estimate
of it in hybrid mode) to the µs; a GCRA decision is at the node's call (hybrid; its return when it waited for
a lease), or the middle of its round trip (central). Two rules are replayed as one (local.AllowMultiAt), all
or nothing; a limit change by local.Limiter.SetLimit before each request decided under the other limit
(requests carry the limit their node had in force, read under the lock that SetLimit takes in the node).

**Central's figure is the floor.** Where a limit binds, the order of concurrent requests decides which are
admitted, and the replay's order can differ from the run's (central: up to 16 requests in flight per node,
their times estimated from the round trip); so even central mode, exact by construction, shows some false
refusals on the same arrivals. Read hybrid's beside it.

**Retries.** A retry is sent at the refusal's time as the node's client saw it (the call's return) plus
its RetryAfter, to a random node, over a Unix datagram socket between the node processes. Retries refused
again: % of the retries in the measured windows that the run refused; the exact replay's column is how many
of the same retries the exact limiter refuses.

**Over-admission** as the api-users table: per key and window after the key's first window, admitted ÷ L
− 1 (fixed window), the largest excess of an interval ending in the window over the arrival curve ÷ L
(GCRA); two rules, users' and IPs' keys each against their rule; across a limit change, L is the largest limit
a key's requests in the window were decided under, and GCRA's curve starts afresh at the change.

**Waited**: decisions that waited for a lease (the decisions hybridlimit.lease.waits counts, where the library has them), and the wait's
p50 and p99. Each node decides with 16 goroutines in both modes, so that requests waiting for a lease wait
side by side, as a server's would.
`
