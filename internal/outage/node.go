package outage

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/redis/go-redis/v9"

	"github.com/hybridlimit/hybridlimit/hybrid"
	"github.com/hybridlimit/hybridlimit/syncer"
)

// The modes a node runs side by side on the same arrivals, each its own
// Limiter (and Redis prefix).
const (
	ModeFallback   = "fallback"    // hybrid, the Gossip policy over gossip
	ModeFailLocal  = "fail_local"  // hybrid, FailLocal: the limit split evenly over the nodes last seen
	ModeAlone      = "alone"       // local: each node admits the whole limit
	ModeFailClosed = "fail_closed" // hybrid, FailClosed
	ModeFailOpen   = "fail_open"   // hybrid, FailOpen: admits everything while Redis is out of reach
)

// Modes lists the modes a node runs by default, in the order tables show
// them.
var Modes = []string{ModeFallback, ModeFailLocal, ModeAlone, ModeFailClosed}

// Spec is one node's run.
type Spec struct {
	Name  string // the node's name, in Redis and in the gossip
	Redis string // Redis's host:port, unless Sentinels or Cluster is set
	// Sentinels and Master name a master with replicas behind Sentinels
	// (a failover client); Cluster, a Redis Cluster's nodes.
	Sentinels []string
	Master    string
	Cluster   []string
	Prefix    string   // the Redis key prefix; each mode appends its name
	Seeds     []string // gossip peers to join
	Key       []byte   // the gossip's encryption key
	Nodes     int      // the nodes expected (SyncConfig.Nodes)
	Modes     []string // the modes to run; default all

	Bucket bool          // a token bucket (burst Limit/10) rather than a fixed window
	Limit  int64         // requests per Window
	Window time.Duration // the limit's window

	Rate     float64       // offered requests per second at this node
	Duration time.Duration // how long to offer them
	// Poisson draws the arrivals as a Poisson process of Rate (seeded by
	// Seed and Name) rather than evenly spaced.
	Poisson bool
	Seed    int64
	// Tuned gossips faster than the defaults (memberlist's gossip every
	// 20ms, records every 50ms, a demand half-life of 1s); else the
	// library's and memberlist's defaults, what a user gets.
	Tuned bool
	// ProbeInterval and SuspicionMult tune how soon memberlist declares a
	// killed node dead. Default memberlist's LAN values.
	ProbeInterval time.Duration
	SuspicionMult int
}

// Line is one line a node writes on stdout, as JSON: Ready first (its
// gossip address), then one Window per mode and window, then Done.
type Line struct {
	Ready  bool   `json:",omitempty"` // the node is ready: its Limiters built
	Gossip string `json:",omitempty"` // with Ready: its gossip address
	Done   bool   `json:",omitempty"`
	Node   string `json:",omitempty"`
	Mode   string `json:",omitempty"`
	Window int64  `json:",omitempty"` // window id: unix time ÷ Window
	// Offered and Admitted count the window's requests; Failed those that
	// came with an error other than ErrUnavailable.
	Offered, Admitted, Failed int64 `json:",omitempty"`
	// Degraded counts the admissions the failure policy made.
	Degraded int64 `json:",omitempty"`
	// MaxLatency is the slowest decision in the window (ns).
	MaxLatency int64 `json:",omitempty"`
	// Members is the gossip's member count at the window's end (Gossip).
	Members int `json:",omitempty"`
	// Times are the admissions' times, µs into the window, for a bucket
	// rule: what the arrival curve is checked against.
	Times []int64 `json:",omitempty"`
}

// runner is one mode's Limiter and rule on a node, and the line of the
// window it is counting.
type runner struct {
	mode  string
	l     *hybrid.Limiter
	r     *hybrid.Rule
	cur   Line
	times bool // record the admissions' times (a bucket rule)
	wus   int64
}

// RunNode runs spec: it starts a Limiter per mode, writes Ready, offers
// Rate requests per second, evenly spaced, to every mode's Limiter for
// Duration, writes a Window line per mode as each window ends, then shuts
// the Limiters down and writes Done.
func RunNode(spec Spec, out io.Writer) error {
	if len(spec.Modes) == 0 {
		spec.Modes = Modes
	}
	w := bufio.NewWriter(out)
	emit := func(l Line) {
		b, _ := json.Marshal(l)
		w.Write(append(b, '\n'))
		w.Flush()
	}
	lim, err := limitOf(spec)
	if err != nil {
		return err
	}
	var runners []*runner
	defer func() {
		for _, r := range runners {
			r.l.Close()
		}
	}()
	var gossipAddr string
	runners, gossipAddr, err = startRunners(spec, lim)
	if err != nil {
		return err
	}
	emit(Line{Ready: true, Gossip: gossipAddr, Node: spec.Name})
	offer(spec, runners, emit)
	for _, r := range runners {
		r.l.Close()
	}
	runners = nil
	emit(Line{Done: true, Node: spec.Name})
	return nil
}

// startRunners builds a Limiter and registers lim's rule for each of
// spec's modes, and returns them with the gossip's address (if a mode
// gossips). On an error it returns those it built, for the caller to close.
func startRunners(spec Spec, lim hybrid.Limit) (runners []*runner, gossipAddr string, err error) {
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	for _, mode := range spec.Modes {
		cfg, rule, err := modeConfig(spec, mode, lim, logger)
		if err != nil {
			return runners, "", err
		}
		l, err := hybrid.New(cfg)
		if err != nil {
			return runners, "", fmt.Errorf("outage: %s: %w", mode, err)
		}
		r, err := l.Register(rule)
		if err != nil {
			l.Close()
			return runners, "", fmt.Errorf("outage: %s: %w", mode, err)
		}
		if mode == ModeFallback {
			gossipAddr = l.Stats().GossipAddr
		}
		runners = append(runners, &runner{mode: mode, l: l, r: r, times: spec.Bucket, wus: spec.Window.Microseconds()})
	}
	return runners, gossipAddr, nil
}

// modeConfig returns the Limiter's Config and the rule of lim that mode
// runs on spec's node: every mode but ModeAlone through Redis, under a
// prefix of its own, and ModeFallback over gossip.
func modeConfig(spec Spec, mode string, lim hybrid.Limit, logger *slog.Logger) (hybrid.Config, hybrid.Rule, error) {
	cfg := hybrid.Config{Logger: logger}
	rule := hybrid.Rule{Name: "r", Limit: lim}
	if mode != ModeAlone {
		cfg.Redis = client(spec)
		cfg.Keyspace = syncer.Keyspace{Prefix: spec.Prefix + ":" + mode}
		cfg.Sync = hybrid.SyncConfig{NodeID: spec.Name, Nodes: spec.Nodes}
		rule.Mode = hybrid.Hybrid
	}
	switch mode {
	case ModeFallback:
		ml := memberlist.DefaultLANConfig()
		ml.Name, ml.BindAddr, ml.BindPort, ml.AdvertiseAddr = spec.Name, "127.0.0.1", 0, ""
		if spec.ProbeInterval > 0 {
			ml.ProbeInterval, ml.ProbeTimeout = spec.ProbeInterval, spec.ProbeInterval/2
		}
		if spec.SuspicionMult > 0 {
			ml.SuspicionMult = spec.SuspicionMult
		}
		cfg.Gossip = &hybrid.GossipConfig{Memberlist: ml, Seeds: spec.Seeds, Keys: [][]byte{spec.Key}, Label: "outage",
			RejoinInterval: time.Second}
		if spec.Tuned {
			ml.GossipInterval = 20 * time.Millisecond
			cfg.Gossip.Interval, cfg.Gossip.DemandHalfLife = 50*time.Millisecond, time.Second
		}
		rule.Policy = hybrid.Gossip
	case ModeFailLocal:
		rule.Policy = hybrid.FailLocal
	case ModeFailClosed:
		rule.Policy = hybrid.FailClosed
	case ModeFailOpen:
		rule.Policy = hybrid.FailOpen
	case ModeAlone:
		rule.Mode = hybrid.Local
	default:
		return cfg, rule, fmt.Errorf("outage: unknown mode %q", mode)
	}
	return cfg, rule, nil
}

// client is a client of spec's Redis: a server, a master behind
// Sentinels, or a Cluster. Dials and calls are bounded, and a refused dial
// is not tried again at once (DialerRetries, as docs/redis.md advises): a
// node decides without waiting on a Redis gone.
func client(spec Spec) redis.UniversalClient {
	const dial, rw = 100 * time.Millisecond, 200 * time.Millisecond
	switch {
	case len(spec.Sentinels) > 0:
		return redis.NewFailoverClient(&redis.FailoverOptions{MasterName: spec.Master, SentinelAddrs: spec.Sentinels,
			ContextTimeoutEnabled: true, MaxRetries: -1, DialerRetries: 1, DialTimeout: dial, ReadTimeout: rw, WriteTimeout: rw})
	case len(spec.Cluster) > 0:
		return redis.NewClusterClient(&redis.ClusterOptions{Addrs: spec.Cluster,
			ContextTimeoutEnabled: true, MaxRetries: -1, DialerRetries: 1, DialTimeout: dial, ReadTimeout: rw, WriteTimeout: rw})
	}
	return redis.NewClient(&redis.Options{Addr: spec.Redis, ContextTimeoutEnabled: true, MaxRetries: -1, DialerRetries: 1,
		DialTimeout: dial, ReadTimeout: rw, WriteTimeout: rw})
}

// offer offers spec's arrivals, Rate per second evenly spaced (or a
// Poisson process) for Duration, to every runner, and emits each runner's Window line as its
// window ends, and the last ones at the end. Without arrivals it waits out
// Duration: the node only takes part in the gossip.
func offer(spec Spec, runners []*runner, emit func(Line)) {
	ctx := context.Background()
	wus := spec.Window.Microseconds()
	start := time.Now()
	end := start.Add(spec.Duration)
	next := start
	mean := float64(time.Second) / spec.Rate
	gap := func() time.Duration { return time.Duration(mean) }
	if spec.Poisson {
		h := fnv.New64a()
		h.Write([]byte(spec.Name))
		rng := rand.New(rand.NewPCG(uint64(spec.Seed), h.Sum64()))
		gap = func() time.Duration { return time.Duration(rng.ExpFloat64() * mean) }
	}
	if spec.Rate <= 0 { // no arrivals: the node only takes part in the gossip
		next = end
		time.Sleep(spec.Duration)
	}
	for next.Before(end) {
		if d := time.Until(next); d > 0 {
			time.Sleep(d)
		}
		now := time.Now()
		for ; !next.After(now) && next.Before(end); next = next.Add(gap()) {
			// Arrivals due while the process was descheduled are decided
			// late, and counted in the window they are decided in: the one
			// the limiters count them in.
			wid := time.Now().UnixMicro() / wus
			for _, r := range runners {
				r.decide(ctx, spec.Name, wid, emit)
			}
		}
	}
	for _, r := range runners {
		r.flush(emit)
	}
}

// decide offers one request to r's Limiter in window wid of node's, and
// counts it; it first emits r's line of the window before, if wid is a
// new one.
func (r *runner) decide(ctx context.Context, node string, wid int64, emit func(Line)) {
	if r.cur.Window != wid {
		r.flush(emit)
		r.cur = Line{Node: node, Mode: r.mode, Window: wid}
	}
	t0 := time.Now()
	d, err := r.l.Allow(ctx, r.r, "k")
	lat := time.Since(t0).Nanoseconds()
	r.cur.MaxLatency = max(r.cur.MaxLatency, lat)
	r.cur.Offered++
	if err != nil && !errors.Is(err, hybrid.ErrUnavailable) {
		r.cur.Failed++
	}
	if d.Allowed() {
		r.cur.Admitted++
		if d.Degraded() {
			r.cur.Degraded++
		}
		if r.times {
			r.cur.Times = append(r.cur.Times, t0.UnixMicro()-wid*r.wus)
		}
	}
}

// flush emits r's line of its current window, if it has one, with the
// gossip's member count at its end.
func (r *runner) flush(emit func(Line)) {
	if r.cur.Window != 0 {
		if r.mode == ModeFallback {
			r.cur.Members = r.l.Stats().GossipMembers
		}
		emit(r.cur)
	}
}

// limitOf is spec's limit: a fixed window, or a token bucket of burst
// Limit/10.
func limitOf(spec Spec) (hybrid.Limit, error) {
	p := hybrid.Limit{Algorithm: hybrid.FixedWindow, Quota: spec.Limit, Window: spec.Window}
	if spec.Bucket {
		p.Algorithm, p.Burst = hybrid.TokenBucket, max(spec.Limit/10, 1)
	}
	return p, p.Validate()
}
