// Command redistable turns the output of several runs of the Redis
// benchmarks (bench/redisbench) into the tables of docs/redis.md: the median
// of every metric over the runs, and the targets of central mode's GCRA
// checked against redis_rate measured in the same runs.
//
//	go test -run '^$' -bench Redis -benchtime 1x ./redisbench/ > runs.txt   (several times)
//	go test -run '^$' -bench Memory -benchtime 1x ./redisbench/ >> runs.txt (once)
//	go run ./cmd/redistable < runs.txt
//
// It exits with status 1 when a target is missed, 2 when the input holds no
// Redis benchmark, so scripts can tell.
package main

import (
	"bufio"
	"flag"
	"fmt"
	"io"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/hybridlimit/hybridlimit/bench/internal/table"
)

// The implementations compared by the targets.
const (
	ours = "gcra"
	peer = "peer-redis_rate"
)

// results are the metrics of each benchmark over the runs: name → unit →
// one value per run.
type results struct {
	m     map[string]map[string][]float64
	order []string // names as first seen
}

var line = regexp.MustCompile(`^Benchmark(\S+?)(?:-\d+)?\s+\d+\s+(.*)$`)

func parse(r io.Reader) (*results, error) {
	res := &results{m: map[string]map[string][]float64{}}
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		m := line.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		f := strings.Fields(m[2])
		if len(f)%2 != 0 {
			continue
		}
		name := m[1]
		if res.m[name] == nil {
			res.m[name] = map[string][]float64{}
			res.order = append(res.order, name)
		}
		for i := 0; i < len(f); i += 2 {
			v, err := strconv.ParseFloat(f[i], 64)
			if err != nil {
				return nil, fmt.Errorf("%s: %q: %w", name, f[i], err)
			}
			res.m[name][f[i+1]] = append(res.m[name][f[i+1]], v)
		}
	}
	return res, sc.Err()
}

// get returns the median of a metric and whether it was measured.
func (r *results) get(name, unit string) (float64, bool) {
	v := r.m[name][unit]
	if len(v) == 0 {
		return 0, false
	}
	return table.Median(v), true
}

// cell formats a metric's median, or "-".
func (r *results) cell(name, unit, format string) string {
	v, ok := r.get(name, unit)
	if !ok {
		return "-"
	}
	return fmt.Sprintf(format, v)
}

// targets returns, in order, the targets of BenchmarkRedis (or
// BenchmarkMemory) found.
func (r *results) targets(bench string) []string {
	var ts []string
	for _, name := range r.order {
		rest, ok := strings.CutPrefix(name, bench+"/")
		if !ok {
			continue
		}
		t := rest
		if bench == "Redis" {
			parts := strings.Split(rest, "/")
			if len(parts) < 3 {
				continue
			}
			t = strings.Join(parts[:len(parts)-2], "/")
		}
		if !slices.Contains(ts, t) {
			ts = append(ts, t)
		}
	}
	return ts
}

func (r *results) runs(bench string) int {
	n := 0
	for name, ms := range r.m {
		if strings.HasPrefix(name, bench+"/") {
			for _, v := range ms {
				n = max(n, len(v))
			}
		}
	}
	return n
}

type check struct {
	what, got, target, verdict string
}

func main() {
	markdown := flag.Bool("markdown", false, "print Markdown tables")
	flag.Parse()
	res, err := parse(os.Stdin)
	if err != nil {
		fmt.Fprintln(os.Stderr, "redistable:", err)
		os.Exit(2)
	}
	if len(res.targets("Redis")) == 0 && len(res.targets("Memory")) == 0 {
		fmt.Fprintln(os.Stderr, "redistable: no BenchmarkRedis or BenchmarkMemory lines on stdin")
		os.Exit(2)
	}

	if ts := res.targets("Redis"); len(ts) > 0 {
		fmt.Printf("Admitted workload: 10,000 keys at 1,000/s each, every request admitted (log: window kept full). Medians of %d runs.\n\n", res.runs("Redis"))
		rows := [][]string{{"target", "ops/s 64g", "p50 µs 1g", "p99 µs 1g", "server µs/call 64g", "server µs/call 1g", "server CPU µs/req 64g", "client CPU µs/req 64g", "admitted % 64g"}}
		for _, t := range ts {
			a64, a1 := "Redis/"+t+"/admitted/64g", "Redis/"+t+"/admitted/1g"
			rows = append(rows, []string{t,
				res.cell(a64, "ops/s", "%.0f"), res.cell(a1, "p50-us", "%.1f"), res.cell(a1, "p99-us", "%.1f"),
				res.cell(a64, "server-us/call", "%.2f"), res.cell(a1, "server-us/call", "%.2f"),
				res.cell(a64, "server-cpu-us/op", "%.2f"), res.cell(a64, "client-cpu-us/op", "%.2f"), res.cell(a64, "admit-pct", "%.1f")})
		}
		table.Print(os.Stdout, rows, *markdown)

		fmt.Printf("\nRejected workload: the same keys at 1/hour each, every key over its limit (log: window full). Medians of %d runs.\n\n", res.runs("Redis"))
		rows = [][]string{{"target", "ops/s 64g", "p50 µs 64g", "p99 µs 64g", "server µs/call 64g", "server CPU µs/req 64g", "client CPU µs/req 64g", "admitted % 64g"}}
		for _, t := range ts {
			r64 := "Redis/" + t + "/rejected/64g"
			rows = append(rows, []string{t,
				res.cell(r64, "ops/s", "%.0f"), res.cell(r64, "p50-us", "%.0f"), res.cell(r64, "p99-us", "%.0f"),
				res.cell(r64, "server-us/call", "%.2f"), res.cell(r64, "server-cpu-us/op", "%.2f"), res.cell(r64, "client-cpu-us/op", "%.2f"), res.cell(r64, "admit-pct", "%.1f")})
		}
		table.Print(os.Stdout, rows, *markdown)
	}

	if ts := res.targets("Memory"); len(ts) > 0 {
		fmt.Printf("\nMemory per user key: MEMORY USAGE <key> SAMPLES 0 (median over the keys; state + log list), and used_memory growth / keys.\n\n")
		rows := [][]string{{"state", "keys", "MEMORY USAGE B/key", "state B", "log list B", "used_memory Δ B/key"}}
		for _, t := range ts {
			n := "Memory/" + t
			rows = append(rows, []string{t, res.cell(n, "keys", "%.0f"), res.cell(n, "B/key", "%.0f"),
				res.cell(n, "state-B/key", "%.0f"), res.cell(n, "log-B/key", "%.0f"), res.cell(n, "used-B/key", "%.0f")})
		}
		table.Print(os.Stdout, rows, *markdown)
	}

	checks := targetChecks(res)
	if len(checks) == 0 {
		return
	}
	fmt.Printf("\nTargets: central mode's GCRA against redis_rate (GCRA in Lua): the median of the per-run ratios ours/theirs.\n\n")
	rows := [][]string{{"check", "measured", "target", "verdict"}}
	missed, counted := 0, 0
	for _, c := range checks {
		if c.verdict != "info" {
			counted++
		}
		if c.verdict == "MISSED" {
			missed++
		}
		rows = append(rows, []string{c.what, c.got, c.target, c.verdict})
	}
	table.Print(os.Stdout, rows, *markdown)
	fmt.Printf("\n%d of %d targets met.\n", counted-missed, counted)
	if missed > 0 {
		os.Exit(1)
	}
}

// targetChecks compares our GCRA with redis_rate: server-side cost per call
// no higher, 64-goroutine throughput at least 0.95×, in the admitted
// workload's throughput phase; the other phases are shown for information.
// Each run measured both a few seconds apart, so the verdict is on the
// median of the per-run ratios, which drift between runs does not move.
func targetChecks(res *results) []check {
	var checks []check
	verdict := func(ok, counted bool) string {
		switch {
		case !counted:
			return "info"
		case ok:
			return "ok"
		}
		return "MISSED"
	}
	for _, ph := range []struct {
		phase   string
		counted bool
	}{{"admitted/64g", true}, {"admitted/1g", false}, {"rejected/64g", false}} {
		o, p := "Redis/"+ours+"/"+ph.phase, "Redis/"+peer+"/"+ph.phase
		for _, m := range []struct {
			unit, what, target string
			ok                 func(r float64) bool
		}{
			{"server-us/call", "server µs/call", "≤ 1.00×", func(r float64) bool { return r <= 1 }},
			{"ops/s", "ops/s", "≥ 0.95×", func(r float64) bool { return r >= 0.95 }},
		} {
			if m.unit == "ops/s" && ph.phase == "admitted/1g" {
				continue
			}
			r, lo, hi, ok := res.ratio(o, p, m.unit)
			if !ok {
				continue
			}
			ov, _ := res.get(o, m.unit)
			pv, _ := res.get(p, m.unit)
			checks = append(checks, check{
				m.what + ", " + ph.phase,
				fmt.Sprintf("%.2f× (runs %.2f–%.2f); medians %s vs %s", r, lo, hi, num(ov), num(pv)),
				m.target, verdict(m.ok(r), ph.counted)})
		}
	}
	return checks
}

func num(v float64) string {
	if v >= 1000 {
		return fmt.Sprintf("%.0f", v)
	}
	return fmt.Sprintf("%.2f", v)
}

// ratio returns the median, least and greatest of a/b over the runs that
// measured both.
func (r *results) ratio(a, b, unit string) (med, lo, hi float64, ok bool) {
	av, bv := r.m[a][unit], r.m[b][unit]
	var rs []float64
	for i := range min(len(av), len(bv)) {
		if bv[i] != 0 {
			rs = append(rs, av[i]/bv[i])
		}
	}
	if len(rs) == 0 {
		return 0, 0, 0, false
	}
	slices.Sort(rs)
	return table.Median(rs), rs[0], rs[len(rs)-1], true
}
