package accuracy

import (
	"cmp"
	"fmt"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/hybridlimit/hybridlimit/internal/clocktest"
	"github.com/hybridlimit/hybridlimit/internal/localx"
	"github.com/hybridlimit/hybridlimit/local"
)

// PatternResult are the figures of one pattern with one algorithm in one
// run. A false refusal is a request refused where an exact limiter
// replaying the same requests at the same times admits it; counted per key
// and window as max(0, exact − admitted), summed, as % of what the replay
// admits, over the measured windows, leaving out the requests within
// EdgeMargin of a window's edge.
type PatternResult struct {
	Pattern, Algo string
	Keys          int   // users (clients) with requests in the measured windows
	Requests      int64 // decided in the measured windows
	Refused       int64 // of those, refused by the run
	ExactRefused  int64 // of those, refused by the exact replay
	NoLease       int64 // refused for want of a lease (ReasonNoLease)
	// The false-refusal sum: the requests it counts (Edge left out), what
	// the run and the replay admitted of them, and Σ max(0, exact −
	// admitted) per key and window.
	Counted, Edge          int64
	Admitted, Exact        int64
	FalseRefusals          int64
	FalseRefusalPct        float64
	RefusedWhereExactAdmit int64 // per request: refused here, admitted by the replay
	// The retry pattern's retries (requests sent again at the refusal's
	// time + RetryAfter) in the measured windows: how many, how many the
	// run refused again, how many the replay refuses; and the requests
	// given up after PatMaxRetries retries.
	Retries, RetriesRefused, RetriesExactRefused int64
	RetryRefusedPct, RetryExactRefusedPct        float64
	GaveUp                                       int64
	// Over-admission per key and window, a fraction of the limit in force
	// (fixed window: admitted ÷ L − 1; GCRA: the largest excess over the
	// arrival curve of an interval ending in the window, ÷ L), in a key's
	// first window and in the later ones; two rules: users' and IPs'.
	OverFirst, OverLater Dist
	// Waited counts the decisions that waited for a lease; WaitP50 and
	// WaitP99 are their wait, µs.
	Waited           int64
	WaitP50, WaitP99 Float
	// ChangeSpread is, for the limit-change pattern, the largest spread
	// between the nodes' times of applying one change, ms.
	ChangeSpread Float
}

// MaxPolicy is the share of an api-patterns run's decisions that a
// failure policy may make (Redis did not answer in time: a loaded machine)
// before the run is invalid: the policy's decisions are neither exact nor
// the mode's.
const MaxPolicy = 0.001

// MaxLost is the share of the retry pattern's requests handed between
// nodes that may be lost (a socket that refused them for a second) before
// the run is invalid, as for decisions made by a failure policy.
const MaxLost = 0.001

// timed is an event at the time the replay decides it.
type timed struct {
	Event
	T int64 // µs since T0
}

// replayAt returns when (µs since T0) the limiter decided e, on the clock
// it decided by: for a fixed window, the end of the window it counted in
// less its ResetAfter (Redis's clock, or the hybrid node's estimate of it,
// to the µs); else the call's time (hybrid), its return after a wait, or
// the middle of a central round trip.
func replayAt(e Event, algo string, central bool, W int64) int64 {
	switch {
	case algo == AlgoFixed && e.Reset > 0:
		return (int64(e.Window)+1)*W - int64(e.Reset)
	case central:
		return (int64(e.Start) + int64(e.End)) / 2
	case e.Waited():
		return int64(e.End)
	}
	return int64(e.Start)
}

// AnalyzePatterns reads the node files of an api-patterns run (dir/n<i>.pat,
// .json) and computes its Result: the run's own figures and one
// PatternResult per pattern and algorithm.
func AnalyzePatterns(spec Spec, dir string, rst RedisStats, wall time.Duration) (*Result, error) {
	res := &Result{Spec: spec, Wall: wall.Seconds()}
	W := spec.W()
	endRel := spec.Duration().Microseconds()
	var all []Event
	var gaps []float64
	var lat, waits Slices
	var changes [][]int64
	var lost, sent int64
	modes := map[string]bool{}
	for n := range spec.Nodes {
		base := spec.File(dir, n, spec.Algo)
		sum, err := ReadSummary(base + ".json")
		if err != nil {
			return nil, err
		}
		evs, err := ReadEvents(base + ".pat")
		if err != nil {
			return nil, err
		}
		modes[sum.ModeRun] = true
		res.Scheduled += sum.Scheduled
		res.Decided += sum.Decided
		res.Errors += sum.Errors
		res.Unavailable += sum.Unavailable
		res.Waited += sum.Waited
		lat = mergeSlices(lat, sum.Latency)
		waits = mergeSlices(waits, sum.Waits)
		changes = append(changes, sum.Changes)
		lost += sum.Lost
		sent += sum.Sent
		if res.FirstErr == "" {
			res.FirstErr = sum.FirstErr
		}
		res.Scripts += sum.Redis.Scripts()
		res.ScriptsAttempted += sum.Redis.Attempted
		res.Commands += sum.Redis.Cmds
		res.NodeCPUPct += sum.CPU
		onTime := 0
		for _, e := range evs {
			if int64(e.Start) < endRel {
				onTime++
			}
		}
		if sum.Scheduled > 0 {
			res.RateOff = max(res.RateOff, math.Abs(float64(onTime)/float64(sum.Scheduled)-1))
		}
		res.AchievedRate += float64(onTime)
		var prev int64 = -1
		for _, at := range sum.Rounds {
			if at < 0 || at > endRel {
				continue
			}
			if prev >= 0 {
				gaps = append(gaps, float64(at-prev)/1000)
			}
			prev = at
			res.Rounds++
		}
		all = append(all, evs...)
	}
	for m := range modes {
		res.ModeRun = strings.Trim(res.ModeRun+"+"+m, "+")
	}
	secs := spec.Duration().Seconds()
	res.NodeCPUPct = 100 * res.NodeCPUPct / secs / float64(spec.Nodes)
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		res.LoadAvg, _ = strconv.ParseFloat(strings.Fields(string(b))[0], 64)
	}
	res.OfferedRate = float64(res.Scheduled) / secs
	res.AchievedRate /= secs
	res.Sync = dist(gaps)
	late := make([]float64, len(all))
	for i, e := range all {
		late[i] = (float64(e.Start) - float64(e.Sched)) / 1000
	}
	res.Lateness = dist(late)
	res.Latency = latencyStats(spec, lat, nil, nil)
	res.Latency.setWaits(waits)

	central := spec.Mode == ModeCentral
	byStream := make([][]timed, numStreams)
	for _, e := range all {
		if int(e.Stream) < numStreams {
			sm := streamOf(int(e.Stream))
			byStream[e.Stream] = append(byStream[e.Stream], timed{e, replayAt(e, sm.algo, central, W)})
		}
	}
	for st := range numStreams {
		pr, err := analyzeStream(spec, streamOf(st), byStream[st], changes)
		if err != nil {
			return nil, err
		}
		res.Patterns = append(res.Patterns, pr)
		res.Measured += pr.Requests
	}

	if res.Decided > 0 {
		d := float64(res.Decided)
		res.ScriptsPerDecision = float64(res.Scripts) / d
		res.ServerScripts = rst.EvalshaCalls + rst.EvalCalls
		res.ServerScriptsPerDecision = float64(res.ServerScripts) / d
		res.ScriptUsecPerDecision = float64(rst.EvalshaUsec) / d
		res.RedisCPUusPerDecision = rst.CPU * 1e6 / d
	}
	res.RedisCPUPct = 100 * rst.CPU / wall.Seconds()
	if res.RateOff > MaxRateOff {
		res.Invalid = append(res.Invalid, fmt.Sprintf("achieved rate %.1f%% off schedule", 100*res.RateOff))
	}
	if res.ModeRun == ModeHybrid && !(res.Sync.P99 <= MaxSyncP99*float64(spec.Interval.Milliseconds())) {
		res.Invalid = append(res.Invalid, fmt.Sprintf("sync p99 %.0f ms > %.0f ms", res.Sync.P99, MaxSyncP99*float64(spec.Interval.Milliseconds())))
	}
	if float64(res.Unavailable) > MaxPolicy*float64(res.Decided) {
		res.Invalid = append(res.Invalid, fmt.Sprintf("the failure policy decided more than %.1f%%", 100*MaxPolicy))
	}
	if float64(lost) > MaxLost*float64(sent+lost) {
		res.Invalid = append(res.Invalid, fmt.Sprintf("%d of %d retry requests lost between nodes", lost, sent+lost))
	}
	res.Lost = lost
	res.Valid = len(res.Invalid) == 0
	return res, nil
}

// analyzeStream computes one stream's figures from its events (any order;
// T set) and the nodes' times of applying each limit change.
func analyzeStream(spec Spec, st stream, evs []timed, changes [][]int64) (*PatternResult, error) {
	pr := &PatternResult{Pattern: st.pattern, Algo: st.algo}
	W := spec.W()
	lo, hi := int32(1), int32(spec.Windows)
	slices.SortStableFunc(evs, func(a, b timed) int {
		return cmp.Or(cmp.Compare(a.T, b.T), cmp.Compare(a.Node, b.Node), cmp.Compare(a.Start, b.Start))
	})
	exact, err := exactReplay(spec.T0, st, evs)
	if err != nil {
		return nil, err
	}
	fr := falseRefusals(evs, exact, W, lo, hi, EdgeMargin.Microseconds())
	pr.Counted, pr.Edge, pr.Admitted, pr.Exact, pr.FalseRefusals = fr.counted, fr.edge, fr.admitted, fr.exact, fr.sum
	if pr.Exact > 0 {
		pr.FalseRefusalPct = 100 * float64(pr.FalseRefusals) / float64(pr.Exact)
	}
	rt := retryCounts(evs, exact, W, lo, hi)
	pr.Retries, pr.RetriesRefused, pr.RetriesExactRefused, pr.GaveUp = rt.retries, rt.refused, rt.exactRefused, rt.gaveUp
	if pr.Retries > 0 {
		pr.RetryRefusedPct = 100 * float64(pr.RetriesRefused) / float64(pr.Retries)
		pr.RetryExactRefusedPct = 100 * float64(pr.RetriesExactRefused) / float64(pr.Retries)
	}
	keys := map[uint32]bool{}
	var wts []float64
	for i, e := range evs {
		if w := int32(e.T / W); e.T < 0 || w < lo || w > hi {
			continue
		}
		keys[e.Key] = true
		pr.Requests++
		if !e.Allowed() {
			pr.Refused++
			if exact[i] {
				pr.RefusedWhereExactAdmit++
			}
			if local.Reason(e.Reason&0xF) == local.ReasonNoLease || local.Reason(e.Reason>>4) == local.ReasonNoLease {
				pr.NoLease++
			}
		}
		if !exact[i] {
			pr.ExactRefused++
		}
		if e.Waited() {
			pr.Waited++
			wts = append(wts, float64(e.End-e.Start))
		}
	}
	pr.Keys = len(keys)
	wd := dist(wts)
	pr.WaitP50, pr.WaitP99 = Float(wd.P50), Float(wd.P99)
	first, later, err := overAdmission(st, evs, W, lo, hi)
	if err != nil {
		return nil, err
	}
	pr.OverFirst, pr.OverLater = dist(first), dist(later)
	pr.ChangeSpread = Float(math.NaN())
	if st.pattern == PatChange {
		spread := 0.0
		for c := range len(PatPhases) - 1 {
			lo, hi := int64(math.MaxInt64), int64(math.MinInt64)
			for _, ch := range changes {
				if c < len(ch) {
					lo, hi = min(lo, ch[c]), max(hi, ch[c])
				}
			}
			if hi >= lo {
				spread = max(spread, float64(hi-lo)/1000)
			}
		}
		pr.ChangeSpread = Float(spread)
	}
	return pr, nil
}

// exactReplay decides evs (sorted by T) through an exact limiter, at T
// (µs since t0), and returns its decision of each: one local.Limiter per
// rule; two rules decided as one (local.AllowMultiAt); a limit change
// applied, with SetLimit, as each request's node had applied it when it
// decided the request (Event.Phase).
func exactReplay(t0 int64, st stream, evs []timed) ([]bool, error) {
	user, ip, err := patLimit(st, 0)
	if err != nil {
		return nil, err
	}
	cfg := local.Config{Clock: clocktest.Wall{}, NoBackgroundSweep: true, MaxKeys: 1 << 21}
	ul, err := local.New(user.Params(), cfg)
	if err != nil {
		return nil, err
	}
	defer ul.Close()
	var il *local.Limiter
	if ip.Valid() {
		if il, err = local.New(ip.Params(), cfg); err != nil {
			return nil, err
		}
		defer il.Close()
	}
	var phases []localx.Limit
	if st.pattern == PatChange {
		for ph := range PatPhases {
			lim, _, err := patLimit(st, ph)
			if err != nil {
				return nil, err
			}
			phases = append(phases, lim)
		}
	}
	names := map[uint32]string{}
	name := func(prefix string, k uint32) string {
		key := k
		if prefix == "ip" {
			key |= 1 << 31
		}
		s, ok := names[key]
		if !ok {
			s = prefix + strconv.FormatUint(uint64(k), 10)
			names[key] = s
		}
		return s
	}
	out := make([]bool, len(evs))
	phase := 0
	var dec [2]local.Decision
	for i, e := range evs {
		at := time.UnixMicro(t0 + e.T)
		if phases != nil && int(e.Phase) != phase && int(e.Phase) < len(phases) {
			phase = int(e.Phase)
			if err := ul.SetLimit(phases[phase].Params()); err != nil {
				return nil, err
			}
		}
		if il != nil {
			reqs := [2]local.Request{{Limiter: ul, Key: name("u", e.Key), N: 1}, {Limiter: il, Key: name("ip", e.IP), N: 1}}
			out[i] = local.AllowMultiAt(at, reqs[:], dec[:])
			continue
		}
		out[i] = ul.AllowNAt(at, name("u", e.Key), 1).Allowed()
	}
	return out, nil
}

// frSum is the false-refusal sum of a stream.
type frSum struct {
	counted, edge, admitted, exact, sum int64
}

// falseRefusals sums, per key and window of the measured windows [lo, hi]
// (by T), max(0, what the replay admitted − what the run admitted),
// leaving out the requests within edge µs of a window's edge.
func falseRefusals(evs []timed, exact []bool, W int64, lo, hi int32, edge int64) frSum {
	type kw struct {
		key uint32
		w   int32
	}
	var s frSum
	ex, ad := map[kw]int64{}, map[kw]int64{}
	for i, e := range evs {
		if e.T < 0 {
			continue
		}
		w := int32(e.T / W)
		if w < lo || w > hi {
			continue
		}
		if in := e.T % W; in < edge || in >= W-edge {
			s.edge++
			continue
		}
		s.counted++
		k := kw{e.Key, w}
		if exact[i] {
			s.exact++
			ex[k]++
		}
		if e.Allowed() {
			s.admitted++
			ad[k]++
		}
	}
	for k, n := range ex {
		s.sum += max(n-ad[k], 0)
	}
	return s
}

// retrySum counts a stream's retries in the measured windows.
type retrySum struct {
	retries, refused, exactRefused, gaveUp int64
}

// retryCounts counts the retries (Attempt > 0) among evs in the measured
// windows [lo, hi] (by T): how many, how many the run refused, how many
// the replay refuses; and the requests given up, refused at their last
// allowed retry.
func retryCounts(evs []timed, exact []bool, W int64, lo, hi int32) retrySum {
	var s retrySum
	for i, e := range evs {
		if e.T < 0 {
			continue
		}
		if w := int32(e.T / W); w < lo || w > hi || e.Attempt == 0 {
			continue
		}
		s.retries++
		if !e.Allowed() {
			s.refused++
			if e.Attempt >= PatMaxRetries {
				s.gaveUp++
			}
		}
		if !exact[i] {
			s.exactRefused++
		}
	}
	return s
}

// overAdmission returns the over-admission of every key and measured
// window (evs sorted by T), in the key's first window and in the later
// ones: users' keys, and for two rules IPs' too, each against its rule.
// The limit in force is the largest of the phases the key's requests in
// the window were decided in.
func overAdmission(st stream, evs []timed, W int64, lo, hi int32) (first, later []float64, err error) {
	limits := map[uint8][2]localx.Limit{}
	for ph := range PatPhases {
		if ph > 0 && st.pattern != PatChange {
			break
		}
		u, ip, err := patLimit(st, ph)
		if err != nil {
			return nil, nil, err
		}
		limits[uint8(ph)] = [2]localx.Limit{u, ip}
	}
	type kw struct {
		key uint32 // bit 31: an IP
		w   int32
	}
	over := map[kw]float64{}
	firstW := map[uint32]int32{}
	fixed := st.algo == AlgoFixed
	type curve struct {
		n, minF float64
		phase   uint8
	}
	curves := map[uint32]*curve{}
	count := map[kw]int64{}
	lim := map[kw]int64{}
	for _, e := range evs {
		w := int32(e.T / W)
		for j, key := range []uint32{e.Key, e.IP | 1<<31} {
			if j == 1 && st.pattern != PatMulti {
				break
			}
			if f, ok := firstW[key]; !ok || w < f {
				firstW[key] = w
			}
			if !e.Allowed() {
				continue
			}
			ph := e.Phase
			if st.pattern != PatChange {
				ph = 0
			}
			l := limits[ph][j]
			k := kw{key, w}
			if fixed {
				count[k]++
				lim[k] = max(lim[k], l.Quota())
				continue
			}
			// The arrival curve: admitted(t0, t] − burst − rate × (t − t0),
			// over intervals within one phase (a change starts afresh).
			c := curves[key]
			if c == nil || c.phase != e.Phase {
				c = &curve{minF: math.Inf(1), phase: e.Phase}
				curves[key] = c
			}
			rate := float64(l.Quota()) / float64(W)
			f := c.n - rate*float64(e.T)
			c.minF = min(c.minF, f)
			c.n++
			excess := (f - c.minF + 1 - float64(l.Burst())) / float64(l.Quota())
			if v, ok := over[k]; !ok || excess > v {
				over[k] = excess
			}
		}
	}
	for k, n := range count {
		over[k] = float64(n)/float64(lim[k]) - 1
	}
	for k, v := range over {
		if k.w < lo || k.w > hi {
			continue
		}
		if !fixed {
			v = max(v, 0) // within the curve
		}
		if k.w == firstW[k.key] {
			first = append(first, v)
		} else {
			later = append(later, v)
		}
	}
	return first, later, nil
}
