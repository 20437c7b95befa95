package accuracy

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/hybridlimit/hybridlimit/internal/localx"
)

// The api-users workload: the limit real APIs set (100 per minute per user,
// time-scaled to 100 per 10 s), over many users who each come for a session
// of about one window. Most users ask for 1 to 10 per window, drawn from a
// truncated Pareto (heavy-tailed: most near 1); 1% of users (every
// hundredth key) ask for 10 × the limit. A session starts at a uniformly
// random time of the run, so users keep arriving cold; each request goes to
// a uniformly random node, as a round-robin load balancer sends it.
//
// The total rate follows from the key count and the run's length:
// Keys × (0.99 × 2.36 + 0.01 × 10 × L) × session ÷ duration, about 3,970
// requests per second at 100,000 keys over 31 windows of 10 s: what central
// mode serves on time with 8 nodes on a 2-core machine (it does a Redis
// round trip per rule and request).
const (
	UsersKeys      = 100000
	UsersLimit     = 100
	UsersWindow    = 10 * time.Second
	UsersBurst     = 10 // GCRA's burst
	UsersWindows   = 30
	UsersAbuseEach = 100  // every UsersAbuseEach-th key is an abuser: 1%
	UsersAbuse     = 10.0 // an abuser's rate, × the limit
	UsersMinRate   = 1.0  // a user's rate per window: from
	UsersMaxRate   = 10.0 // to
	UsersAlpha     = 1.2  // the Pareto's shape
	UsersSession   = 1.0  // a session's length, in windows
)

// UsersAlgos are the algorithms the api-users run decides, one rule each,
// on the same arrivals.
var UsersAlgos = []string{AlgoFixed, AlgoGCRA}

// UsersModes are the modes the api-users table compares; Local, each node
// deciding alone, is the floor of the node's CPU.
var UsersModes = []string{ModeHybrid, ModeCentral, ModeNaive, ModeLocal}

// UsersClusterModes are the modes of the api-users rows on a Redis
// Cluster: those that reach Redis (Local mode's row is the same on either).
var UsersClusterModes = []string{ModeHybrid, ModeCentral, ModeNaive}

// TargetNodeCPUvsLocal is the most a distributed mode's node CPU per
// decision may be, as a multiple of Local mode's on the same arrivals.
const TargetNodeCPUvsLocal = 1.5

// NewUsersSpec returns the api-users run in mode m over keys users and
// windows measured windows (after one warm-up window).
func NewUsersSpec(m string, keys, windows int) Spec {
	s := Spec{
		Set: SetUsers, Mode: m, Algo: UsersAlgos[0], Algos: slices.Clone(UsersAlgos), Burst: UsersBurst,
		Workload: WorkAPIUsers, Limit: UsersLimit, Window: UsersWindow, Nodes: 8, Windows: windows,
		Keys: keys, Seed: 1, Interval: DefaultInterval, Workers: DefaultWorkers,
	}
	s.ID = fmt.Sprintf("users-%s-K%d-W%d", m, keys, windows)
	return s
}

// NewUsersClusterSpec returns the api-users run in mode m against a
// three-master Redis Cluster: the same arrivals as NewUsersSpec's, the
// nodes on a redis.ClusterClient.
func NewUsersClusterSpec(m string, keys, windows int) Spec {
	s := NewUsersSpec(m, keys, windows)
	s.Cluster = true
	s.ID = fmt.Sprintf("users-%s-cluster-K%d-W%d", m, keys, windows)
	return s
}

// NewOutageSpec returns the outage run of the api-users workload in mode m:
// Redis killed at the start of the second measured window for down.
func NewOutageSpec(m string, keys, windows int, down time.Duration) Spec {
	s := NewUsersSpec(m, keys, windows)
	s.Set = SetOutage
	s.KillAt = 2 * s.Window
	s.Down = down
	s.ID = "outage-" + s.ID
	return s
}

// User is one user of the api-users workload.
type User struct {
	Rate   float64 // offered per window
	Start  float64 // session start, µs since T0
	Len    float64 // session length, µs
	Abuser bool
}

// Over reports whether the user asks for more than the limit.
func (u User) Over(limit int64) bool { return u.Rate > float64(limit) }

// Users returns the users of the api-users workload, indexed by key id: the
// same in every node (seeded with Seed alone).
func (s Spec) Users() []User {
	rng := rand.New(rand.NewPCG(s.Seed, 0x75736572))
	W := float64(s.W())
	end := float64(s.Duration().Microseconds())
	// The Pareto's tail beyond UsersMaxRate, cut off: inverse CDF of the
	// truncated law.
	cut := 1 - math.Pow(UsersMinRate/UsersMaxRate, UsersAlpha)
	out := make([]User, s.Keys)
	for k := range out {
		u := User{Len: UsersSession * W}
		if k%UsersAbuseEach == 0 {
			u.Abuser = true
			u.Rate = UsersAbuse * float64(s.Limit)
		} else {
			u.Rate = UsersMinRate * math.Pow(1-rng.Float64()*cut, -1/UsersAlpha)
		}
		u.Start = rng.Float64() * (end - u.Len)
		out[k] = u
	}
	return out
}

// usersSchedule returns node n's arrivals of the api-users workload: each
// user's session a Poisson process at its rate ÷ N (the node's share of a
// uniformly random split), all users merged in time order.
func (s Spec) usersSchedule(n int) []Arrival {
	rng := rand.New(rand.NewPCG(s.Seed, uint64(n)+1))
	W := float64(s.W())
	var out []Arrival
	for k, u := range s.Users() {
		rate := u.Rate / W / float64(s.Nodes) // per µs
		end := u.Start + u.Len
		for at := u.Start + rng.ExpFloat64()/rate; at < end; at += rng.ExpFloat64() / rate {
			out = append(out, Arrival{At: uint32(at), Key: uint32(k)})
		}
	}
	slices.SortFunc(out, func(a, b Arrival) int {
		if a.At != b.At {
			return int(int64(a.At) - int64(b.At))
		}
		return int(int64(a.Key) - int64(b.Key))
	})
	return out
}

// UsersRate returns the api-users run's expected total offered rate, per
// second.
func (s Spec) UsersRate() float64 {
	mean := UsersMinRate * UsersAlpha / (UsersAlpha - 1) *
		(1 - math.Pow(UsersMinRate/UsersMaxRate, UsersAlpha-1)) / (1 - math.Pow(UsersMinRate/UsersMaxRate, UsersAlpha))
	abusers := float64((s.Keys + UsersAbuseEach - 1) / UsersAbuseEach)
	perWindow := (float64(s.Keys)-abusers)*mean + abusers*UsersAbuse*float64(s.Limit)
	return perWindow * UsersSession / s.Duration().Seconds()
}

// UsersResult are the api-users figures of one algorithm of a run.
// Over-admission is a fraction of the limit (0.05 = 5%): for the fixed
// window, admitted in a window ÷ L − 1; for the bucket algorithms, the
// largest excess over the arrival curve (burst + rate × interval) of an
// interval ending in the window, ÷ L.
type UsersResult struct {
	Users, Abusers int // in the run
	// Users under their limit: their requests in the measured windows,
	// those rejected, and those rejected that the exact replay admitted
	// (false rejections), as % of their requests.
	UnderReqs, UnderRejected, UnderFalseRej int64
	UnderRejPct, UnderFalseRejPct           float64
	// Users over their limit: over-admission per (user, window), in the
	// user's first window (its session starts there: cold) and in the later
	// ones; and per measured window, the worst user (OverByWindow[i] is
	// window i + 1).
	OverFirst, OverLater   Dist
	OverFirstN, OverLaterN int
	OverByWindow           []Float
	// ColdBound is the first window's bound (ColdWhy says whence).
	ColdBound Float
	ColdWhy   string
}

// ColdBound returns the cold-start bound of a user's first window for the
// run's mode, as a fraction of the limit, and where it comes from. Hybrid
// (docs/accuracy.md, "Debt"): a node without a lease for a key admits at
// most a = max(1, ⌈εC/N⌉) as debt while its lease is fetched (C the limit,
// or the bucket's burst; ε = 0.05), so the cluster at most N·a over the
// limit (fixed window) or over the arrival curve (GCRA), here ÷ L.
func ColdBound(s Spec) (float64, string) {
	switch s.Mode {
	case ModeCentral:
		return 0, "exact"
	case ModeHybrid:
		c := float64(s.Limit)
		if bucket(s.Algo) {
			lim, err := s.Lim()
			if err != nil {
				return math.NaN(), err.Error()
			}
			c = float64(lim.Burst())
		}
		a := max(1, math.Ceil(0.05*c/float64(s.Nodes)))
		return float64(s.Nodes) * a / float64(s.Limit), fmt.Sprintf("N·a ÷ L, a = max(1, ⌈εC/N⌉) = %.0f per node before its first lease", a)
	case ModeNaive:
		return math.NaN(), "none: each node admits up to L until its first sync"
	case ModeLocal:
		return math.NaN(), "none: each node admits up to L"
	}
	return math.NaN(), ""
}

// analyzeUsers computes the api-users figures from all (sorted by time) and
// the exact replay's decision of each record.
func analyzeUsers(spec Spec, lim localx.Limit, all []Record, exactOf []bool) *UsersResult {
	users := spec.Users()
	W := spec.W()
	lo, hi := int32(1), int32(spec.Windows)
	res := &UsersResult{Users: len(users)}
	for _, u := range users {
		if u.Over(spec.Limit) {
			res.Abusers++
		}
	}
	cb, why := ColdBound(spec)
	res.ColdBound, res.ColdWhy = Float(cb), why
	for i, r := range all {
		u := users[r.KeyID()]
		w := int32(int64(r.Actual) / W)
		if u.Over(spec.Limit) || w < lo || w > hi {
			continue
		}
		res.UnderReqs++
		if !r.Allowed() {
			res.UnderRejected++
			if exactOf[i] {
				res.UnderFalseRej++
			}
		}
	}
	if res.UnderReqs > 0 {
		res.UnderRejPct = 100 * float64(res.UnderRejected) / float64(res.UnderReqs)
		res.UnderFalseRejPct = 100 * float64(res.UnderFalseRej) / float64(res.UnderReqs)
	}

	type kw struct {
		key uint32
		w   int32
	}
	over := map[kw]float64{}
	L := float64(spec.Limit)
	if spec.Algo == AlgoFixed {
		per := map[kw]int64{}
		for _, r := range all {
			if r.Allowed() && users[r.KeyID()].Over(spec.Limit) {
				per[kw{r.KeyID(), r.Window}]++
			}
		}
		for k, n := range per {
			over[k] = float64(n)/L - 1
		}
	} else {
		// The arrival curve per user, from its first admission on.
		curveExcess(all, lim, W, func(r Record) bool { return users[r.KeyID()].Over(spec.Limit) }, func(r Record, excess float64) {
			k := kw{r.KeyID(), int32(int64(r.Actual) / W)}
			e, ok := over[k]
			if !ok {
				e = math.Inf(-1)
			}
			over[k] = max(e, excess/L)
		})
		for k, v := range over {
			over[k] = max(v, 0) // within the curve
		}
	}
	var first, later []float64
	res.OverByWindow = make([]Float, hi-lo+1)
	for i := range res.OverByWindow {
		res.OverByWindow[i] = Float(math.NaN())
	}
	for k, v := range over {
		if k.w < lo || k.w > hi {
			continue
		}
		i := k.w - lo
		if o := float64(res.OverByWindow[i]); math.IsNaN(o) || v > o {
			res.OverByWindow[i] = Float(v)
		}
		if k.w == int32(int64(users[k.key].Start)/W) {
			first = append(first, v)
		} else {
			later = append(later, v)
		}
	}
	res.OverFirst, res.OverFirstN = dist(first), len(first)
	res.OverLater, res.OverLaterN = dist(later), len(later)
	return res
}

// LatencyStats are the decisions' latencies measured in the nodes, in µs:
// over the run; the worst p99 of any one second (of those with at least
// 100 decisions); and, in an outage run, while Redis was down and in the
// 10 s after its restart.
type LatencyStats struct {
	P50, P99, P999, Max       Float
	WorstP99                  Float
	WorstSecond               int
	DownP50, DownP99, DownMax Float
	DownDecided               int64
	AfterP99                  Float
	// OnCPUP50 and OnCPUP99 are over the decisions' time on the CPU (the
	// deciding thread's CPU clock; NaN in central mode, whose decisions
	// wait on Redis): what a decision costs when its thread is not made to
	// wait for a core.
	OnCPUP50, OnCPUP99 Float
	// WarmP50 and WarmP99 are over decisions on one key made back to back
	// in the same nodes after the schedule, caches warm (NaN when none).
	WarmP50, WarmP99 Float
	// Waited counts the decisions that waited for a lease
	// (those hybridlimit.lease.waits counts), and WaitP50 and WaitP99 are their latencies (NaN
	// when none waited); the figures above are over the other decisions.
	Waited           int64
	WaitP50, WaitP99 Float
}

// setWaits sets the figures of the decisions that waited from their
// histograms.
func (st *LatencyStats) setWaits(waits Slices) {
	var all Hist
	for _, h := range waits {
		all.merge(h)
	}
	st.Waited = all.Count()
	st.WaitP50, st.WaitP99 = medianP99(waits)
}

// medianP99 returns the median and p99 over every histogram of s, NaN when
// they hold nothing.
func medianP99(s Slices) (p50, p99 Float) {
	var all Hist
	for _, h := range s {
		all.merge(h)
	}
	if all.Count() == 0 {
		nan := Float(math.NaN())
		return nan, nan
	}
	return Float(all.Quantile(0.5)), Float(all.Quantile(0.99))
}

func latencyStats(spec Spec, lat, onCPU, warm Slices) LatencyStats {
	var all, down, after Hist
	nan := Float(math.NaN())
	st := LatencyStats{WorstP99: nan, DownP50: nan, DownP99: nan, DownMax: nan, AfterP99: nan}
	kill, back := int(spec.KillAt/time.Second), int((spec.KillAt+spec.Down)/time.Second)
	for sec, h := range lat {
		all.merge(h)
		if h.Count() >= 100 {
			if p := h.Quantile(0.99); math.IsNaN(float64(st.WorstP99)) || p > float64(st.WorstP99) {
				st.WorstP99, st.WorstSecond = Float(p), sec
			}
		}
		if spec.Outage() {
			switch {
			case sec >= kill && sec < back:
				down.merge(h)
			case sec >= back && sec < back+10:
				after.merge(h)
			}
		}
	}
	q := func(h Hist, p float64) Float { return Float(h.Quantile(p)) }
	st.P50, st.P99, st.P999, st.Max = q(all, 0.5), q(all, 0.99), q(all, 0.999), q(all, 1)
	st.OnCPUP50, st.OnCPUP99 = medianP99(onCPU)
	st.WarmP50, st.WarmP99 = medianP99(warm)
	if spec.Outage() {
		st.DownP50, st.DownP99, st.DownMax = q(down, 0.5), q(down, 0.99), q(down, 1)
		st.DownDecided = down.Count()
		st.AfterP99 = q(after, 0.99)
	}
	return st
}
