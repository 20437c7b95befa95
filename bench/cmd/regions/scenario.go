package main

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hybridlimit/hybridlimit/internal/netproxy"
	"github.com/hybridlimit/hybridlimit/internal/redisproc"
)

// scenario is a run's traffic and fault.
type scenario struct {
	name string
	// shares returns each region's share of the offered load in window w
	// of n.
	shares func(w, n, regions int) []float64
	fault  string // "", "cut" (the last region's link) or "kill" (the global Redis)
}

var scenarios = []scenario{
	{name: "uniform", shares: uniform},
	{name: "shift", shares: shift},
	{name: "alone", shares: alone},
	{name: "cut", shares: uniform, fault: "cut"},
	{name: "kill", shares: uniform, fault: "kill"},
}

func scenarioNames() []string {
	var s []string
	for _, sc := range scenarios {
		s = append(s, sc.name)
	}
	return s
}

func uniform(_, _, regions int) []float64 {
	s := make([]float64, regions)
	for i := range s {
		s[i] = 1 / float64(regions)
	}
	return s
}

// shift moves the traffic from region 0 to the last over the run, as the
// day moves round the world: at each moment it is spread over the two
// regions either side of a point that travels at an even pace.
func shift(w, n, regions int) []float64 {
	s := make([]float64, regions)
	x := float64(w) / float64(max(n-1, 1)) * float64(regions-1)
	for i := range s {
		s[i] = max(0, 1-math.Abs(x-float64(i)))
	}
	return s
}

// alone puts all the traffic in region 1.
func alone(_, _, regions int) []float64 {
	s := make([]float64, regions)
	s[1] = 1
	return s
}

// warmFor is the windows each node offers before those measured, o.warm
// or more of them: the connections across the links open, the hybrid rules
// take their leases, the key's parts reach every region.
func warmFor(o opts) int {
	return max(1, int(math.Ceil(o.warm.Seconds()/o.window.Seconds())))
}

// result is what a scenario measured: per mode, the sums of its nodes'
// lines per measured window.
type result struct {
	sc      scenario
	offered [][]float64 // [window][region], requests offered per region
	modes   map[string]*modeResult
	// cmds is each mode's global Redis's commands per second, linkBytes the bytes
	// per second across the links outside its home region, over the
	// measured windows.
	cmds, linkBytes map[string]float64
}

type modeResult struct {
	admitted [][]int64 // [window][region]
	offered  [][]int64
	lateW    []int64 // late arrivals per window
	degW     []int64 // degraded admissions per window
	degraded int64
	errors   int64
	late     int64
	lat      []int32 // µs
}

// runScenario starts the nodes of sc, applies its fault, and sums what
// they report.
func runScenario(o opts, e *env, exe string, sc scenario) (result, error) {
	wus := o.window.Microseconds()
	warm := warmFor(o)
	total := warm + o.windows
	res := result{sc: sc, modes: map[string]*modeResult{}}
	perNode := make([][]float64, o.regions) // [region][window] rate at each node
	for i := range o.regions {
		perNode[i] = make([]float64, total)
	}
	for w := range total {
		sh := sc.shares(max(w-warm, 0), o.windows, o.regions)
		var row []float64
		for i := range o.regions {
			rate := o.load * float64(o.limit) / o.window.Seconds() * sh[i]
			perNode[i][w] = rate / float64(o.nodes)
			row = append(row, rate*o.window.Seconds())
		}
		if w >= warm {
			res.offered = append(res.offered, row)
		}
	}
	prefix := "regions:" + sc.name + ":" + strconv.FormatInt(time.Now().Unix(), 36)
	var nodes []*node
	defer func() {
		for _, n := range nodes {
			n.kill()
		}
	}()
	for i := range o.regions {
		for j := range o.nodes {
			spec := nodeSpec{Name: fmt.Sprintf("r%dn%d", i, j), Region: i, Regional: e.regional[i].Addr, Global: e.links[i].Addr(), Store: e.slinks[i].Addr(),
				Prefix: prefix, Regions: o.regions, Nodes: o.nodes, Limit: o.limit, Window: o.window,
				Rates: perNode[i], Seed: o.seed, Log: o.log, Modes: o.modes,
				Timeout: o.timeout, SyncTimeout: o.syncTimeout}
			n, err := startNode(exe, spec)
			if err != nil {
				return res, err
			}
			nodes = append(nodes, n)
		}
	}
	for _, n := range nodes {
		select {
		case <-n.ready:
		case <-n.done:
			return res, fmt.Errorf("a node exited before it was ready: %v", n.err)
		case <-time.After(time.Minute):
			return res, fmt.Errorf("a node not ready after a minute")
		}
	}
	// The first window boundary a second or more away: time for every
	// node to read it.
	start := (time.Now().Add(time.Second).UnixMicro()/wus + 1) * wus
	for _, n := range nodes {
		fmt.Fprintln(n.in, start)
		n.in.Close()
	}
	if err := timeline(o, e, sc, start, &res); err != nil {
		return res, err
	}
	for _, n := range nodes {
		<-n.done
		if n.err != nil {
			return res, fmt.Errorf("a node failed: %v", n.err)
		}
	}
	res.sum(o, start/wus+int64(warm), nodes)
	nodes = nil
	return res, nil
}

// store is a global Redis and the regions' links to it: A's, or C's.
type store struct {
	mode  string
	srv   *redisproc.Redis
	links []*netproxy.Proxy
	c0    int64 // commands at the measure's start
	b0    int64 // bytes at the measure's start
	// before is the commands counted by the server since killed; -1 when
	// unknown.
	before int64
}

func (st *store) bytes() int64 {
	var b int64
	for _, p := range st.links[1:] {
		b += p.Bytes()
	}
	return b
}

// timeline waits out the measured windows from start, applying sc's fault
// and counting each global Redis's commands and the bytes across its links.
func timeline(o opts, e *env, sc scenario, start int64, res *result) error {
	at := func(w int) time.Time {
		return time.UnixMicro(start).Add(time.Duration(warmFor(o)+w) * o.window)
	}
	stores := []*store{{mode: modeCentral, srv: e.global, links: e.links}, {mode: modeGlobal, srv: e.store, links: e.slinks}}
	time.Sleep(time.Until(at(0)))
	for _, st := range stores {
		st.c0, st.b0 = commands(st.srv.Addr), st.bytes()
	}
	if sc.fault != "" {
		time.Sleep(time.Until(at(o.faultFrom)))
		for _, st := range stores {
			switch sc.fault {
			case "cut":
				st.links[len(st.links)-1].Cut()
			case "kill":
				st.before = commands(st.srv.Addr)
				if st.before >= 0 && st.c0 >= 0 {
					st.before -= st.c0
				} else {
					st.before = -1
				}
				st.c0 = 0
				st.srv.Kill()
			}
		}
		time.Sleep(time.Until(at(o.faultTo)))
		for _, st := range stores {
			switch sc.fault {
			case "cut":
				st.links[len(st.links)-1].Heal()
			case "kill":
				if err := st.srv.Restart(); err != nil {
					return err
				}
			}
		}
	}
	time.Sleep(time.Until(at(o.windows)))
	secs := (time.Duration(o.windows) * o.window).Seconds()
	res.cmds, res.linkBytes = map[string]float64{}, map[string]float64{}
	for _, st := range stores {
		c1 := commands(st.srv.Addr)
		res.cmds[st.mode] = float64(st.before+c1-st.c0) / secs
		if st.c0 < 0 || c1 < 0 || st.before < 0 {
			res.cmds[st.mode] = math.NaN()
		}
		res.linkBytes[st.mode] = float64(st.bytes()-st.b0) / secs
	}
	return nil
}

// commands is the count of commands the Redis at addr has processed; -1
// when INFO does not answer.
func commands(addr string) int64 {
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	info, err := c.Info(ctx, "stats").Result()
	if err != nil {
		return -1
	}
	for _, l := range strings.Split(info, "\r\n") {
		if v, ok := strings.CutPrefix(l, "total_commands_processed:"); ok {
			if n, err := strconv.ParseInt(v, 10, 64); err == nil {
				return n
			}
		}
	}
	return -1
}

// sum adds up the nodes' lines of the measured windows, from window id w0.
func (r *result) sum(o opts, w0 int64, nodes []*node) {
	for _, m := range o.modes {
		mr := &modeResult{lateW: make([]int64, o.windows), degW: make([]int64, o.windows)}
		for range o.windows {
			mr.admitted = append(mr.admitted, make([]int64, o.regions))
			mr.offered = append(mr.offered, make([]int64, o.regions))
		}
		r.modes[m] = mr
	}
	for _, n := range nodes {
		for _, l := range n.lines {
			w := l.Window - w0
			mr := r.modes[l.Mode]
			if mr == nil || w < 0 || w >= int64(o.windows) {
				continue
			}
			mr.admitted[w][l.Region] += l.Admitted
			mr.offered[w][l.Region] += l.Offered
			mr.degraded += l.Degraded
			mr.errors += l.Errors
			mr.late += l.Late
			mr.lateW[w] += l.Late
			mr.degW[w] += l.Degraded
			mr.lat = append(mr.lat, l.Lat...)
		}
	}
	for _, mr := range r.modes {
		slices.Sort(mr.lat)
	}
}

func total(v []int64) int64 {
	var s int64
	for _, x := range v {
		s += x
	}
	return s
}
