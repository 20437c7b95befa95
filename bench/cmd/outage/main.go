// Command outage is the outage benchmark (make bench-outage): node
// processes (internal/cmd/gossipnode) against a redis-server it kills for
// ten windows and restarts empty, or stops (SIGSTOP) and resumes. Each node
// runs every failure mode side by side on the same arrivals: Gossip
// (gossip), FailLocal (even split), each node alone (local, the whole limit
// per node) and FailClosed. Workloads: uniform, 90% of the key's traffic on
// one node, all of it on one node, a sixth node joining mid-outage, a node
// killed mid-outage. It prints admitted ÷ limit per window, writes the
// table to -doc and plots to -img.
//
//	outage -node .run/outage/gossipnode -doc docs/outage.md -img docs/img
package main

import (
	"flag"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"time"

	"github.com/hybridlimit/hybridlimit/bench/accuracy"
	"github.com/hybridlimit/hybridlimit/internal/outage"
)

// nodes is how many node processes a workload starts (-nodes).
var nodes = 5

const (
	warm    = 3  // windows before the fault
	outageW = 10 // windows of the fault
	after   = 4  // windows after Redis returns
	eventAt = 3  // windows into the outage, a node joins or dies
)

var workloads = []string{"uniform", "90% on one", "all on one", "6th joins", "1 killed"}

// rates returns the workload's per-node offered rates for a load of
// offered requests per second in all, and the joiner's rate (0: none).
func rates(wl string, offered float64) (base []float64, joiner float64) {
	base = make([]float64, nodes)
	switch wl {
	case "90% on one":
		base[0] = 0.9 * offered
		for i := 1; i < nodes; i++ {
			base[i] = 0.1 * offered / float64(nodes-1)
		}
	case "all on one":
		base[0] = offered
	default:
		for i := range base {
			base[i] = offered / float64(nodes)
		}
	}
	if wl == "6th joins" {
		joiner = offered / float64(nodes)
	}
	return base, joiner
}

// opts are the run's flags that every node's Spec carries.
var opts struct {
	modes   []string
	poisson bool
	seed    int64
	tuned   bool
}

type scenario struct {
	fault, algo string
	load        float64
	wl          string
	wins        map[string]map[int64]outage.Line
	w0          int64 // the first warm window's id
}

func main() {
	node := flag.String("node", "", "the gossipnode binary")
	doc := flag.String("doc", "", "write the report (markdown) here")
	img := flag.String("img", "", "write the plots (SVG) in this directory")
	limit := flag.Int64("limit", 1000, "the limit L per 1s window")
	onlyFault := flag.String("fault", "", "run only this fault (kill, stop)")
	onlyAlgo := flag.String("algo", "", "run only this algorithm (fixed, bucket)")
	onlyLoad := flag.Float64("load", 0, "run only this load (1.5, 5)")
	onlyWorkload := flag.String("workload", "", "run only this workload (uniform, 90% on one, all on one, 6th joins, 1 killed)")
	verbose := flag.Bool("v", false, "print every window's admitted ÷ L, mode by mode")
	flag.IntVar(&nodes, "nodes", nodes, "node processes per workload")
	arrivals := flag.String("arrivals", "steady", "arrivals at each node: steady (evenly spaced) or poisson")
	seed := flag.Int64("seed", 1, "the Poisson arrivals' seed")
	flag.BoolVar(&opts.tuned, "tuned", false, "gossip faster than the defaults (records every 50ms, memberlist's gossip every 20ms)")
	modes := flag.String("modes", strings.Join(outage.Modes, ","), "the modes each node runs, comma-separated ("+strings.Join(append(outage.Modes, outage.ModeFailOpen), ", ")+")")
	flag.Parse()
	opts.modes = strings.Split(*modes, ",")
	switch *arrivals {
	case "steady":
	case "poisson":
		opts.poisson, opts.seed = true, *seed
	default:
		fmt.Fprintf(os.Stderr, "outage: -arrivals %q: want steady or poisson\n", *arrivals)
		os.Exit(2)
	}
	if *node == "" {
		fmt.Fprintln(os.Stderr, "outage: need -node")
		os.Exit(2)
	}
	W := time.Second
	started := time.Now()
	loadBefore := loadavg()
	var all []*scenario
	for _, fault := range []string{"kill", "stop"} {
		for _, algo := range []string{"fixed window", "token bucket"} {
			for _, load := range []float64{1.5, 5} {
				if *onlyFault != "" && *onlyFault != fault || *onlyAlgo != "" && !strings.Contains(algo, *onlyAlgo) || *onlyLoad != 0 && *onlyLoad != load {
					continue
				}
				var group []*scenario
				for _, wl := range workloads {
					if *onlyWorkload == "" || *onlyWorkload == wl {
						group = append(group, &scenario{fault: fault, algo: algo, load: load, wl: wl})
					}
				}
				if len(group) == 0 {
					fmt.Fprintf(os.Stderr, "outage: no workload %q\n", *onlyWorkload)
					os.Exit(2)
				}
				if err := runGroup(*node, group, *limit, W); err != nil {
					fmt.Fprintln(os.Stderr, "outage:", err)
					os.Exit(1)
				}
				for _, s := range group {
					fmt.Fprintln(os.Stderr, row(s, *limit))
					if *verbose {
						fmt.Fprint(os.Stderr, windows(s, *limit))
					}
				}
				all = append(all, group...)
			}
		}
	}
	table := report(all, *limit) + fmt.Sprintf("\n%d runs in %v; load average %s at the start, %s at the end (%d CPUs).\n",
		len(all), time.Since(started).Round(time.Second), loadBefore, loadavg(), runtime.NumCPU())
	fmt.Print(table)
	if *img != "" {
		for _, s := range all {
			if s.fault == "kill" && s.algo == "fixed window" && s.load == 5 && (s.wl == "90% on one" || s.wl == "uniform") {
				name := "outage-" + strings.ReplaceAll(strings.ReplaceAll(s.wl, "% on one", ""), " ", "-") + ".svg"
				if err := os.WriteFile(filepath.Join(*img, name), []byte(plot(s, *limit)), 0o644); err != nil {
					fmt.Fprintln(os.Stderr, "outage:", err)
				}
			}
		}
	}
	if *doc != "" {
		if err := os.WriteFile(*doc, []byte(docText(table)), 0o644); err != nil {
			fmt.Fprintln(os.Stderr, "outage:", err)
			os.Exit(1)
		}
	}
}

// loadavg returns the one-minute load average, or "?" where /proc has
// none: the runs share the machine, and its load shows in the figures.
func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if f := strings.Fields(string(b)); err == nil && len(f) > 0 {
		return f[0]
	}
	return "?"
}

// runGroup runs scenarios that share a fault's timeline at once, against
// one redis-server.
func runGroup(exe string, group []*scenario, limit int64, W time.Duration) error {
	dir, err := os.MkdirTemp("", "outage")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	rd, err := outage.StartRedis(dir)
	if err != nil {
		return err
	}
	defer rd.Close()
	key := []byte("0123456789abcdef0123456789abcdef")
	// The timeline, in windows from start: warm, fault, event, return, end.
	start := time.Now().Truncate(W).Add(4 * W)
	fault := start.Add(warm*W + W/10)
	event := fault.Add(eventAt*W + W/2)
	back := start.Add((warm+outageW)*W + W/10)
	end := start.Add((warm + outageW + after) * W)
	type live struct {
		s      *scenario
		procs  []*outage.Proc
		joiner float64
	}
	var runs []*live
	for gi, s := range group {
		base, joiner := rates(s.wl, s.load*float64(limit))
		spec := outage.Spec{Redis: rd.Addr, Prefix: fmt.Sprintf("g%d", gi), Key: key, Nodes: nodes, Limit: limit, Window: W,
			Bucket: s.algo == "token bucket", ProbeInterval: 200 * time.Millisecond, SuspicionMult: 2,
			Modes: opts.modes, Poisson: opts.poisson, Seed: opts.seed, Tuned: opts.tuned}
		r := &live{s: s, joiner: joiner}
		runs = append(runs, r)
		for i, rate := range base {
			sp := spec
			sp.Name, sp.Rate, sp.Duration = fmt.Sprintf("n%d", i), rate, time.Until(end)
			if i > 0 {
				sp.Seeds = []string{r.procs[0].Gossip}
			}
			p, err := outage.Start(exe, sp)
			if err != nil {
				return err
			}
			r.procs = append(r.procs, p)
		}
	}
	for _, r := range runs {
		r.s.w0 = start.UnixMicro() / W.Microseconds()
	}
	time.Sleep(time.Until(fault))
	if group[0].fault == "kill" {
		rd.Kill()
	} else {
		rd.Pause()
	}
	time.Sleep(time.Until(event))
	for _, r := range runs {
		switch r.s.wl {
		case "6th joins":
			sp := r.procs[0].Spec
			sp.Name, sp.Rate, sp.Duration, sp.Seeds = "n5", r.joiner, time.Until(end), []string{r.procs[0].Gossip}
			p, err := outage.Start(exe, sp)
			if err != nil {
				return err
			}
			r.procs = append(r.procs, p)
		case "1 killed":
			r.procs[nodes-1].Kill()
		}
	}
	time.Sleep(time.Until(back))
	if group[0].fault == "kill" {
		if err := rd.Restart(); err != nil {
			return err
		}
	} else {
		rd.Resume()
	}
	for _, r := range runs {
		for _, p := range r.procs {
			p.Wait()
		}
		r.s.wins = outage.Windows(r.procs...)
	}
	return nil
}

// phase names window i (from the first warm one) of the timeline.
func phase(i int64) string {
	switch {
	case i < warm:
		return "before"
	case i == warm:
		return "fault"
	case i < warm+outageW:
		return "outage"
	case i == warm+outageW:
		return "return"
	}
	return "after"
}

type summary struct {
	mean, lo, hi       float64 // outage windows but the first: admitted ÷ L
	first, ev, ret, mx float64 // the fault's window, the one after the event, the return window, the most after it
	failed             int64
}

func summarize(s *scenario, mode string, limit int64) summary {
	sm := summary{lo: math.Inf(1), hi: math.Inf(-1)}
	var sum float64
	var n int
	for id, l := range s.wins[mode] {
		i := id - s.w0
		x := float64(l.Admitted) / float64(limit)
		sm.failed += l.Failed
		switch {
		case i == warm:
			sm.first = x
		case i > warm && i < warm+outageW:
			sum += x
			n++
			sm.lo, sm.hi = min(sm.lo, x), max(sm.hi, x)
			if i == warm+eventAt+1 {
				sm.ev = x
			}
		case i == warm+outageW:
			sm.ret = x
		case i > warm+outageW && i < warm+outageW+after:
			sm.mx = max(sm.mx, x)
		}
	}
	if n > 0 {
		sm.mean = sum / float64(n)
	}
	return sm
}

func row(s *scenario, limit int64) string {
	var b strings.Builder
	fmt.Fprintf(&b, "| %s | %s | %.1f × L | %s |", s.fault, s.algo, s.load, s.wl)
	for _, m := range opts.modes {
		sm := summarize(s, m, limit)
		fmt.Fprintf(&b, " %.2f [%.2f–%.2f] |", sm.mean, sm.lo, sm.hi)
	}
	fb := summarize(s, outage.ModeFallback, limit)
	ev := "–"
	if s.wl == "6th joins" || s.wl == "1 killed" {
		ev = fmt.Sprintf("%.2f", fb.ev)
	}
	var failed int64
	for _, m := range opts.modes {
		failed += summarize(s, m, limit).failed
	}
	fmt.Fprintf(&b, " %.2f / %s / %.2f / %.2f | %d |", fb.first, ev, fb.ret, fb.mx, failed)
	return b.String()
}

// windows lists s's windows, admitted ÷ L mode by mode, and the slowest
// decision.
func windows(s *scenario, limit int64) string {
	var b strings.Builder
	for i := int64(0); i < warm+outageW+after; i++ {
		fmt.Fprintf(&b, "  %2d %-7s", i, phase(i))
		for _, m := range opts.modes {
			l := s.wins[m][s.w0+i]
			fmt.Fprintf(&b, " %s %.2f (%v)", m, float64(l.Admitted)/float64(limit), time.Duration(l.MaxLatency).Round(time.Microsecond))
		}
		b.WriteString("\n")
	}
	return b.String()
}

func report(all []*scenario, limit int64) string {
	var b strings.Builder
	b.WriteString("| Redis | algorithm | offered | workload | Gossip | FailLocal | alone | FailClosed | Gossip: fault window / after the event / return window / max after | failed |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|---|\n")
	for _, s := range all {
		b.WriteString(row(s, limit) + "\n")
	}
	return b.String()
}

var colors = map[string]string{outage.ModeFallback: "#1b9e77", outage.ModeFailLocal: "#d95f02", outage.ModeAlone: "#7570b3", outage.ModeFailClosed: "#e7298a"}

func plot(s *scenario, limit int64) string {
	c := accuracy.Chart{
		Title:  fmt.Sprintf("Redis killed for %d windows: %s, %s, %.0f × L offered", outageW, s.wl, s.algo, s.load),
		XLabel: fmt.Sprintf("window (1 s); Redis down in windows %d–%d", warm, warm+outageW-1),
		YLabel: "admitted ÷ L", LinearX: true,
	}
	for _, m := range opts.modes {
		ser := accuracy.Series{Name: m, Color: colors[m], Radius: 3}
		ids := make([]int64, 0, len(s.wins[m]))
		for id := range s.wins[m] {
			ids = append(ids, id)
		}
		sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
		for _, id := range ids {
			if i := id - s.w0; i >= 0 && i < warm+outageW+after {
				ser.X = append(ser.X, float64(i))
				ser.Y = append(ser.Y, float64(s.wins[m][id].Admitted)/float64(limit))
			}
		}
		c.Series = append(c.Series, ser)
	}
	return c.SVG()
}

const docIntro = `Measured by ` + "`make bench-outage`" + ` (bench/cmd/outage): five node processes
(internal/cmd/gossipnode, GOMAXPROCS=1 each) on one machine, a fixed window of L = 1,000 per
second or a token bucket of 1,000 per second (burst 100), offered 1.5 × L or 5 × L in all,
against one redis-server killed (SIGKILL, then restarted empty) or stopped (SIGSTOP, then
resumed) for ten windows. Every node runs each mode side by side on the same arrivals, each
with its own Redis keys: **Gossip** (the gossip estimate), **FailLocal** (the limit split
evenly over the nodes last seen), **alone** (each node a local limiter of the whole limit, what
a fallback to local limits gives) and **FailClosed**. The five workloads of one load and
algorithm run at once, against the same Redis.

Cells are admitted ÷ L per window: the mean over the outage's whole windows but the first,
with the lowest and highest in brackets; the Gossip column set gives the window Redis died
in, the window after the sixth node joined or a node was killed (mid-outage), the window Redis
came back in, and the most admitted in the three windows after it. "failed" counts decisions
that came with an error, in every mode: a policy's decision is an ordinary one (nil error,
Decision.Degraded).
`

const docNotes = `
## Reading it

- **Gossip** gives each node its own count plus its demand-weighted share of what the
  window has left, from the counts and demand the nodes gossip (memberlist, records fed at
  every sync round, not per decision). With skewed traffic it keeps about L where FailLocal
  admits about L ÷ N plus the idle nodes' small demand.
- Until a node hears of the others' counts in a window it may admit its share s of the whole
  limit, and it goes on admitting on that claim while the others hear of its first counts
  there. An estimate therefore counts every member with demand at least at its share of the
  limit, and the node itself too, as far as the others leave room: it may admit
  max(own, s × L) + s × (L − the sum of those).
  Were a peer counted at its count alone (0 while its latest record is of the window before),
  each node would take its share of a remainder the peer has already claimed. Records are
  queued every Interval and gossiped every GossipInterval (200 ms each by default), so a
  record is 0.1–0.6 s old when a snapshot sums it, and for the first half of a 1 s window a
  node sees some of its peers' previous window: on the defaults, Poisson arrivals at 5 × L,
  seeds 1–4, windows reached 1.17 × L at 4 nodes and 1.12 × L at 5 (1.01–1.06 × L on average
  per seed).
- Past its share, a member takes its share of what the window has left, and that part lags:
  were a node's own count fresher than the others', it would take its share of a remainder
  they have eaten into since their records left. A snapshot counts the node's own count as
  old as the peers' latest records are at that moment (their mean age by the senders'
  clocks, so skewed clocks across hosts bias it). With ε the excess over 1 of the shares the
  nodes give themselves (each weighs its own demand against the others' as gossiped), the
  window admits at most

      L × (1 + ε) + Σ_i s_i × Σ_j [R_j × (a_ij − ā_i)⁺ + s_j × L for a member j whose record
                                  of the key i has not had yet]

  where R_j is the rate member j admits at past its share of the limit, a_ij the age of its
  record at node i's snapshot (up to Interval + the gossip's delay) and ā_i the age node i
  takes its own count at; the reserve only sets how small an idle member's share s_j is
  (Reserve ÷ N). Spread traffic stops near each node's share (R ≈ 0), and a node's claim
  goes no further than the others leave, so what is left is the demands' noise: on the
  defaults, Poisson arrivals at 5 × L, seeds 1–4, 1.00 × L on average and 0.99–1.01 × L in
  every outage window, at 4 nodes and at 5. A member whose traffic stops holds its share for
  the rest of the window, and its share shrinks with its demand (DemandHalfLife).
- A node joining during the outage counts in every node's member count once memberlist has
  gossiped its join, and its demand once its first record arrives; a killed node's share goes
  to the others once memberlist declares it dead (suspected members still count, so a
  partition does not hand each side the whole limit).
- Token bucket and GCRA rules under Gossip give each node, per key, rate × share and
  burst × share, its demand-weighted share from the same snapshot (an even split for a key no
  node has gossiped yet), so skewed traffic keeps about L too. Unlike a window's remainder,
  the part of the rate the reserve leaves idle nodes is not split again as the outage goes
  on: with all the traffic on one node the cluster keeps (1 − reserve × (N − 1) ÷ N) × L,
  0.96 × L here.
- When Redis returns, replies in a window the outage touched grant nothing on top of what
  each node held for ten sync intervals, while every node reports what it admitted without
  Redis (absolute per-window reports: once, whatever the retries); the process test
  internal/outage checks that Redis's count of that window equals what the nodes admitted.
  Bucket rules take no tokens from Redis's pool for those ten intervals, only their share of
  the rate: Redis, restarted full or not yet told every node's debt, would hand out again a
  burst the nodes spent without it. That share is no more than the policy's part (the
  node's gossip share of the rate and burst) for those ten intervals too: nodes reach Redis
  again at different moments, up to about a second apart (after failed dials, go-redis
  tries a server again about once a second), and Redis splits the rate among the nodes it
  has heard from, as if the others wanted none, while those go on admitting their part by
  the policy. A node that joined during the outage, never known to Redis, is one of them:
  were the others' shares not cut, their 1/5 of the rate each would come on top of its 1/6
  (about 1.1 × L in the return window).
- "alone" admits N × L throughout: no coordination at all.
`

func docText(table string) string {
	return "# Through a Redis outage\n\n" + docIntro + "\n" + table + docPlots + docNotes
}

const docPlots = `
Admitted per window through the outage, mode by mode (fixed window, Redis killed, 5 × L
offered):

![90% of the traffic on one node](img/outage-90.svg)

![uniform traffic](img/outage-uniform.svg)
`
