package accuracy

import (
	"fmt"
	"math"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"time"

	"github.com/hybridlimit/hybridlimit/internal/localx"
	"github.com/hybridlimit/hybridlimit/local"
)

// The modes compared. Central, Hybrid and Local are hybrid.Limiter's modes;
// Naive is the peer design, built here (see naive.go).
const (
	ModeCentral = "central"
	ModeHybrid  = "hybrid"
	ModeNaive   = "naive"
	ModeLocal   = "local"
)

// The algorithms measured: the fixed window (primary), GCRA (the token
// bucket's arrival curve), the sliding window counter, the token bucket and
// the leaky bucket (as a meter): every algorithm hybrid mode can lease.
const (
	AlgoFixed   = "fixed"
	AlgoGCRA    = "gcra"
	AlgoCounter = "counter"
	AlgoToken   = "token"
	AlgoLeaky   = "leaky"
)

// Algos lists the algorithms in the order the tables list them.
var Algos = []string{AlgoFixed, AlgoGCRA, AlgoCounter, AlgoToken, AlgoLeaky}

// bucket reports whether algo is one of the bucket algorithms, whose
// invariant is an arrival curve (rate, burst).
func bucket(algo string) bool { return algo == AlgoGCRA || algo == AlgoToken || algo == AlgoLeaky }

// The standard workloads, in the order the tables list them.
const (
	WorkUniform = "uniform" // one key, spread evenly over the nodes, offered 10 × L
	WorkSkewed  = "skewed"  // one key, 80% of its traffic on node 0, offered 10 × L
	WorkZipf    = "zipf"    // Zipf (s = 1.1) over 100,000 keys
	WorkCold    = "cold"    // a new key every window, bursting on all nodes at once
	WorkUnder   = "under"   // one key, spread evenly, offered 0.9 × L
)

// WorkAPIUsers is the api-users workload: many users, each limited to 100
// per 10 s, most far under it and 1% at 10 × it, each request sent to a
// uniformly random node (users.go). Run apart from the main table, with
// its own table.
const WorkAPIUsers = "api-users"

// WorkColdSkewed is the cold start with 80% of each key's traffic on node 0:
// not one of the standard workloads, run on request (-workloads).
const WorkColdSkewed = "cold-skewed"

// Workloads lists the standard workloads in the order the tables list them.
var Workloads = []string{WorkUniform, WorkSkewed, WorkZipf, WorkCold, WorkUnder}

// AllWorkloads lists every workload a Spec may name: the standard ones,
// then the others.
var AllWorkloads = append(slices.Clone(Workloads), WorkColdSkewed, WorkAPIUsers, WorkPatterns)

// Cold reports whether the workload is a cold start: a new key every window.
func (s Spec) Cold() bool { return s.Workload == WorkCold || s.Workload == WorkColdSkewed }

// skewed reports whether node 0 takes 80% of the traffic.
func (s Spec) skewed() bool { return s.Workload == WorkSkewed || s.Workload == WorkColdSkewed }

// Spec is one run: every node process gets the same Spec (as JSON) and its
// own index. Everything a node does follows from it deterministically,
// save what the clock and the scheduler do to it.
type Spec struct {
	ID   string // names the run: key prefix, file names
	Set  string // SetMain (the table) or SetCurve (the L × N grid)
	Mode string // ModeCentral, ModeHybrid, ModeNaive, ModeLocal
	Algo string // one of Algos
	// Algos, when it has more than one, are the algorithms decided on the
	// same arrivals, one rule each, every arrival by each rule in turn
	// (independently, not all-or-nothing); Algo is then the one a Result
	// describes. Each has its own node files (Spec.File).
	Algos    []string
	Burst    int64         // the bucket algorithms' burst; 0 means Limit
	Workload string        // one of AllWorkloads
	Limit    int64         // L: admitted per Window per key (GCRA: the rate, and the burst)
	Window   time.Duration // W
	Nodes    int           // N
	Windows  int           // measured windows, after one warm-up window
	Offered  float64       // total offered rate, as a multiple of L per W
	Keys     int           // distinct keys (Zipf); 1 otherwise
	ColdAt   float64       // cold start: each key starts this far into its window (fraction of W)
	Seed     uint64        // the schedules' seed
	Interval time.Duration // sync interval of hybrid and naive modes
	Workers  int           // central mode: requests in flight per node
	// NoColdStart turns the hybrid's cold-start allowance off
	// (SyncConfig.NoColdStart): a diagnostic, not part of the tables.
	NoColdStart bool
	// Wait is the hybrid rules' Rule.Wait: "" for the library's default,
	// or WaitNever, WaitInFlight, WaitFirst (wait.go).
	Wait string `json:",omitempty"`
	// PatScale scales the api-patterns workload's sessions per window (1:
	// the defaults of patterns.go).
	PatScale float64 `json:",omitempty"`
	// KillAt and Down: the outage run's Redis is killed (SIGKILL) KillAt
	// after T0 and restarted Down later. Zero: no outage.
	KillAt, Down time.Duration
	T0           int64 // wall-clock start (µs since the epoch), a multiple of W
	// Redis is host:port, empty in local mode; with Cluster, the Cluster's
	// masters, comma-separated.
	Redis string
	// Cluster: the nodes reach a Redis Cluster through a
	// redis.ClusterClient, not one server through a redis.Client.
	Cluster bool `json:",omitempty"`
}

// Outage reports whether the run kills Redis on the way.
func (s Spec) Outage() bool { return s.Down > 0 }

// RuleAlgos returns the algorithms the nodes decide: Algos, or Algo alone.
func (s Spec) RuleAlgos() []string {
	if len(s.Algos) > 1 {
		return s.Algos
	}
	return []string{s.Algo}
}

// File returns the path prefix of node n's files for algorithm algo in
// dir: n<n>, or n<n>.<algo> when the run decides several algorithms.
func (s Spec) File(dir string, n int, algo string) string {
	base := fmt.Sprintf("n%d", n)
	if len(s.Algos) > 1 {
		base += "." + algo
	}
	return filepath.Join(dir, base)
}

// ForAlgo returns the Spec with Algo set to algo, one of RuleAlgos: what
// Analyze takes for each algorithm of a run.
func (s Spec) ForAlgo(algo string) Spec {
	s.Algo = algo
	return s
}

// The sets of runs.
const (
	SetMain   = "main"
	SetCurve  = "curve"
	SetUsers  = "users"  // the api-users table
	SetOutage = "outage" // the api-users workload through a Redis outage
)

// ZipfRate is the Zipf workload's total offered rate, per second: what
// central mode sustains with 8 nodes on the 2-core machine of the results
// (at 100,000/s neither central nor hybrid keeps up there).
var ZipfRate = 10000.0

// Default parameters of the runs.
const (
	DefaultLimit    = 10000
	DefaultWindow   = time.Second
	DefaultInterval = 100 * time.Millisecond
	ZipfKeys        = 100000
	ZipfLimit       = 1000 // per key: the smallest round limit N = 8 nodes can lease
	ZipfS           = 1.1
	ColdAt          = 0.3
	DefaultWorkers  = 16
)

// NewSpec returns the Spec of workload w in mode m with algorithm a, L and
// N, with the workload's own parameters filled in.
func NewSpec(m, a, w string, limit int64, nodes, windows int) Spec {
	s := Spec{
		Set: SetMain, Mode: m, Algo: a, Workload: w, Limit: limit, Window: DefaultWindow, Nodes: nodes,
		Windows: windows, Offered: 10, Keys: 1, Seed: 1, Interval: DefaultInterval, Workers: DefaultWorkers,
	}
	switch w {
	case WorkUnder:
		s.Offered = 0.9
	case WorkZipf:
		s.Keys = ZipfKeys
		s.Limit = ZipfLimit
		s.Offered = ZipfRate / ZipfLimit
	case WorkCold, WorkColdSkewed:
		s.ColdAt = ColdAt
	}
	s.ID = fmt.Sprintf("%s-%s-%s-L%d-N%d", m, a, w, s.Limit, nodes)
	return s
}

// Lim returns the run's localx.Limit.
func (s Spec) Lim() (localx.Limit, error) {
	return s.LimOf(s.Algo)
}

// LimOf returns the run's localx.Limit for algorithm algo.
func (s Spec) LimOf(algo string) (localx.Limit, error) {
	p := local.Limit{Quota: s.Limit, Window: s.Window}
	switch algo {
	case AlgoFixed:
		p.Algorithm = local.FixedWindow
	case AlgoGCRA:
		p.Algorithm = local.GCRA
	case AlgoCounter:
		p.Algorithm = local.SlidingWindowCounter
	case AlgoToken:
		p.Algorithm = local.TokenBucket
	case AlgoLeaky:
		p.Algorithm = local.LeakyBucket
	default:
		return localx.Limit{}, fmt.Errorf("accuracy: unknown algorithm %q", algo)
	}
	if bucket(algo) {
		p.Burst = s.Burst
	}
	return localx.NewLimit(p)
}

// Duration is how long the schedule runs: a warm-up window, then Windows.
func (s Spec) Duration() time.Duration { return time.Duration(1+s.Windows) * s.Window }

// W returns the window in µs.
func (s Spec) W() int64 { return s.Window.Microseconds() }

// Share returns node n's share of the traffic.
func (s Spec) Share(n int) float64 {
	if s.skewed() && s.Nodes > 1 {
		if n == 0 {
			return 0.8
		}
		return 0.2 / float64(s.Nodes-1)
	}
	return 1 / float64(s.Nodes)
}

// Arrival is one scheduled request: when (µs since T0) and for which key.
type Arrival struct {
	At  uint32
	Key uint32
}

// Schedule returns node n's arrivals, in order: a Poisson process at the
// node's share of the offered rate, from a generator seeded with (Seed, n),
// so every run of a Spec offers the same requests. Keys: the one key 0; a
// Zipf (s = 1.1) draw over Keys; or, for the cold start, key i from ColdAt
// into window i until ColdAt into window i + 1 (nothing before).
func (s Spec) Schedule(n int) []Arrival {
	if s.Workload == WorkAPIUsers {
		return s.usersSchedule(n)
	}
	rng := rand.New(rand.NewPCG(s.Seed, uint64(n)+1))
	W := float64(s.W())
	end := float64(s.Duration().Microseconds())
	rate := s.Offered * float64(s.Limit) / W * s.Share(n) // per µs
	if rate <= 0 {
		return nil
	}
	var zipf *rand.Zipf
	if s.Keys > 1 {
		zipf = rand.NewZipf(rng, ZipfS, 1, uint64(s.Keys-1))
	}
	at := 0.0
	if s.Cold() {
		at = s.ColdAt * W
	}
	out := make([]Arrival, 0, int(rate*(end-at)*1.01)+16)
	for {
		at += rng.ExpFloat64() / rate
		if at >= end {
			return out
		}
		var k uint32
		switch {
		case zipf != nil:
			k = uint32(zipf.Uint64())
		case s.Cold():
			k = uint32(math.Floor(at/W - s.ColdAt))
		}
		out = append(out, Arrival{At: uint32(at), Key: k})
	}
}

// KeyName is the user key of key id k.
func KeyName(k uint32) string { return fmt.Sprintf("k%d", k) }
