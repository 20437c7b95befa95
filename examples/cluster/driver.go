package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

// The phases of a run: Redis up, killed, started again.
const (
	phaseBefore = iota
	phaseOutage
	phaseAfter
	numPhases
)

var phaseNames = [numPhases]string{"before", "outage", "after"}

// driverOptions configure a run of the demo.
type driverOptions struct {
	nodes    int
	limit    int64
	algo     string        // the rule's algorithm: a window one, whose budget the gossip splits by demand
	duration time.Duration // of the load; Redis is killed at a third, restarted at two thirds
	out      string        // directory for the plot, logs and Redis's files
	install  bool          // install redis-server when missing
	live     bool          // redraw the table in place (a terminal)
}

// nodeRow is one node's figures over one second.
type nodeRow struct {
	admitted, refused, degraded, failed int64
	p99                                 time.Duration
	available                           bool // the node's Limiter sees Redis
	reached                             bool // the node answered /stats
}

// row is the cluster's figures over one second of the run.
type row struct {
	t       int     // seconds since the load began, at the end of the interval
	dt      float64 // the interval's length in seconds
	phase   int
	redisUp bool  // the redis-server process runs
	scripts int64 // scripts Redis ran (EVALSHA, EVAL)
	cmds    int64 // commands Redis ran, those of scripts included (the driver's INFO excluded)
	nodes   []nodeRow
	lat     []uint64 // decision latencies of every node in the interval
	// per class of client and node: admitted, refused, failed; clients active
	ok, limited, failed [numClasses][maxNodes]int64
	active              [numClasses]int64   // clients active at the end
	clientSeconds       [numClasses]float64 // Σ clients active × seconds
}

// runDriver is the driver: it starts Redis and the nodes, runs the load, kills and
// restarts Redis, draws the table, and writes the summary and the plot. It
// stops every process it started before it returns, also when ctx ends
// (Ctrl-C). It returns the run's summary.
func runDriver(ctx context.Context, o driverOptions, w io.Writer) (*summary, error) {
	if err := ensureRedis(o.install); err != nil {
		return nil, err
	}
	// go-redis logs each refused dial: expected while Redis is down.
	redis.SetLogger(quietLogger{})
	if err := os.MkdirAll(o.out, 0o755); err != nil {
		return nil, err
	}
	rs, err := startRedis(ctx, filepath.Join(o.out, "redis"))
	if err != nil {
		return nil, err
	}
	defer rs.stop()
	fmt.Fprintf(w, "redis-server pid %d on %s\n", rs.p.pid(), rs.addr())

	var nodes []*node
	defer func() {
		// Stop the nodes together: each hands its leases back within 2 s.
		for _, n := range nodes {
			n.p.cmd.Process.Signal(syscall.SIGTERM)
		}
		for _, n := range nodes {
			n.p.stop(5 * time.Second)
		}
	}()
	// The gossip: a port per node, each node seeded with the others, one
	// random key for the cluster.
	gossipKey := make([]byte, 32)
	rand.Read(gossipKey)
	gossipPorts, gossip := make([]int, o.nodes), make([]string, o.nodes)
	for i := range gossip {
		p, err := freePort()
		if err != nil {
			return nil, err
		}
		gossipPorts[i], gossip[i] = p, "127.0.0.1:"+strconv.Itoa(p)
	}
	addrs := make([]string, 0, o.nodes)
	for i := 1; i <= o.nodes; i++ {
		no := nodeOptions{id: i, nodes: o.nodes, redis: rs.addr(), limit: o.limit, algo: o.algo,
			gossipPort: gossipPorts[i-1], seeds: slices.Concat(gossip[:i-1], gossip[i:]), gossipKey: gossipKey}
		logPath := filepath.Join(o.out, fmt.Sprintf("node%d.log", i))
		n, err := startNode(ctx, no, logPath)
		if err != nil {
			return nil, err
		}
		nodes = append(nodes, n)
		addrs = append(addrs, n.addr)
		fmt.Fprintf(w, "node n%d pid %d on %s, gossip on %s (log %s)\n", i, n.p.pid(), n.addr, gossip[i-1], logPath)
	}
	wl := defaultWorkload(o.limit)
	killAt := max(int(o.duration/time.Second)/3, 1)
	restartAt := max(2*int(o.duration/time.Second)/3, killAt+1)
	seconds := max(int(o.duration/time.Second), restartAt+1)
	fmt.Fprintf(w, "limit %d requests/s per client (%s), hybrid mode, %s when Redis is down\n",
		o.limit, o.algo, fallbackName)
	fmt.Fprintf(w, "clients: 1 abuser at %.0f/s spread evenly; 1 skewed at %.0f/s, %.0f%% on n1; a new one every %v at %.0f/s for %v; %d steady at %.0f/s\n",
		wl.abuserRate, wl.skewedRate, 100*wl.skewShare, wl.newEvery, wl.newRate, wl.newLife, wl.steadyClients, wl.steadyRate)
	fmt.Fprintf(w, "Redis is killed at t=%ds and started again at t=%ds; the run ends at t=%ds\n\n", killAt, restartAt, seconds)

	var c counts
	gen := newLoadGen(wl, addrs, &c)
	loadCtx, stopLoad := context.WithCancel(ctx)
	loadDone := make(chan struct{})
	go func() {
		gen.run(loadCtx)
		close(loadDone)
	}()
	defer func() {
		stopLoad()
		<-loadDone
	}()

	poll := newPoller(addrs, rs.addr())
	defer poll.close()
	poll.sample(ctx, &c, true) // the baseline

	tab := &table{w: w, live: o.live, o: o, wl: wl, killAt: killAt, restartAt: restartAt}
	sum := &summary{limit: o.limit, wl: wl}
	start := time.Now()
	redisUp := true
	for k := 1; k <= seconds; k++ {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(time.Until(start.Add(time.Duration(k) * time.Second))):
		}
		r := poll.sample(ctx, &c, redisUp)
		r.t = k
		r.redisUp = redisUp
		switch {
		case k <= killAt:
			r.phase = phaseBefore
		case k <= restartAt:
			r.phase = phaseOutage
		default:
			r.phase = phaseAfter
		}
		sum.add(r)
		tab.draw(r)
		switch k {
		case killAt:
			pid := rs.p.pid()
			rs.kill()
			redisUp = false
			tab.note(fmt.Sprintf("t=%ds: redis-server (pid %d) killed with SIGKILL", k, pid))
		case restartAt:
			if err := rs.restart(ctx); err != nil {
				return nil, fmt.Errorf("restart Redis: %w", err)
			}
			redisUp = true
			tab.note(fmt.Sprintf("t=%ds: redis-server started again, empty (pid %d)", k, rs.p.pid()))
		}
	}
	stopLoad()
	<-loadDone
	sum.dropped = c.dropped.Load()
	for i := range c.sent {
		sum.sent += c.sent[i].Load()
	}
	fmt.Fprintln(w)
	sum.write(w)
	svgPath := filepath.Join(o.out, "timeline.svg")
	if err := os.WriteFile(svgPath, []byte(timelineSVG(sum, o, killAt, restartAt)), 0o644); err != nil {
		return sum, err
	}
	fmt.Fprintf(w, "\nplot: %s\n", svgPath)
	return sum, nil
}

// quietLogger drops go-redis's log lines.
type quietLogger struct{}

func (quietLogger) Printf(context.Context, string, ...any) {}

// poller reads the nodes' /stats and Redis's command counts, and turns the
// counters into one second's row.
type poller struct {
	addrs []string
	http  *http.Client
	redis *redis.Client
	at    time.Time
	// the previous sample's counters
	nodes               []statsReply
	scripts, cmds       int64
	ok, limited, failed [numClasses][maxNodes]int64
	clientUS            [numClasses]int64
}

func newPoller(addrs []string, redisAddr string) *poller {
	return &poller{
		addrs: addrs,
		http:  &http.Client{Timeout: 500 * time.Millisecond},
		redis: redis.NewClient(&redis.Options{Addr: redisAddr, MaxRetries: -1, DialTimeout: 100 * time.Millisecond,
			ReadTimeout: 300 * time.Millisecond, ContextTimeoutEnabled: true, PoolSize: 1}),
		nodes: make([]statsReply, len(addrs)),
	}
}

func (p *poller) close() {
	p.redis.Close()
	p.http.CloseIdleConnections()
}

// sample returns the differences since the last sample.
func (p *poller) sample(ctx context.Context, c *counts, redisUp bool) row {
	now := time.Now()
	r := row{dt: now.Sub(p.at).Seconds(), nodes: make([]nodeRow, len(p.addrs)), lat: make([]uint64, histBuckets)}
	p.at = now
	for i, a := range p.addrs {
		cur, err := p.stats(ctx, a)
		if err != nil {
			continue
		}
		prev := p.nodes[i]
		n := nodeRow{
			admitted: cur.Admitted - prev.Admitted, refused: cur.Refused - prev.Refused,
			degraded: cur.Degraded - prev.Degraded, failed: cur.Failed - prev.Failed,
			available: cur.RedisAvailable, reached: true,
		}
		d := make([]uint64, len(cur.Latency))
		for j := range cur.Latency {
			if j < len(prev.Latency) {
				d[j] = cur.Latency[j] - prev.Latency[j]
			} else {
				d[j] = cur.Latency[j]
			}
			if j < len(r.lat) {
				r.lat[j] += d[j]
			}
		}
		n.p99 = quantile(d, 0.99)
		r.nodes[i] = n
		p.nodes[i] = cur
	}
	if redisUp {
		if scripts, cmds, err := p.commands(ctx); err == nil {
			if cmds >= p.cmds {
				r.scripts, r.cmds = scripts-p.scripts, cmds-p.cmds
			} else {
				r.scripts, r.cmds = scripts, cmds // a restarted server counts from 0
			}
			p.scripts, p.cmds = scripts, cmds
		}
	} else {
		p.scripts, p.cmds = 0, 0
	}
	for cl := range numClasses {
		for n := range maxNodes {
			ok, lim, f := c.ok[cl][n].Load(), c.limited[cl][n].Load(), c.failed[cl][n].Load()
			r.ok[cl][n], r.limited[cl][n], r.failed[cl][n] = ok-p.ok[cl][n], lim-p.limited[cl][n], f-p.failed[cl][n]
			p.ok[cl][n], p.limited[cl][n], p.failed[cl][n] = ok, lim, f
		}
		r.active[cl] = c.active[cl].Load()
		us := c.clientUS[cl].Load()
		r.clientSeconds[cl] = float64(us-p.clientUS[cl]) / 1e6
		p.clientUS[cl] = us
	}
	return r
}

func (p *poller) stats(ctx context.Context, addr string) (statsReply, error) {
	var s statsReply
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/stats", nil)
	if err != nil {
		return s, err
	}
	resp, err := p.http.Do(req)
	if err != nil {
		return s, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return s, errors.New(resp.Status)
	}
	return s, json.NewDecoder(resp.Body).Decode(&s)
}

// commands returns how many scripts and commands Redis has run, from INFO
// commandstats: the commands include those the scripts call, and leave out
// the driver's own INFO calls.
func (p *poller) commands(ctx context.Context) (scripts, total int64, err error) {
	info, err := p.redis.Info(ctx, "commandstats").Result()
	if err != nil {
		return 0, 0, err
	}
	sc := bufio.NewScanner(strings.NewReader(info))
	for sc.Scan() {
		name, val, ok := strings.Cut(strings.TrimSpace(sc.Text()), ":")
		if !ok || !strings.HasPrefix(name, "cmdstat_") || name == "cmdstat_info" {
			continue
		}
		for kv := range strings.SplitSeq(val, ",") {
			if k, v, ok := strings.Cut(kv, "="); ok && k == "calls" {
				n, _ := strconv.ParseInt(v, 10, 64)
				total += n
				switch name {
				case "cmdstat_evalsha", "cmdstat_eval", "cmdstat_evalsha_ro", "cmdstat_eval_ro":
					scripts += n
				}
			}
		}
	}
	return scripts, total, sc.Err()
}
