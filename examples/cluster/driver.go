package main

import (
	"bufio"
	"cmp"
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

	"github.com/hybridlimit/hybridlimit/local"
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

// nodeRow is one node's figures over a window, from /stats at its start and
// its end.
type nodeRow struct {
	degraded, failed int64 // decisions by the failure policy; requests the Limiter could not decide
	p99              time.Duration
	available        bool // the node's Limiter sees Redis, at the window's end
	reached          bool // the node answered /stats
}

// row is one window of the run.
type row struct {
	t       int // the window's start, seconds since the load began; it lasts ruleWindow
	phase   int
	redisUp bool  // the redis-server process ran through the window
	scripts int64 // scripts Redis ran in the window (EVALSHA, EVAL)
	cmds    int64 // commands Redis ran, those of scripts included (the driver's INFO excluded)
	nodes   []nodeRow
	lat     []uint64          // decision latencies of every node
	lost    [numClasses]int64 // requests answered 5xx or not at all
	win     windowCounts      // the requests decided in the window, and the exact replay's decisions
}

// flushDelay is how long after a window's end the driver asks the nodes to
// write out their records: a request begun before the end is decided and
// recorded within it (one that is not is counted in the summary, which
// reads every record once the run is over, but not in the table).
const flushDelay = 250 * time.Millisecond

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
	lim, err := demoLimit(o.algo, o.limit)
	if err != nil {
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
	var tails []*recordTail
	defer func() {
		for _, t := range tails {
			t.close()
		}
	}()
	for i := 1; i <= o.nodes; i++ {
		no := nodeOptions{id: i, nodes: o.nodes, redis: rs.addr(), limit: o.limit, algo: o.algo,
			gossipPort: gossipPorts[i-1], seeds: slices.Concat(gossip[:i-1], gossip[i:]), gossipKey: gossipKey,
			records: filepath.Join(o.out, fmt.Sprintf("decisions-n%d.txt", i))}
		logPath := filepath.Join(o.out, fmt.Sprintf("node%d.log", i))
		n, err := startNode(ctx, no, logPath)
		for try := 0; err != nil && try < 3 && ctx.Err() == nil; try++ {
			// Its gossip port may have been taken since it was found free
			// (the machine's other servers come and go): another one. It
			// joins through its seeds, and the others learn it by gossip.
			p, perr := freePort()
			if perr != nil {
				return nil, perr
			}
			gossipPorts[i-1], gossip[i-1], no.gossipPort = p, "127.0.0.1:"+strconv.Itoa(p), p
			n, err = startNode(ctx, no, logPath)
		}
		if err != nil {
			return nil, err
		}
		nodes = append(nodes, n)
		addrs = append(addrs, n.addr)
		t, err := openRecordTail(no.records, i-1) // the node created it before it listened
		if err != nil {
			return nil, err
		}
		tails = append(tails, t)
		fmt.Fprintf(w, "node n%d pid %d on %s, gossip on %s (log %s)\n", i, n.p.pid(), n.addr, gossip[i-1], logPath)
	}
	wl := defaultWorkload(o.limit)
	killAt := max(int(o.duration/time.Second)/3, 1)
	restartAt := max(2*int(o.duration/time.Second)/3, killAt+1)
	seconds := max(int(o.duration/time.Second), restartAt+1)
	fmt.Fprintf(w, "limit %d requests per %v window per client (%s), hybrid mode, %s when Redis is down\n",
		o.limit, ruleWindow, o.algo, fallbackName)
	fmt.Fprintf(w, "clients: 1 abuser at %.0f/s spread evenly; 1 skewed at %.0f/s, %.0f%% on n1; a new one every %v at %.0f/s for %v; %d steady at %.0f/s\n",
		wl.abuserRate, wl.skewedRate, 100*wl.skewShare, wl.newEvery, wl.newRate, wl.newLife, wl.steadyClients, wl.steadyRate)

	poll := newPoller(addrs, rs.addr())
	defer poll.close()
	// The windows are Redis's: they start at multiples of ruleWindow on its
	// clock. The load begins at the start of one, so that each row of the
	// table is one window, and Redis is killed and started again between two.
	offset, err := measureOffset(ctx, poll.redis)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	redisNow := now.UnixMicro() + offset
	start := firstWindow(redisNow, ruleWindow.Microseconds(), (500 * time.Millisecond).Microseconds())
	begin := now.Add(time.Duration(start-redisNow) * time.Microsecond)
	fmt.Fprintf(w, "windows of %v aligned to Redis's clock (%+dµs from this process's); the load begins at one's start\n", ruleWindow, offset)
	fmt.Fprintf(w, "Redis is killed at t=%ds and started again at t=%ds; the run ends at t=%ds\n\n", killAt, restartAt, seconds)

	var c counts
	gen := newLoadGen(wl, addrs, &c)
	loadCtx, stopLoad := context.WithCancel(ctx)
	loadDone := make(chan struct{})
	go func() {
		gen.run(loadCtx, begin)
		close(loadDone)
	}()
	defer func() {
		stopLoad()
		<-loadDone
	}()

	if err := sleepUntil(ctx, begin); err != nil {
		return nil, err
	}
	poll.sample(ctx, &c) // the baseline
	poll.commands(ctx, true)
	live, err := newLiveWindows(lim, tails, start)
	if err != nil {
		return nil, err
	}
	defer live.close()

	tab := &table{w: w, live: o.live, o: o, wl: wl, killAt: killAt, restartAt: restartAt}
	rows := make([]row, 0, seconds)
	redisUp := true
	for k := 1; k <= seconds; k++ {
		// Window k-1 ends at begin + k windows.
		end := begin.Add(time.Duration(k) * ruleWindow)
		if err := sleepUntil(ctx, end); err != nil {
			return nil, err
		}
		r := row{t: k - 1, phase: phaseOf(k-1, killAt, restartAt), redisUp: redisUp}
		r.scripts, r.cmds = poll.commands(ctx, redisUp)
		r.nodes, r.lat, r.lost = poll.sample(ctx, &c)
		var event string
		switch k {
		case killAt:
			pid := rs.p.pid()
			rs.kill()
			redisUp = false
			event = fmt.Sprintf("t=%ds: redis-server (pid %d) killed with SIGKILL", k, pid)
		case restartAt:
			if err := rs.restart(ctx); err != nil {
				return nil, fmt.Errorf("restart Redis: %w", err)
			}
			redisUp = true
			event = fmt.Sprintf("t=%ds: redis-server started again, empty (pid %d)", k, rs.p.pid())
		}
		if err := sleepUntil(ctx, end.Add(flushDelay)); err != nil {
			return nil, err
		}
		poll.flush(ctx)
		if r.win, err = live.window(k - 1); err != nil {
			return nil, err
		}
		rows = append(rows, r)
		tab.draw(r)
		if event != "" {
			tab.note(event)
		}
	}
	stopLoad()
	<-loadDone
	// The run's figures from every record, the nodes' last ones included,
	// decided again in one pass.
	poll.flush(ctx)
	all, err := live.all()
	if err != nil {
		return nil, err
	}
	if err := replay(lim, all); err != nil {
		return nil, err
	}
	sum := &summary{limit: o.limit, wl: wl}
	for i, wc := range tally(all, start, ruleWindow.Microseconds(), len(rows)) {
		rows[i].win = wc
		sum.add(rows[i])
	}
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

// phaseOf returns the phase of window i: Redis is killed at the start of
// window killAt and started again at the start of window restartAt.
func phaseOf(i, killAt, restartAt int) int {
	switch {
	case i < killAt:
		return phaseBefore
	case i < restartAt:
		return phaseOutage
	default:
		return phaseAfter
	}
}

// sleepUntil waits until t, or until ctx ends.
func sleepUntil(ctx context.Context, t time.Time) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(time.Until(t)):
		return nil
	}
}

// liveWindows reads the nodes' records as the run goes, and decides them
// with an exact replay window by window, for the table.
type liveWindows struct {
	tails   []*recordTail
	start   int64 // the first window's start, µs on Redis's clock
	rep     *exactReplay
	pending []record // read, not decided yet: their window has not ended
	done    []record // decided
}

func newLiveWindows(lim local.Limit, tails []*recordTail, start int64) (*liveWindows, error) {
	rep, err := newExactReplay(lim)
	if err != nil {
		return nil, err
	}
	return &liveWindows{tails: tails, start: start, rep: rep}, nil
}

func (l *liveWindows) read() error {
	for _, t := range l.tails {
		recs, err := t.read()
		if err != nil {
			return err
		}
		l.pending = append(l.pending, recs...)
	}
	return nil
}

// window reads the records written since the last call, decides those
// before window i's end, and counts window i. A record of an earlier window
// read only now is decided, out of its order, but not counted.
func (l *liveWindows) window(i int) (windowCounts, error) {
	if err := l.read(); err != nil {
		return windowCounts{}, err
	}
	sortRecords(l.pending)
	w := ruleWindow.Microseconds()
	end := l.start + int64(i+1)*w
	n, _ := slices.BinarySearchFunc(l.pending, end, func(r record, t int64) int { return cmp.Compare(r.at, t) })
	ready := l.pending[:n]
	l.rep.decide(ready)
	var in []record
	for _, r := range ready {
		if windowOf(r.at, l.start, w) == i {
			in = append(in, r)
		}
	}
	l.done = append(l.done, ready...)
	l.pending = slices.Delete(l.pending, 0, n)
	return countWindow(in), nil
}

// all returns every record of the run, those written since the last read
// included, their exact decisions to be made again.
func (l *liveWindows) all() ([]record, error) {
	if err := l.read(); err != nil {
		return nil, err
	}
	return slices.Concat(l.done, l.pending), nil
}

func (l *liveWindows) close() { l.rep.close() }

// quietLogger drops go-redis's log lines.
type quietLogger struct{}

func (quietLogger) Printf(context.Context, string, ...any) {}

// poller reads the nodes' /stats and Redis's command counts, and turns the
// counters into a window's figures.
type poller struct {
	addrs []string
	http  *http.Client
	redis *redis.Client
	// the previous sample's counters
	nodes         []statsReply
	scripts, cmds int64
	lost          [numClasses]int64
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

// sample returns the nodes' figures and the requests lost since the last
// sample.
func (p *poller) sample(ctx context.Context, c *counts) (nodes []nodeRow, lat []uint64, lost [numClasses]int64) {
	nodes, lat = make([]nodeRow, len(p.addrs)), make([]uint64, histBuckets)
	for i, a := range p.addrs {
		cur, err := p.stats(ctx, a)
		if err != nil {
			continue
		}
		prev := p.nodes[i]
		n := nodeRow{degraded: cur.Degraded - prev.Degraded, failed: cur.Failed - prev.Failed,
			available: cur.RedisAvailable, reached: true}
		d := make([]uint64, len(cur.Latency))
		for j := range cur.Latency {
			if j < len(prev.Latency) {
				d[j] = cur.Latency[j] - prev.Latency[j]
			} else {
				d[j] = cur.Latency[j]
			}
			if j < len(lat) {
				lat[j] += d[j]
			}
		}
		n.p99 = quantile(d, 0.99)
		nodes[i] = n
		p.nodes[i] = cur
	}
	for cl := range numClasses {
		f := c.failed[cl].Load()
		lost[cl], p.lost[cl] = f-p.lost[cl], f
	}
	return nodes, lat, lost
}

// commands returns the scripts and commands Redis ran since the last call,
// or zeros while it is down (redisUp false): a server started again counts
// from 0.
func (p *poller) commands(ctx context.Context, redisUp bool) (scripts, cmds int64) {
	if !redisUp {
		p.scripts, p.cmds = 0, 0
		return 0, 0
	}
	s, c, err := p.info(ctx)
	if err != nil {
		return 0, 0
	}
	if c >= p.cmds {
		scripts, cmds = s-p.scripts, c-p.cmds
	} else {
		scripts, cmds = s, c // a restarted server counts from 0
	}
	p.scripts, p.cmds = s, c
	return scripts, cmds
}

// flush asks every node to write out its records: once it returns, the
// records of the requests decided before it are in the files.
func (p *poller) flush(ctx context.Context) {
	for _, a := range p.addrs {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+a+"/flush", nil)
		if err != nil {
			continue
		}
		if resp, err := p.http.Do(req); err == nil {
			resp.Body.Close()
		}
	}
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

// info returns how many scripts and commands Redis has run, from INFO
// commandstats: the commands include those the scripts call, and leave out
// the driver's own INFO calls.
func (p *poller) info(ctx context.Context) (scripts, total int64, err error) {
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
