// Command regions is the multi-region benchmark (make bench-regions):
// regions of node processes, a redis-server per region and a global one,
// each region's link to the global store a TCP proxy (internal/netproxy)
// that adds a one-way latency and can be cut. One key under one global
// limit L per fixed window, Poisson arrivals, scenarios: uniform traffic,
// traffic moving from region to region over the run, one region alone, a
// region cut off from the global store mid-run, the global store killed
// mid-run and restarted empty. Each node runs today's two answers side by
// side on the same arrivals: (C) a Hybrid rule of global reach (Rule.Global), its
// regions leasing parts of L from a global Redis of its own, (A) a Central rule against the global Redis,
// asked on every request, and (B) each region limited to L ÷ regions, a
// hybrid rule against its own Redis. It prints admitted ÷ L per window,
// globally and per region, decision latency and the traffic that crosses
// regions.
//
//	regions -windows 24 -latency 0,40ms,40ms [-scenario cut] [-v]
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hybridlimit/hybridlimit/internal/netproxy"
	"github.com/hybridlimit/hybridlimit/internal/redisproc"
)

// opts are the run's flags.
type opts struct {
	limit     int64
	window    time.Duration
	windows   int // measured windows per scenario
	faultFrom int // the fault's first window, and the first after it
	faultTo   int
	load      float64 // offered ÷ L, all regions together
	regions   int
	nodes     int // node processes per region
	latency   []time.Duration
	seed      int64
	verbose   bool
	log       bool
	// timeout and syncTimeout are A's Config.Timeout and Sync.Timeout.
	timeout, syncTimeout time.Duration
	modes                []string      // the modes each node runs
	warm                 time.Duration // offered before the measured windows
	jsonOut, svgOut      string        // where to write the results and the shift run's plot
}

func main() {
	nodeJSON := flag.String("node", "", "run as a node process (internal): its spec as JSON")
	var o opts
	flag.Int64Var(&o.limit, "limit", 1000, "the global limit L per window")
	flag.DurationVar(&o.window, "window", time.Second, "the fixed window (e.g. 1s, 60s)")
	flag.IntVar(&o.windows, "windows", 24, "measured windows per scenario")
	flag.IntVar(&o.faultFrom, "fault-from", 0, "cut, kill: the first window of the fault (default a third of the way in)")
	flag.IntVar(&o.faultTo, "fault-to", 0, "cut, kill: the first window after the fault (default a quarter of the windows later)")
	flag.Float64Var(&o.load, "load", 2, "offered ÷ L, all regions together")
	flag.IntVar(&o.nodes, "nodes", 3, "node processes per region")
	lat := flag.String("latency", "0,40ms,40ms", "one-way latency of each region's link to the global Redis (region 0 is its home); their count is the regions'")
	flag.Int64Var(&o.seed, "seed", 1, "the Poisson arrivals' seed")
	only := flag.String("scenario", "", "run only these scenarios, comma-separated: "+strings.Join(scenarioNames(), ", "))
	flag.BoolVar(&o.verbose, "v", false, "print every window")
	flag.DurationVar(&o.timeout, "timeout", time.Second, "A: each central decision's bound (Config.Timeout; the library's default 250ms times out on a loaded machine across an 80ms round trip)")
	flag.DurationVar(&o.syncTimeout, "sync-timeout", time.Second, "A: the sync rounds' bound (Sync.Timeout; the library's default, Interval = 100ms, times out across a slow link)")
	flag.BoolVar(&o.log, "log", false, "the nodes' Limiters log their warnings on stderr")
	dir := flag.String("dir", "", "where the redis-servers keep their files (default a temporary directory)")
	ms := flag.String("modes", strings.Join(modes, ","), "the modes each node runs, side by side: "+strings.Join(modes, ", "))
	flag.DurationVar(&o.warm, "warm", 4*time.Second, "traffic offered before the measured windows: connections open, the key's parts reach every region")
	flag.StringVar(&o.jsonOut, "json", "", "write every scenario's windows, per mode, to this file as JSON")
	flag.StringVar(&o.svgOut, "svg", "", "plot the shift scenario's windows to this SVG file")
	flag.Parse()
	log.SetFlags(0)
	redis.SetLogger(quietRedis{}) // redisproc's and the nodes' clients log every failed dial
	if *nodeJSON != "" {
		var spec nodeSpec
		if err := json.Unmarshal([]byte(*nodeJSON), &spec); err != nil {
			log.Fatalf("regions node: %v", err)
		}
		if err := runNode(spec, os.Stdin, os.Stdout); err != nil {
			log.Fatalf("regions node %s: %v", spec.Name, err)
		}
		return
	}
	for _, s := range strings.Split(*lat, ",") {
		d, err := time.ParseDuration(strings.TrimSpace(s))
		if err != nil {
			log.Fatalf("regions: -latency: %v", err)
		}
		o.latency = append(o.latency, d)
	}
	o.regions = len(o.latency)
	for _, m := range strings.Split(*ms, ",") {
		if !slices.Contains(modes, m) {
			log.Fatalf("regions: -modes: unknown mode %q", m)
		}
		o.modes = append(o.modes, m)
	}
	if o.faultFrom == 0 {
		o.faultFrom = o.windows / 3
	}
	if o.faultTo == 0 {
		o.faultTo = o.faultFrom + max(o.windows/4, 1)
	}
	if o.regions < 2 || o.faultFrom < 0 || o.faultTo <= o.faultFrom || o.faultTo > o.windows {
		log.Fatalf("regions: need 2 or more regions and 0 <= -fault-from < -fault-to <= -windows")
	}
	var run []scenario
	for _, s := range scenarios {
		if *only == "" || slices.Contains(strings.Split(*only, ","), s.name) {
			run = append(run, s)
		}
	}
	if len(run) == 0 {
		log.Fatalf("regions: no scenario in %q", *only)
	}
	if err := bench(o, *dir, run); err != nil {
		log.Fatalf("regions: %v", err)
	}
}

// env is the run's servers and links.
type env struct {
	regional []*redisproc.Redis
	global   *redisproc.Redis
	links    []*netproxy.Proxy // region i's link to the global Redis
	store    *redisproc.Redis  // C's global Redis
	slinks   []*netproxy.Proxy // region i's link to C's
}

func (e *env) close() {
	for _, p := range append(e.links, e.slinks...) {
		p.Close()
	}
	if e.store != nil {
		e.store.Close()
	}
	for _, r := range e.regional {
		r.Close()
	}
	if e.global != nil {
		e.global.Close()
	}
}

func startEnv(o opts, dir string) (*env, error) {
	e := &env{}
	var err error
	if e.global, err = redisproc.Start(filepath.Join(dir, "global")); err != nil {
		return e, err
	}
	if e.store, err = redisproc.Start(filepath.Join(dir, "store")); err != nil {
		return e, err
	}
	for i := range o.regions {
		r, err := redisproc.Start(filepath.Join(dir, fmt.Sprintf("region%d", i)))
		if err != nil {
			return e, err
		}
		e.regional = append(e.regional, r)
		p, err := netproxy.Start(e.global.Addr, o.latency[i])
		if err != nil {
			return e, err
		}
		e.links = append(e.links, p)
		if p, err = netproxy.Start(e.store.Addr, o.latency[i]); err != nil {
			return e, err
		}
		e.slinks = append(e.slinks, p)
	}
	return e, nil
}

func bench(o opts, dir string, run []scenario) error {
	if dir == "" {
		tmp, err := os.MkdirTemp("", "regions")
		if err != nil {
			return err
		}
		defer os.RemoveAll(tmp)
		dir = tmp
	}
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	e, err := startEnv(o, dir)
	defer e.close()
	if err != nil {
		return err
	}
	fmt.Printf("%d regions × %d node processes, L = %d per %v, offered %.1f × L, links to the global Redis %v one way, %d windows per scenario; A's Timeout %v, Sync.Timeout %v\n\n",
		o.regions, o.nodes, o.limit, o.window, o.load, o.latency, o.windows, o.timeout, o.syncTimeout)
	var results []result
	for _, sc := range run {
		res, err := runScenario(o, e, exe, sc)
		if err != nil {
			return fmt.Errorf("%s: %w", sc.name, err)
		}
		if o.verbose {
			printWindows(o, res)
		}
		results = append(results, res)
	}
	printTable(o, results)
	if o.jsonOut != "" {
		if err := writeJSON(o, results, o.jsonOut); err != nil {
			return err
		}
	}
	for _, r := range results {
		if o.svgOut != "" && r.sc.name == "shift" {
			if err := os.WriteFile(o.svgOut, []byte(plotShift(o, r)), 0o644); err != nil {
				return err
			}
		}
	}
	return nil
}

// node is a node process.
type node struct {
	cmd   *exec.Cmd
	in    io.WriteCloser // the start, once every node is ready
	mu    sync.Mutex
	lines []line
	ready chan struct{}
	done  chan struct{}
	err   error
}

// startNode starts exe as a node of spec; ready is closed once its
// Limiters are built.
func startNode(exe string, spec nodeSpec) (*node, error) {
	js, err := json.Marshal(spec)
	if err != nil {
		return nil, err
	}
	n := &node{ready: make(chan struct{}), done: make(chan struct{})}
	n.cmd = exec.Command(exe, "-node", string(js))
	n.cmd.Stderr = os.Stderr
	n.cmd.Env = append(os.Environ(), "GOMAXPROCS=1")
	out, err := n.cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if n.in, err = n.cmd.StdinPipe(); err != nil {
		return nil, err
	}
	if err := n.cmd.Start(); err != nil {
		return nil, err
	}
	go func() {
		defer close(n.done)
		sc := bufio.NewScanner(out)
		sc.Buffer(nil, 64<<20) // a window's line carries its latencies
		for sc.Scan() {
			var l line
			if json.Unmarshal(sc.Bytes(), &l) != nil {
				continue
			}
			if l.Ready {
				close(n.ready)
				continue
			}
			n.mu.Lock()
			n.lines = append(n.lines, l)
			n.mu.Unlock()
		}
		n.err = n.cmd.Wait()
	}()
	return n, nil
}

func (n *node) kill() {
	n.cmd.Process.Signal(syscall.SIGKILL)
	<-n.done
}
