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
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/hybridlimit/hybridlimit/bench/accuracy"
	"github.com/hybridlimit/hybridlimit/internal/outage"
	"github.com/hybridlimit/hybridlimit/internal/redisproc"
)

const (
	warm    = 3  // windows before the fault
	outageW = 10 // windows of the fault
	after   = 4  // windows after Redis returns
	eventAt = 3  // windows into the outage, a node joins or dies
)

// faults are what happens to Redis: killed and restarted empty, stopped
// (SIGSTOP) and resumed, or the master of a Sentinel group or of the keys'
// Cluster slot killed (SIGKILL), its replica promoted, and the old master
// restarted as a replica when the others return.
var faults = []string{"kill", "stop", "sentinel", "cluster"}

var workloads = []string{"uniform", "90% on one", "all on one", "one joins", "one killed"}

// setup is how a run's arrivals come: evenly spaced at 5 nodes, or a
// Poisson process at each of 4 nodes (what the estimate's bound must hold
// beyond its own workload).
type setup struct {
	arrivals string
	nodes    int
}

var setups = []setup{{"steady", 5}, {"poisson", 4}}

// rates returns the workload's per-node offered rates at nodes for a load
// of offered requests per second in all, and the joiner's rate (0: none).
func rates(wl string, offered float64, nodes int) (base []float64, joiner float64) {
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
	if wl == "one joins" {
		joiner = offered / float64(nodes)
	}
	return base, joiner
}

// opts are the run's flags that every node's Spec carries.
var opts struct {
	modes []string
	seed  int64
	tuned bool
}

type scenario struct {
	fault, algo string
	setup
	load float64
	wl   string
	wins map[string]map[int64]outage.Line
	w0   int64 // the first warm window's id
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
	nodes := flag.Int("nodes", 0, "node processes per workload (default 5 steady, 4 Poisson)")
	onlyArrivals := flag.String("arrivals", "", "run only these arrivals: steady (evenly spaced) or poisson")
	flag.Int64Var(&opts.seed, "seed", 1, "the Poisson arrivals' seed")
	flag.BoolVar(&opts.tuned, "tuned", false, "gossip faster than the defaults (records every 50ms, memberlist's gossip every 20ms)")
	everyMode := []string{outage.ModeFallback, outage.ModeFailLocal, outage.ModeFailClosed, outage.ModeFailOpen, outage.ModeAlone}
	modes := flag.String("modes", strings.Join(everyMode, ","), "the modes each node runs, comma-separated")
	flag.Parse()
	opts.modes = strings.Split(*modes, ",")
	var sets []setup
	for _, st := range setups {
		if *nodes > 0 {
			st.nodes = *nodes
		}
		if *onlyArrivals == "" || *onlyArrivals == st.arrivals {
			sets = append(sets, st)
		}
	}
	if len(sets) == 0 {
		fmt.Fprintf(os.Stderr, "outage: -arrivals %q: want steady or poisson\n", *onlyArrivals)
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
	var groups [][]*scenario
	for _, fault := range faults {
		for _, algo := range []string{"fixed window", "token bucket"} {
			for _, load := range []float64{1.5, 5} {
				for _, st := range sets {
					if *onlyFault != "" && *onlyFault != fault || *onlyAlgo != "" && !strings.Contains(algo, *onlyAlgo) || *onlyLoad != 0 && *onlyLoad != load {
						continue
					}
					if *onlyFault == "" && (fault == "sentinel" || fault == "cluster") && load != 5 {
						continue // a failover at the higher load is enough
					}
					var group []*scenario
					for _, wl := range workloads {
						if *onlyWorkload == "" || *onlyWorkload == wl {
							group = append(group, &scenario{fault: fault, algo: algo, setup: st, load: load, wl: wl})
						}
					}
					if len(group) == 0 {
						fmt.Fprintf(os.Stderr, "outage: no workload %q\n", *onlyWorkload)
						os.Exit(2)
					}
					groups = append(groups, group)
				}
			}
		}
	}
	for _, group := range groups {
		if err := runGroup(*node, group, *limit, W); err != nil {
			fmt.Fprintln(os.Stderr, "outage:", err)
			os.Exit(1)
		}
		for _, s := range group {
			fmt.Fprintln(os.Stderr, row(s, *limit))
			if *verbose {
				fmt.Fprint(os.Stderr, windows(s, *limit))
				if s.algo == "token bucket" {
					for _, m := range curveModes {
						ex := curveExcess(s, m, *limit, W)
						fmt.Fprintf(os.Stderr, "  %s excess ÷ B: %.2f at %v, %.2f at %v, %.2f at %v\n", m,
							ex.before, time.Duration(ex.at[0])*time.Microsecond, ex.outage, time.Duration(ex.at[1])*time.Microsecond,
							ex.after, time.Duration(ex.at[2])*time.Microsecond)
					}
				}
			}
		}
		all = append(all, group...)
	}
	table := report(all, *limit)
	if slices.ContainsFunc(all, func(s *scenario) bool { return s.algo == "token bucket" }) {
		table += curveIntro + curveReport(all, *limit, W)
	}
	table += fmt.Sprintf("\n%d runs in %v; load average %s at the start, %s at the end (%d CPUs).\n",
		len(all), time.Since(started).Round(time.Second), loadBefore, loadavg(), runtime.NumCPU())
	fmt.Print(table)
	if *img != "" {
		for _, s := range all {
			name := ""
			switch {
			case s.fault == "kill" && s.algo == "fixed window" && s.load == 5 && s.arrivals == "steady" && (s.wl == "90% on one" || s.wl == "uniform"):
				name = "outage-" + strings.ReplaceAll(strings.ReplaceAll(s.wl, "% on one", ""), " ", "-") + ".svg"
			case (s.fault == "sentinel" || s.fault == "cluster") && s.algo == "fixed window" && s.arrivals == "poisson" && s.wl == "uniform":
				name = "outage-" + s.fault + ".svg"
			}
			if name != "" {
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
	tg, err := startTarget(group[0].fault, dir)
	if err != nil {
		return err
	}
	defer tg.close()
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
		base, joiner := rates(s.wl, s.load*float64(limit), s.nodes)
		spec := outage.Spec{Prefix: fmt.Sprintf("g%d", gi), Key: key, Nodes: s.nodes, Limit: limit, Window: W,
			Bucket: s.algo == "token bucket", ProbeInterval: 200 * time.Millisecond, SuspicionMult: 2,
			Modes: opts.modes, Poisson: s.arrivals == "poisson", Seed: opts.seed, Tuned: opts.tuned}
		tg.point(&spec)
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
	if err := tg.fault(); err != nil {
		return err
	}
	time.Sleep(time.Until(event))
	for _, r := range runs {
		switch r.s.wl {
		case "one joins":
			sp := r.procs[0].Spec
			sp.Name, sp.Rate, sp.Duration, sp.Seeds = fmt.Sprintf("n%d", len(r.procs)), r.joiner, time.Until(end), []string{r.procs[0].Gossip}
			p, err := outage.Start(exe, sp)
			if err != nil {
				return err
			}
			r.procs = append(r.procs, p)
		case "one killed":
			r.procs[len(r.procs)-1].Kill()
		}
	}
	time.Sleep(time.Until(back))
	if err := tg.back(); err != nil {
		return err
	}
	for _, r := range runs {
		for _, p := range r.procs {
			p.Wait()
		}
		r.s.wins = outage.Windows(r.procs...)
	}
	return nil
}

// target is the Redis a group runs against, and its fault.
type target struct {
	kind     string
	single   *redisproc.Redis
	sentinel *redisproc.Sentinel
	cluster  *redisproc.Cluster
}

func startTarget(kind, dir string) (*target, error) {
	t := &target{kind: kind}
	var err error
	switch kind {
	case "sentinel":
		t.sentinel, err = redisproc.StartSentinel(dir)
	case "cluster":
		t.cluster, err = redisproc.StartCluster(dir, 1)
	default:
		t.single, err = redisproc.Start(dir)
	}
	return t, err
}

// point has spec's nodes use t.
func (t *target) point(spec *outage.Spec) {
	switch {
	case t.sentinel != nil:
		spec.Sentinels, spec.Master = t.sentinel.Addrs, t.sentinel.Master
	case t.cluster != nil:
		spec.Cluster = t.cluster.Addrs
	default:
		spec.Redis = t.single.Addr
	}
}

// fault kills the server (kill), stops it (stop), or kills the master the
// keys are on (sentinel, cluster: a replica is promoted).
func (t *target) fault() error {
	switch t.kind {
	case "kill":
		t.single.Kill()
	case "stop":
		t.single.Pause()
	case "sentinel":
		m, err := t.sentinel.CurrentMaster()
		if err != nil {
			return err
		}
		m.Kill()
	case "cluster":
		m, err := t.cluster.MasterWith("*{r:*")
		if err != nil {
			return err
		}
		m.Kill()
	}
	return nil
}

// back restarts the server empty (kill), resumes it (stop), or restarts
// the killed master, which rejoins as a replica (sentinel, cluster).
func (t *target) back() error {
	switch t.kind {
	case "kill":
		return t.single.Restart()
	case "stop":
		t.single.Resume()
	case "sentinel":
		return t.sentinel.Heal()
	case "cluster":
		return t.cluster.Heal()
	}
	return nil
}

func (t *target) close() {
	switch {
	case t.sentinel != nil:
		t.sentinel.Close()
	case t.cluster != nil:
		t.cluster.Close()
	default:
		t.single.Close()
	}
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

// row is s's line of the table: per mode, the outage's mean [lowest–highest]
// and the return window / the most after it; the Gossip mode's fault
// window and the window after the event; the failed decisions.
func row(s *scenario, limit int64) string {
	var b strings.Builder
	fmt.Fprintf(&b, "| %s | %s | %s | %.1f × L | %s |", s.fault, s.algo, s.arrivals, s.load, s.wl)
	var failed int64
	for _, m := range opts.modes {
		sm := summarize(s, m, limit)
		fmt.Fprintf(&b, " %.2f [%.2f–%.2f] · %.2f / %.2f |", sm.mean, sm.lo, sm.hi, sm.ret, sm.mx)
		failed += sm.failed
	}
	if slices.Contains(opts.modes, outage.ModeFallback) {
		fb := summarize(s, outage.ModeFallback, limit)
		ev := "–"
		if s.wl == "one joins" || s.wl == "one killed" {
			ev = fmt.Sprintf("%.2f", fb.ev)
		}
		fmt.Fprintf(&b, " %.2f / %s |", fb.first, ev)
	}
	fmt.Fprintf(&b, " %d |", failed)
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
	b.WriteString("| Redis | algorithm | arrivals | offered | workload |")
	sep := "|---|---|---|---|---|"
	for _, m := range opts.modes {
		b.WriteString(" " + modeNames[m] + " |")
		sep += "---|"
	}
	if slices.Contains(opts.modes, outage.ModeFallback) {
		b.WriteString(" Gossip: fault window / after the event |")
		sep += "---|"
	}
	b.WriteString(" failed |\n" + sep + "---|\n")
	for _, s := range all {
		b.WriteString(row(s, limit) + "\n")
	}
	return b.String()
}

// modeNames are the modes' names in the table.
var modeNames = map[string]string{outage.ModeFallback: "Gossip", outage.ModeFailLocal: "FailLocal", outage.ModeAlone: "alone",
	outage.ModeFailClosed: "FailClosed", outage.ModeFailOpen: "FailOpen"}

var colors = map[string]string{outage.ModeFallback: "#1b9e77", outage.ModeFailLocal: "#d95f02", outage.ModeAlone: "#7570b3",
	outage.ModeFailClosed: "#e7298a", outage.ModeFailOpen: "#66a61e"}

func plot(s *scenario, limit int64) string {
	c := accuracy.Chart{
		Title:  fmt.Sprintf("Redis killed for %d windows: %s, %s, %.0f × L offered", outageW, s.wl, s.algo, s.load),
		XLabel: fmt.Sprintf("window (1 s); Redis down in windows %d–%d", warm, warm+outageW-1),
		YLabel: "admitted ÷ L", LinearX: true,
	}
	if s.fault == "sentinel" || s.fault == "cluster" {
		c.Title = fmt.Sprintf("%s failover: %s, %s, %.0f × L offered", s.fault, s.wl, s.algo, s.load)
		c.XLabel = fmt.Sprintf("window (1 s); the master killed in window %d", warm)
	}
	for _, m := range opts.modes {
		if m == outage.ModeAlone || m == outage.ModeFailOpen {
			continue // off the scale
		}
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

const docIntro = `Measured by ` + "`make bench-outage`" + ` (bench/cmd/outage): node processes
(internal/cmd/gossipnode, GOMAXPROCS=1 each) on one machine, a fixed window of L = 1,000 per
second or a token bucket of 1,000 per second (burst 100), offered 1.5 × L or 5 × L in all,
evenly spaced at each of 5 nodes (steady) or as a Poisson process at each of 4 (poisson). The
faults: one redis-server killed (SIGKILL, then restarted empty) or stopped (SIGSTOP, then
resumed) for ten windows; a master with a replica and three Sentinels, or a Cluster of three
masters with a replica each, whose master of the keys is killed (its replica promoted, the
old master restarted as a replica ten windows later). Every node runs each mode side by side
on the same arrivals, each with its own Redis keys: **Gossip** (the gossip estimate),
**FailLocal** (the limit split evenly over the nodes last seen), **FailClosed**, **FailOpen**
and, for the kill and stop faults, **alone** (each node a local limiter of the whole limit,
what a fallback to local limits gives). The five workloads of one load, algorithm and setup
run at once, against the same Redis.

Cells are admitted ÷ L per window: the mean over the fault's whole windows but the first
(ten windows; after a failover, the promoted replica serves from the second or third), with
the lowest and highest in brackets, then the window Redis came back in (the killed master
restarted, after a failover) and the most admitted in the three windows after it. The last
columns give Gossip's window Redis died in and the window after a node joined or was killed
(mid-outage), and "failed" counts decisions that came with an error, in every mode: a policy's
decision is an ordinary one (nil error, Decision.Degraded). A node decides its modes one
after the other on one core, so a decision that waits for Redis (up to Config.Timeout, before
the breaker opens) delays the others' arrivals: the fault window's figures are low for it.
`

const curveIntro = `
The token bucket's rows against its arrival curve: the most the nodes together admitted over
any span since the key's first request beyond the burst B plus the rate's refill over that
span, ÷ B, for spans ending before the fault / from the fault to Redis's return / after it
(0: within the curve).
FailOpen and alone pass it by design.

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
  gossiped its join, and its demand once its first record arrives. A member that falls
  silent counts on: while memberlist only suspects it, at its last demand and claim; once
  memberlist declares it dead (seconds on the LAN defaults), at the live members' mean
  demand, holding 1 ÷ N of the limit, until it is back or Redis is reachable again. A node
  cannot tell a dead peer from the far side of a partition, and a side that dropped the far
  side's members would split the whole limit among itself: k sides, up to k × L a window. So
  the split stays at the most members seen since Redis was last reachable (and at least
  SyncConfig.Nodes), less the nodes that left (a Limiter's Close announces it), and each side
  of a partition admits about its members ÷ N of L, the sides about L between them. In the
  test hybrid/gossip_partition_test.go (4 nodes, a fixed window, 5 × L offered, the gossip
  split 2|2 or 3|1 past memberlist's dead-node detection, then healed), the windows once
  the far side was declared dead admitted 1.0–1.1 × L on average (each side of 2|2
  0.50–0.55 × L; the three of 3|1 0.77–0.85 × L and the one 0.25 × L), where dropping the
  dead admitted 2.0–2.1 × L; before the split, while the far side was only suspected and
  after healing, 1.0–1.1 × L. A suspected member counts at the demand and claim it last
  gossiped, not at what it asks since, so a machine whose stalls throw the demands off
  (2 cores at load average 7–20) saw up to 1.4 × L in those windows, the lone node of 3|1
  taking two to three times its part, and up to 1.1 × L once the far side was dead.
  The cost: a node killed during the outage leaves its share idle until
  Redis returns (the cluster keeps (N − 1) ÷ N × L, 0.8 × L here, where the "one killed"
  rows above, measured before this rule, show its share going to the others).
- Token bucket and GCRA rules under Gossip give each node, per key, rate × share and
  burst × share, its demand-weighted share from the same snapshot (an even split for a key no
  node has gossiped yet), so skewed traffic keeps about L too. Unlike a window's remainder,
  the part of the rate the reserve leaves idle nodes is not split again as the outage goes
  on: with all the traffic on one node the cluster keeps (1 − reserve × (N − 1) ÷ N) × L,
  0.96 × L here. A bucket key's part, under any policy that keeps one, begins with what the
  node held when Redis went (its share's tokens and its part of the pool's, as its last
  reply left them), not with a fresh burst: the nodes, which had spent the burst through
  Redis, would otherwise each take their part of it again, 0.7-0.8 × B over the arrival
  curve through a kill. The curve table reads 0.00 through every kill, stop and Sentinel
  failover but where FailLocal counts a node that joined during the outage (its even
  split of the rate comes on top: a rate above L, not a burst); the Cluster rows, whose six
  servers share the 2 cores with the nodes, also pass it before the fault, when a node's
  call times out and its policy decides.
- When Redis returns, under every policy, replies grant nothing on top of what each node
  held for thirty sync intervals (in the window the outage touched, or one begun since, where
  a node that came back later still decides by its policy), and the node decides meanwhile
  on its part of the limit (FailLocal's even split, or Gossip's estimate), while every
  node reports what it admitted without Redis (absolute per-window reports: once, whatever
  the retries); the process test internal/outage checks that Redis's count of that window
  equals what the nodes admitted. So FailOpen, which admits everything while the breaker is
  open, adds nothing once it closes, and FailClosed admits the window's rest on its part.
  The outage counts from the breaker opening (three failed sync rounds): a round that merely
  timed out hands nothing to the policy.
  Bucket rules take no tokens from Redis's pool for those thirty intervals, only their share of
  the rate: Redis, restarted full or not yet told every node's debt, would hand out again a
  burst the nodes spent without it. That share is no more than the policy's part (the
  node's gossip share of the rate and burst, or FailLocal's even split) for those thirty
  intervals too: nodes reach Redis again at different moments, up to about two seconds apart
  (after failed dials, go-redis tries a server again about once a second, and a Cluster
  master's keys wait out a backoff of up to two), and Redis splits
  the rate among the nodes it has heard from, as if the others wanted none, while those go
  on admitting their part by the policy. A node that joined during the outage, never known
  to Redis, is one of them: were the others' shares not cut, their 1/5 of the rate each
  would come on top of its 1/6 (about 1.1 × L in the return window).
- A failover is an outage of a second or two, and a Redis that comes back with most of the
  state: the promoted replica holds every write it had received. After a Cluster failover,
  go-redis's ClusterClient would keep sending the dead master's slots to it (it reloads its
  slot map on a redirect, or once a minute); the Limiter has it reload them when Redis is out
  of reach. On a Cluster the outage is the dead master's alone: its keys go to the policy
  and are handed back once its replica answers, every reply of the window included, while
  the other masters' keys are decided as before (docs/redis.md).
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

A failover, mode by mode (fixed window, 5 × L offered, Poisson arrivals at 4 nodes; the
master killed at the start of window 3):

![Sentinel failover](img/outage-sentinel.svg)

![Cluster failover](img/outage-cluster.svg)
`
