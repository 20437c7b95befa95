// Command benchtable turns the output of several runs of the micro
// benchmarks (bench/micro) into the table of docs/performance.md: the median
// of each benchmark over the runs, and every budget of the design checked
// against the baseline measured in the same runs.
//
//	go test -run '^$' -bench . -benchmem -count 1 ./micro/ > runs.txt  (several times)
//	go run ./cmd/benchtable < runs.txt
//
// It exits with status 1 when a budget is missed, so scripts can tell.
package main

import (
	"bufio"
	"flag"
	"fmt"
	"io"
	"os"
	"regexp"
	"strconv"
	"strings"

	"github.com/hybridlimit/hybridlimit/bench/internal/table"
)

// sample is one benchmark's results over the runs.
type sample struct {
	ns, bytes, allocs []float64
}

var line = regexp.MustCompile(`^(Benchmark\S+?)(?:-\d+)?\s+\d+\s+([\d.]+) ns/op(?:\s+([\d.]+) B/op\s+([\d.]+) allocs/op)?`)

func parse(r io.Reader) (map[string]*sample, []string, error) {
	res := map[string]*sample{}
	var order []string
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		m := line.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		name := strings.TrimPrefix(m[1], "Benchmark")
		s, ok := res[name]
		if !ok {
			s = &sample{}
			res[name] = s
			order = append(order, name)
		}
		ns, _ := strconv.ParseFloat(m[2], 64)
		s.ns = append(s.ns, ns)
		if m[3] != "" {
			b, _ := strconv.ParseFloat(m[3], 64)
			a, _ := strconv.ParseFloat(m[4], 64)
			s.bytes = append(s.bytes, b)
			s.allocs = append(s.allocs, a)
		}
	}
	return res, order, sc.Err()
}

type check struct {
	what   string
	got    string
	budget string
	ok     bool
}

func main() {
	markdown := flag.Bool("markdown", false, "print Markdown tables")
	flag.Parse()
	res, order, err := parse(os.Stdin)
	if err != nil {
		fmt.Fprintln(os.Stderr, "benchtable:", err)
		os.Exit(2)
	}
	if len(res) == 0 {
		fmt.Fprintln(os.Stderr, "benchtable: no benchmark lines on stdin")
		os.Exit(2)
	}
	ns := func(name string) float64 {
		if s, ok := res[name]; ok {
			return table.Median(s.ns)
		}
		return 0
	}
	runs := 0
	for _, s := range res {
		runs = max(runs, len(s.ns))
	}

	// Table 1: every benchmark, medians.
	fmt.Printf("Medians of %d runs (ns/op; B/op, allocs/op).\n\n", runs)
	rows := [][]string{{"benchmark", "ns/op", "B/op", "allocs/op", "runs"}}
	for _, name := range order {
		s := res[name]
		rows = append(rows, []string{name, fmt.Sprintf("%.1f", table.Median(s.ns)), fmt.Sprintf("%.0f", table.Median(s.bytes)), fmt.Sprintf("%.0f", table.Median(s.allocs)), strconv.Itoa(len(s.ns))})
	}
	table.Print(os.Stdout, rows, *markdown)

	// Table 2: the budgets.
	var checks []check
	floor1m := ns("Floor/1m-at")
	xrate := ns("Peer/xrate/hot-allow")
	// The RunParallel budget's context: the same ratio for a bare word
	// (Floor/hot-word), the least an exact limiter on one key loses to a
	// second core under the same harness.
	wordRatio := ""
	if w, wp := ns("Floor/hot-word"), ns("Floor/hot-word-par"); w > 0 && wp > 0 {
		wordRatio = fmt.Sprintf(" (a bare word: %.3f×)", w/wp)
	}
	for _, name := range order {
		algo, ok := strings.CutPrefix(name, "Local/")
		if !ok || !strings.HasSuffix(algo, "/hot-at") {
			continue
		}
		algo = strings.TrimSuffix(algo, "/hot-at")
		p := "Local/" + algo + "/"
		hot, allow, par := ns(p+"hot-at"), ns(p+"hot-allow"), ns(p+"hot-at-par")
		if hot > 0 {
			checks = append(checks, check{algo + ": AllowNAt, hot key", fmt.Sprintf("%.1f ns", hot), "≤ 25 ns", hot <= 25})
		}
		if allow > 0 && xrate > 0 {
			r := xrate / allow
			checks = append(checks, check{algo + ": Allow vs x/time/rate Allow", fmt.Sprintf("%.1f ns, %.2f× faster (x/time/rate %.1f ns)", allow, r, xrate), "≥ 2×", r >= 2})
		}
		if par > 0 && hot > 0 {
			r := hot / par // throughput(par) / throughput(single)
			checks = append(checks, check{algo + ": hot key, RunParallel vs 1 goroutine", fmt.Sprintf("%.3f× the throughput%s", r, wordRatio), "≥ 0.7×", r >= 0.7})
		}
		for _, c := range []string{"1k-at", "1k-at-par", "1k-allow"} {
			if v := ns(p + c); v > 0 {
				rate := 1e3 / v // million decisions per second
				checks = append(checks, check{algo + ": 1K hot keys (" + c + ")", fmt.Sprintf("%.1f M decisions/s", rate), "≥ 10 M/s", rate >= 10})
			}
		}
		for _, c := range []string{"1m-at", "1m-allow"} {
			if v := ns(p + c); v > 0 && floor1m > 0 {
				r := v / floor1m
				checks = append(checks, check{algo + ": 1M uniform keys vs floor (" + c + ")", fmt.Sprintf("%.0f ns, %.3f× the floor (%.1f ns)", v, r, floor1m), "≤ 1.25×", r <= 1.25})
			}
		}
		worst := 0.0
		for _, n := range order {
			if strings.HasPrefix(n, p) {
				worst = max(worst, table.Median(res[n].allocs))
			}
		}
		checks = append(checks, check{algo + ": allocations per decision", fmt.Sprintf("%.0f", worst), "0", worst == 0})
	}
	// Hybrid mode's hot path against Local mode's, both through one
	// hybrid.Limiter (BenchmarkHybrid; skipped without Redis).
	for _, c := range []string{"hot", "hot-par"} {
		loc, hyb := ns("Hybrid/local/"+c), ns("Hybrid/hybrid/"+c)
		if loc > 0 && hyb > 0 {
			r := hyb / loc
			checks = append(checks, check{"hybrid vs local mode, " + c, fmt.Sprintf("%.1f vs %.1f ns, %.3f×", hyb, loc, r), "≤ 1.10×", r <= 1.10})
		}
	}
	fmt.Printf("\nBudgets (docs/performance.md), each against a baseline measured in the same runs.\n\n")
	rows = [][]string{{"check", "measured", "budget", "verdict"}}
	missed := 0
	for _, c := range checks {
		v := "ok"
		if !c.ok {
			v = "MISSED"
			missed++
		}
		rows = append(rows, []string{c.what, c.got, c.budget, v})
	}
	table.Print(os.Stdout, rows, *markdown)
	fmt.Printf("\n%d of %d budgets met.\n", len(checks)-missed, len(checks))
	if missed > 0 {
		os.Exit(1)
	}
}
