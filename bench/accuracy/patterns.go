package accuracy

import (
	"cmp"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/hybridlimit/hybridlimit/internal/config"
	"github.com/hybridlimit/hybridlimit/internal/localx"
	"github.com/hybridlimit/hybridlimit/local"
)

// The api-patterns workload: the patterns a real API meets first, each on
// users of its own, fixed window and GCRA side by side, in one run per
// mode. A false refusal there is a request refused where an exact limiter
// replaying the same requests admits it (patternsanalyze.go).
const WorkPatterns = "api-patterns"

// SetPatterns is the set of the api-patterns runs: one per mode.
const SetPatterns = "patterns"

// The patterns, in the order the tables list them.
const (
	// PatBurst: users whose session opens with a parallel burst of up to
	// their capacity (the limit; GCRA's burst) spread over the nodes at
	// one instant, then steady use under the limit.
	PatBurst = "burst"
	// PatMulti: every request checked against a per-user and a per-IP rule
	// as one AllowMulti, all or nothing, several users behind some IPs.
	PatMulti = "two-rules"
	// PatRetry: clients that, refused, send nothing until now +
	// RetryAfter, then retry the refused request, and keep doing so.
	PatRetry = "retry"
	// PatChange: every node raises the limit, then lowers it, with
	// Limiter.SetLimit at about the same instant.
	PatChange = "limit-change"
)

// Patterns lists the patterns in table order.
var Patterns = []string{PatBurst, PatMulti, PatRetry, PatChange}

// PatternsAlgos are the algorithms each pattern runs with: those of the
// api-users table.
var PatternsAlgos = []string{AlgoFixed, AlgoGCRA}

// PatternsModes are the modes of the api-patterns runs; each run's exact
// replay is computed from its own decisions.
var PatternsModes = []string{ModeHybrid, ModeCentral}

// The workload's parameters: the limits real APIs set, time-scaled as the
// api-users workload's (100 per minute per user becomes 100 per 10 s).
const (
	PatWindow  = 10 * time.Second
	PatWindows = 12 // measured windows of a full run, after one warm-up window
	PatLimit   = 100
	PatBurstB  = 10 // GCRA's burst on a user's rule
	// The per-IP rule of the two-rule pattern: 20 per second (the figure
	// commonly set per IP), as 150 per 10 s, so that an IP shared by up to
	// five users binds now and then rather than always.
	PatIPLimit  = 150
	PatIPBurstB = 15
	// PatMaxRetries bounds a retry chain: a client gives a request up after
	// that many retries refused in a row.
	PatMaxRetries = 20
	// EdgeMargin is the clock resolution of a decision's time (the
	// coarse clock a Limiter starts without a Clock): requests this close to a
	// window's edge are left out of the false-refusal sums, where the
	// replay cannot tell which window the limiter decided them in.
	EdgeMargin = config.ClockResolution
)

// patSessions is how many sessions each pattern starts per window at
// Spec.PatScale 1 (IPs for the two-rule pattern): about 2,000 requests per
// second over the eight streams, which central mode serves on time here.
var patSessions = map[string]float64{PatBurst: 60, PatMulti: 25, PatRetry: 25, PatChange: 25}

// PatPhases are the limit-change pattern's limits, in order: the rule's
// own, raised to twice it a third into the measured windows, lowered to
// half of it two thirds in. GCRA's burst follows (a tenth of the limit).
var PatPhases = []int64{PatLimit, 2 * PatLimit, PatLimit / 2}

// stream is one pattern with one algorithm: its own rules, keys and
// arrivals.
type stream struct {
	pattern, algo string
}

// numStreams is len(Patterns) × len(PatternsAlgos).
var numStreams = len(Patterns) * len(PatternsAlgos)

// streamOf returns stream i: pattern i ÷ 2 with algorithm i mod 2.
func streamOf(i int) stream {
	return stream{Patterns[i/len(PatternsAlgos)], PatternsAlgos[i%len(PatternsAlgos)]}
}

// streamIndex returns the index of pattern p with algorithm a, or −1.
func streamIndex(p, a string) int {
	pi, ai := slices.Index(Patterns, p), slices.Index(PatternsAlgos, a)
	if pi < 0 || ai < 0 {
		return -1
	}
	return pi*len(PatternsAlgos) + ai
}

// NewPatternsSpec returns the api-patterns run in mode m over windows
// measured windows of 10 s (after one warm-up window).
func NewPatternsSpec(m string, windows int) Spec {
	s := Spec{
		Set: SetPatterns, Mode: m, Algo: AlgoFixed, Workload: WorkPatterns, Limit: PatLimit, Burst: PatBurstB,
		Window: PatWindow, Nodes: 8, Windows: windows, Seed: 1, Interval: DefaultInterval, Workers: DefaultWorkers,
		PatScale: 1,
	}
	s.ID = fmt.Sprintf("patterns-%s-W%d", m, windows)
	return s
}

// patLimit returns stream st's user rule's limit in phase phase (phase 0
// but for the limit-change pattern), and for the two-rule pattern its IP
// rule's.
func patLimit(st stream, phase int) (user, ip localx.Limit, err error) {
	mk := func(limit, burst int64) (localx.Limit, error) {
		p := local.Limit{Algorithm: local.FixedWindow, Quota: limit, Window: PatWindow}
		if st.algo == AlgoGCRA {
			p.Algorithm, p.Burst = local.GCRA, burst
		}
		return localx.NewLimit(p)
	}
	l := int64(PatLimit)
	if st.pattern == PatChange {
		l = PatPhases[phase]
	}
	if user, err = mk(l, max(l/10, 1)); err != nil {
		return user, ip, err
	}
	if st.pattern == PatMulti {
		ip, err = mk(PatIPLimit, PatIPBurstB)
	}
	return user, ip, err
}

// patCapacity is what a user's rule admits at one instant: the limit, or
// GCRA's burst.
func patCapacity(algo string) int {
	if algo == AlgoGCRA {
		return PatBurstB
	}
	return PatLimit
}

// ChangeAt returns when (µs since T0) the limit-change pattern's change
// into phase p (1 or 2) is due: 0.4 W into the window a third (p = 1) or
// two thirds (p = 2) through the measured windows.
func (s Spec) ChangeAt(p int) int64 {
	w := 1 + (p*s.Windows)/3
	return int64(w)*s.W() + 4*s.W()/10
}

// patArrival is one request of the api-patterns workload that a node
// decides, or, with Change set, a limit change every node applies.
type patArrival struct {
	At      uint32 // due, µs since T0
	Key     uint32 // the user's (client's) id in its stream
	IP      uint32 // two rules: the IP's id
	Want    uint32 // retry: the client's request index
	Stream  uint8
	Node    uint8
	Change  uint8 // a limit change into this phase (1, 2); 0 for a request
	Attempt uint8 // retry: 0 for a first try, n for its n-th retry
}

// allNodes marks an arrival every node takes: a limit change.
const allNodes = 0xFF

// RetryClient is one client of the retry pattern: it wants requests at
// Rate per window, a Poisson process, from Start to End (µs since T0).
type RetryClient struct {
	Start, End float64
	Rate       float64 // per window
}

// patternsPlan returns every node's arrivals known in advance, in time
// order (each node keeps those with its index, and the limit changes), and
// the retry pattern's clients of each algorithm, indexed by stream and key
// id. Everything follows from Seed: every node computes the same plan.
func (s Spec) patternsPlan() ([]patArrival, [][]RetryClient) {
	W := float64(s.W())
	end := float64(s.Duration().Microseconds())
	N := s.Nodes
	var out []patArrival
	clients := make([][]RetryClient, numStreams)
	scale := s.PatScale
	if scale <= 0 {
		scale = 1
	}
	for st := range numStreams {
		sm := streamOf(st)
		rng := rand.New(rand.NewPCG(s.Seed, 0x70617474_00000000|uint64(st)))
		C := float64(patCapacity(sm.algo))
		L := float64(PatLimit)
		// poisson appends key's arrivals at rate per window over [from, to).
		poisson := func(key, ip uint32, rate, from, to float64) {
			if rate <= 0 {
				return
			}
			for at := from + rng.ExpFloat64()*W/rate; at < to; at += rng.ExpFloat64() * W / rate {
				out = append(out, patArrival{At: uint32(at), Key: key, IP: ip, Stream: uint8(st), Node: uint8(rng.IntN(N))})
			}
		}
		// Session starts: a Poisson process over the run, so that users keep
		// arriving cold; a session lasts one window.
		perW := patSessions[sm.pattern] * scale
		last := end - W
		if sm.pattern == PatMulti {
			last = end - 1.5*W // an IP's users start up to W/2 after it
		}
		var key, ip uint32
		for at := rng.ExpFloat64() * W / perW; at < last; at += rng.ExpFloat64() * W / perW {
			switch sm.pattern {
			case PatBurst:
				// A burst of k, log-uniform over [2, C]: as many small bursts
				// (a page's few calls) as large ones, up to the capacity; k
				// requests at one instant, one node after the other.
				k := int(math.Round(2 * math.Pow(C/2, rng.Float64())))
				first := rng.IntN(N)
				for j := range k {
					out = append(out, patArrival{At: uint32(at), Key: key, Stream: uint8(st), Node: uint8((first + j) % N)})
				}
				// Then steady use: at most half of what the window has left
				// after the burst (fixed window), or half the rate (GCRA).
				rate := rng.Float64() * (L - float64(k)) / 2
				if sm.algo == AlgoGCRA {
					rate = rng.Float64() * L / 2
				}
				poisson(key, 0, rate, at, at+W)
				key++
			case PatMulti:
				// 1 user behind half the IPs, 2 to 5 behind the others, each
				// from 5 to 60 requests per window, one in twenty at twice
				// the user limit.
				users := 1
				if rng.Float64() >= 0.5 {
					users = 2 + rng.IntN(4)
				}
				for range users {
					rate := 5 + 55*rng.Float64()
					if rng.Float64() < 0.05 {
						rate = 2 * L
					}
					start := at + rng.Float64()*W/2
					poisson(key, ip, rate, start, start+W)
					key++
				}
				ip++
			case PatRetry:
				// From half to three times the limit: many are refused, and
				// retry.
				c := RetryClient{Start: at, End: at + W, Rate: (0.5 + 2.5*rng.Float64()) * L}
				clients[st] = append(clients[st], c)
				first := at + retryGap(s.Seed, st, key, 0, c.Rate, W)
				if first < c.End {
					out = append(out, patArrival{At: uint32(first), Key: key, Stream: uint8(st), Node: uint8(retryNode(s.Seed, st, key, 0, 0, N))})
				}
				key++
			case PatChange:
				// From 0.3 to 1.8 × the first limit: the raise and the
				// lowering both change what they are admitted.
				poisson(key, 0, (0.3+1.5*rng.Float64())*L, at, at+W)
				key++
			}
		}
		if sm.pattern == PatChange && sm.algo == PatternsAlgos[0] {
			for p := 1; p < len(PatPhases); p++ {
				out = append(out, patArrival{At: uint32(s.ChangeAt(p)), Stream: uint8(st), Node: allNodes, Change: uint8(p)})
			}
		}
	}
	slices.SortStableFunc(out, func(a, b patArrival) int { return cmp.Compare(a.At, b.At) })
	return out, clients
}

// patternsSchedule returns node n's arrivals known in advance: its share
// of the plan, and every limit change.
func (s Spec) patternsSchedule(n int) ([]patArrival, [][]RetryClient) {
	all, clients := s.patternsPlan()
	out := all[:0]
	for _, a := range all {
		if int(a.Node) == n || a.Node == allNodes {
			out = append(out, a)
		}
	}
	return out, clients
}

// mix is splitmix64's finalizer: a well-spread hash of x.
func mix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ x>>30) * 0xbf58476d1ce4e5b9
	x = (x ^ x>>27) * 0x94d049bb133111eb
	return x ^ x>>31
}

// retryGap returns the gap (µs) before a retry client's request want,
// after the one before it: exponential at rate per window, drawn from
// (seed, stream, key, want) alone, so whichever node decides the request
// before it draws the same.
func retryGap(seed uint64, st int, key, want uint32, rate, W float64) float64 {
	rng := rand.New(rand.NewPCG(seed^mix(uint64(st)<<32|uint64(key)), uint64(want)))
	return rng.ExpFloat64() * W / rate
}

// retryNode returns the node a retry client's request want, try attempt,
// goes to: uniformly random, as a load balancer sends it, and the same
// whichever node computes it.
func retryNode(seed uint64, st int, key, want uint32, attempt uint8, nodes int) int {
	h := mix(seed ^ mix(uint64(st)<<56|uint64(key)<<24|uint64(want)<<8|uint64(attempt)))
	return int(h % uint64(nodes))
}

// nextRetry returns what a retry client sends after a decision of its
// request a, made by end (µs since T0) with retry-after retry (µs): the
// same request again at end + retry when refused (up to PatMaxRetries
// times); else its next request, a gap after a's due time (a first try)
// or after end (a retry: the client sent nothing while it waited). ok is
// false when the client sends nothing more: its session is over, or the
// run is (runEnd).
func nextRetry(seed uint64, nodes int, c RetryClient, a patArrival, allowed bool, end, retry, W, runEnd float64) (patArrival, bool) {
	st := int(a.Stream)
	if !allowed && a.Attempt < PatMaxRetries {
		next := a
		next.Attempt++
		next.At = uint32(end + retry)
		next.Node = uint8(retryNode(seed, st, a.Key, a.Want, next.Attempt, nodes))
		return next, end+retry < runEnd
	}
	base := end
	if a.Attempt == 0 {
		base = float64(a.At)
	}
	at := base + retryGap(seed, st, a.Key, a.Want+1, c.Rate, W)
	next := patArrival{At: uint32(max(at, end)), Key: a.Key, Want: a.Want + 1, Stream: a.Stream, Node: uint8(retryNode(seed, st, a.Key, a.Want+1, 0, nodes))}
	return next, at < c.End && at < runEnd
}
