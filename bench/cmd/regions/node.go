package main

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hybridlimit/hybridlimit/hybrid"
	"github.com/hybridlimit/hybridlimit/syncer"
)

// The baselines a node runs side by side on the same arrivals, each its
// own Limiter.
const (
	// modeCentral is one global Redis asked on every request: a Central
	// rule against the global store, across the slow link outside its home
	// region; FailLocal (the limit split over the 9 nodes) when it does not
	// answer.
	modeCentral = "central"
	// modeSplit is each region limited to L ÷ regions: a hybrid rule
	// against the region's own Redis with Quota L/3.
	modeSplit = "split"
	// modeGlobal is the library's answer: a Hybrid rule of global reach
	// (Rule.Global), its nodes leasing from their region's Redis the
	// region's part of L, which the region leases from a global Redis of
	// its own (so that its commands and bytes are counted apart from A's)
	// across links of its own, cut and killed with A's.
	modeGlobal = "global"
)

var modes = []string{modeGlobal, modeCentral, modeSplit}

// nodeSpec is one node process's run, passed as JSON on its command line.
type nodeSpec struct {
	Name     string
	Region   int
	Regional string // the region's Redis, reached directly
	Global   string // the global Redis, through the region's link
	Store    string // C's global Redis, through the region's link of its own
	Prefix   string // Redis key prefix; each mode appends its name
	Regions  int
	Nodes    int // nodes per region

	Limit  int64         // L per Window, the global limit
	Window time.Duration // the fixed window
	// Start is the first window's start (unix µs, a window boundary), sent
	// on stdin once every node is ready; Rates[i] is this node's offered
	// requests per second in window i.
	Start int64 `json:"-"`
	Rates []float64
	Seed  int64
	Log   bool     // the Limiters' warnings on stderr
	Modes []string // the modes to run side by side
	// Timeout and SyncTimeout are the central Limiter's Config.Timeout
	// and Sync.Timeout.
	Timeout, SyncTimeout time.Duration
}

// line is one line a node writes on stdout as JSON: Ready, then a line
// per mode and window once the run is over, then Done.
type line struct {
	Ready  bool   `json:",omitempty"`
	Done   bool   `json:",omitempty"`
	Node   string `json:",omitempty"`
	Region int
	Mode   string `json:",omitempty"`
	Window int64  `json:",omitempty"` // window id: unix time ÷ Window
	// Offered and Admitted count the requests that arrived in the window;
	// Degraded, the admissions the failure policy made; Errors, the
	// decisions that came with an error (Redis out of reach); Late, the
	// arrivals the node began to decide lateBy or more after their time
	// (a process starved of CPU).
	Offered, Admitted, Degraded, Errors, Late int64 `json:",omitempty"`
	// P50 and P99 are the window's decision latencies (µs); Lat all of
	// them, for the driver to merge.
	P50, P99 int64   `json:",omitempty"`
	Lat      []int32 `json:",omitempty"`
}

// quietRedis drops go-redis's log lines (every failed dial of an outage).
type quietRedis struct{}

func (quietRedis) Printf(context.Context, string, ...any) {}

// runNode runs spec: a Limiter per mode, Ready, the first window's start
// read from in, the arrivals, then every window's line per mode and Done.
func runNode(spec nodeSpec, in io.Reader, out io.Writer) error {
	w := bufio.NewWriter(out)
	defer w.Flush()
	emit := func(l line) {
		b, _ := json.Marshal(l)
		w.Write(append(b, '\n'))
		w.Flush()
	}
	lims := map[string]*hybrid.Limiter{}
	rules := map[string]*hybrid.Rule{}
	defer func() {
		for _, l := range lims {
			l.Close()
		}
	}()
	for _, m := range spec.Modes {
		l, r, err := newMode(spec, m)
		if err != nil {
			return err
		}
		lims[m], rules[m] = l, r
	}
	emit(line{Ready: true, Node: spec.Name, Region: spec.Region})
	if _, err := fmt.Fscan(in, &spec.Start); err != nil {
		return fmt.Errorf("reading the start: %w", err)
	}
	acc := offer(spec, lims, rules)
	for _, m := range spec.Modes {
		l := lims[m]
		delete(lims, m)
		l.Close()
	}
	keys := make([]accKey, 0, len(acc))
	for k := range acc {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b accKey) int {
		return cmp.Or(cmp.Compare(a.wid, b.wid), cmp.Compare(a.mode, b.mode))
	})
	for _, k := range keys {
		l := acc[k]
		l.Node, l.Region, l.Mode, l.Window = spec.Name, spec.Region, k.mode, k.wid
		slices.Sort(l.Lat)
		l.P50, l.P99 = quantile(l.Lat, 0.50), quantile(l.Lat, 0.99)
		emit(*l)
	}
	emit(line{Done: true, Node: spec.Name, Region: spec.Region})
	return nil
}

// newMode builds mode's Limiter and rule on spec's node.
func newMode(spec nodeSpec, mode string) (*hybrid.Limiter, *hybrid.Rule, error) {
	cfg := hybrid.Config{Logger: slog.New(slog.DiscardHandler)}
	if spec.Log {
		cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})).With("node", spec.Name, "mode", mode)
	}
	rule := hybrid.Rule{Name: "r", Limit: hybrid.Limit{Algorithm: hybrid.FixedWindow, Quota: spec.Limit, Window: spec.Window}}
	switch mode {
	case modeCentral:
		cfg.Redis = client(spec.Global, true)
		cfg.Keyspace = syncer.Keyspace{Prefix: spec.Prefix + ":" + mode}
		cfg.Sync = hybrid.SyncConfig{NodeID: spec.Name, Nodes: spec.Regions * spec.Nodes, Timeout: spec.SyncTimeout}
		cfg.Timeout = spec.Timeout
		rule.Mode = hybrid.Central
	case modeSplit:
		cfg.Redis = client(spec.Regional, false)
		cfg.Keyspace = syncer.Keyspace{Prefix: fmt.Sprintf("%s:%s:%d", spec.Prefix, mode, spec.Region)}
		cfg.Sync = hybrid.SyncConfig{NodeID: spec.Name, Nodes: spec.Nodes}
		rule.Mode = hybrid.Hybrid
		rule.Limit.Quota = max(spec.Limit/int64(spec.Regions), 1)
	case modeGlobal:
		cfg.Redis = client(spec.Regional, false)
		cfg.Global = client(spec.Store, true)
		cfg.Region = fmt.Sprintf("r%d", spec.Region)
		cfg.Keyspace = syncer.Keyspace{Prefix: spec.Prefix + ":" + mode}
		cfg.Sync = hybrid.SyncConfig{NodeID: spec.Name, Nodes: spec.Nodes}
		rule.Mode, rule.Global = hybrid.Hybrid, true
	default:
		return nil, nil, fmt.Errorf("regions: unknown mode %q", mode)
	}
	l, err := hybrid.New(cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("regions: %s: %w", mode, err)
	}
	r, err := l.Register(rule)
	if err != nil {
		l.Close()
		return nil, nil, fmt.Errorf("regions: %s: %w", mode, err)
	}
	return l, r, nil
}

// client is a client of the Redis at addr, its calls bounded and a refused
// dial not tried again at once (docs/redis.md). Across the slow link it
// keeps a pool wide enough for the decisions in flight (rate × round
// trip). Connections are not opened ahead (MinIdleConns): nine nodes
// opening sixteen each at the start kept A's breaker open for seconds.
func client(addr string, remote bool) redis.UniversalClient {
	o := &redis.Options{Addr: addr, ContextTimeoutEnabled: true, MaxRetries: -1, DialerRetries: 1,
		DialTimeout: time.Second, ReadTimeout: 500 * time.Millisecond, WriteTimeout: 500 * time.Millisecond}
	if remote {
		o.PoolSize = 128
	}
	return redis.NewClient(o)
}

// lateBy is how far behind its time an arrival is counted late.
const lateBy = 50 * time.Millisecond

type accKey struct {
	mode string
	wid  int64
}

// offer draws spec's arrivals, a Poisson process whose rate is Rates[i] in
// window i, and decides each on every mode's Limiter in a goroutine of its
// own (a central decision waits a round trip across the link; the
// arrivals do not wait for it). It returns the counts per mode and window
// of arrival once every decision is in.
func offer(spec nodeSpec, lims map[string]*hybrid.Limiter, rules map[string]*hybrid.Rule) map[accKey]*line {
	h := fnv.New64a()
	h.Write([]byte(spec.Name))
	rng := rand.New(rand.NewPCG(uint64(spec.Seed), h.Sum64()))
	wus := spec.Window.Microseconds()
	var (
		mu  sync.Mutex
		acc = map[accKey]*line{}
		wg  sync.WaitGroup
	)
	record := func(mode string, wid int64, d hybrid.Decision, err error, late bool, lat time.Duration) {
		mu.Lock()
		defer mu.Unlock()
		k := accKey{mode, wid}
		l := acc[k]
		if l == nil {
			l = &line{}
			acc[k] = l
		}
		l.Offered++
		if d.Allowed() {
			l.Admitted++
			if d.Degraded() {
				l.Degraded++
			}
		}
		if err != nil {
			l.Errors++
		}
		if late {
			l.Late++
		}
		l.Lat = append(l.Lat, int32(min(lat.Microseconds(), 1<<31-1)))
	}
	ctx := context.Background()
	next := spec.Start // µs
	end := spec.Start + int64(len(spec.Rates))*wus
	for next < end {
		i := (next - spec.Start) / wus
		wend := spec.Start + (i+1)*wus
		rate := spec.Rates[i]
		if rate <= 0 {
			next = wend
			continue
		}
		at := next + int64(rng.ExpFloat64()*1e6/rate)
		if at >= wend { // memoryless: draw again from the window's end at its rate
			next = wend
			continue
		}
		next = at
		if d := time.Until(time.UnixMicro(at)); d > 0 {
			time.Sleep(d)
		}
		now := time.Now().UnixMicro()
		wid, late := now/wus, now-at >= lateBy.Microseconds()
		for _, m := range spec.Modes {
			wg.Add(1)
			go func() {
				defer wg.Done()
				t0 := time.Now()
				d, err := lims[m].Allow(ctx, rules[m], "k")
				record(m, wid, d, err, late, time.Since(t0))
			}()
		}
	}
	// A region whose traffic ended stays up to the run's end: its regions
	// go quiet, they do not leave.
	time.Sleep(time.Until(time.UnixMicro(end)))
	wg.Wait()
	return acc
}
