package accuracy

import (
	"cmp"
	"encoding/json"
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

// Validity thresholds: a run whose sync period p99 passes
// 1.5 × the interval, or whose achieved rate is more than 2% off its
// schedule on any node, is invalid, not a result.
const (
	MaxSyncP99 = 1.5
	MaxRateOff = 0.02
)

// Dist is a distribution's p50, p99 and max.
type Dist struct{ P50, P99, Max float64 }

func dist(v []float64) Dist {
	if len(v) == 0 {
		return Dist{math.NaN(), math.NaN(), math.NaN()}
	}
	s := slices.Clone(v)
	slices.Sort(s)
	rank := func(p float64) float64 { return s[max(int(math.Ceil(p*float64(len(s))))-1, 0)] }
	return Dist{rank(0.50), rank(0.99), s[len(s)-1]}
}

// RedisStats are the server's figures for a run, from INFO after CONFIG
// RESETSTAT (commandstats) and the difference of INFO cpu around it.
type RedisStats struct {
	EvalshaCalls int64
	EvalshaUsec  int64
	EvalCalls    int64
	Calls        int64   // every command
	CPU          float64 // seconds, user + sys
}

// Result is one run's figures. Over-admission is a fraction (0.01 = 1%);
// percentages say so in their names.
type Result struct {
	Spec    Spec
	ModeRun string // the mode the rule ran in, as the registered hybrid.Rule said
	Wall    float64

	Scheduled, Decided, Dropped, Errors int
	FirstErr                            string
	Unavailable                         int64 // decided by a failure policy: Redis unavailable
	// Latency: the decisions' latencies measured in the nodes, µs.
	Latency  LatencyStats
	NoLease  int64 // hybrid rejections for want of a lease, in the measured windows
	Measured int64 // decisions in the measured windows

	// Over-admission per measured window: fixed window, admitted in the
	// window each decision counted in ÷ L − 1; GCRA, the arrival-curve
	// excess over intervals ending in the window ÷ burst; the maximum over
	// keys.
	Over        Dist
	OverWindows []float64
	// False rejections: requests rejected here and admitted by the exact
	// replay of the same arrivals, as % of the replay's admissions. Capacity
	// lost: per key and window, what the replay admitted beyond this run, as
	// % of the replay's admissions.
	FalseRejPct, LostPct float64
	Admitted, Exact      int64
	// Redis cost. Scripts: EVALSHA + EVAL the nodes sent (go-redis hook);
	// ServerScripts: the server's own count (INFO commandstats).
	Scripts, ServerScripts, Commands int64
	ScriptsAttempted                 int64 // answered or not (timed out)
	ScriptsPerDecision               float64
	ServerScriptsPerDecision         float64
	ScriptUsecPerDecision            float64 // INFO commandstats usec of EVALSHA
	RedisCPUPct                      float64 // of one core, over the run
	RedisCPUusPerDecision            float64
	// Sync periods: the gaps between a node's sync rounds, all nodes
	// pooled, in ms. Rounds: their number.
	Sync   Dist
	Rounds int
	// Rates: offered (the schedules'), achieved (decided by the end), per
	// second; RateOff: the worst node's |decided by the end ÷ scheduled − 1|.
	OfferedRate, AchievedRate, RateOff float64
	Lateness                           Dist // ms, decision time − scheduled time
	// NodeCPUPct is the nodes' mean CPU use over the run, % of one core;
	// LoadAvg the machine's 1-minute load average as the run ended (other
	// work on the machine shows there).
	NodeCPUPct, LoadAvg float64
	// NodeCPUusPerDecision is the node processes' CPU (user + system, over
	// the measured part) per decision, as Redis's: every rule's decision
	// counts.
	NodeCPUusPerDecision float64

	// Users: the api-users figures (nil for the other workloads).
	Users *UsersResult `json:",omitempty"`
	// Patterns: the api-patterns figures, one per pattern and algorithm
	// (nil for the other workloads).
	Patterns []*PatternResult `json:",omitempty"`
	// Waited counts the decisions that waited for a lease
	// (those hybridlimit.lease.waits counts).
	Waited int64 `json:",omitempty"`
	// Lost counts the api-patterns retry requests that never reached the
	// node they were for.
	Lost int64 `json:",omitempty"`

	Valid   bool
	Invalid []string
}

// Analyze reads the node files of a run (dir/n<i>.rec, .json) and computes
// its Result.
func Analyze(spec Spec, dir string, rst RedisStats, wall time.Duration) (*Result, error) {
	lim, err := spec.Lim()
	if err != nil {
		return nil, err
	}
	res := &Result{Spec: spec, Wall: wall.Seconds()}
	W := spec.W()
	endRel := spec.Duration().Microseconds()
	lo, hi := int32(1), int32(spec.Windows) // measured windows
	var all []Record
	var gaps []float64
	modes := map[string]bool{}
	var lat, onCPU, warm, waits Slices
	for n := range spec.Nodes {
		base := spec.File(dir, n, spec.Algo)
		sum, err := ReadSummary(base + ".json")
		if err != nil {
			return nil, err
		}
		recs, err := ReadRecords(base + ".rec")
		if err != nil {
			return nil, err
		}
		modes[sum.ModeRun] = true
		res.Scheduled += sum.Scheduled
		res.Decided += sum.Decided
		res.Dropped += sum.Dropped
		res.Errors += sum.Errors
		res.Unavailable += sum.Unavailable
		for i, h := range sum.Latency {
			for len(lat) <= i {
				lat = append(lat, nil)
			}
			lat[i].merge(h)
		}
		for i, h := range sum.Warm {
			for len(warm) <= i {
				warm = append(warm, nil)
			}
			warm[i].merge(h)
		}
		waits = mergeSlices(waits, sum.Waits)
		res.Waited += sum.Waited
		for i, h := range sum.OnCPU {
			for len(onCPU) <= i {
				onCPU = append(onCPU, nil)
			}
			onCPU[i].merge(h)
		}
		if res.FirstErr == "" {
			res.FirstErr = sum.FirstErr
		}
		res.Scripts += sum.Redis.Scripts()
		res.ScriptsAttempted += sum.Redis.Attempted
		res.NodeCPUPct += sum.CPU
		res.Commands += sum.Redis.Cmds
		var onTime int
		for _, r := range recs {
			if int64(r.Actual) < endRel {
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
		all = append(all, recs...)
	}
	for m := range modes {
		res.ModeRun = strings.Trim(res.ModeRun+"+"+m, "+")
	}
	secs := spec.Duration().Seconds()
	res.NodeCPUusPerDecision = perDecision(res.NodeCPUPct, res.Decided, spec)
	res.NodeCPUPct = 100 * res.NodeCPUPct / secs / float64(spec.Nodes)
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		res.LoadAvg, _ = strconv.ParseFloat(strings.Fields(string(b))[0], 64)
	}
	res.OfferedRate = float64(res.Scheduled) / secs
	res.AchievedRate /= secs
	res.Sync = dist(gaps)

	late := make([]float64, len(all))
	for i, r := range all {
		late[i] = (float64(r.Actual) - float64(r.Sched)) / 1000
	}
	res.Lateness = dist(late)
	res.Latency = latencyStats(spec, lat, onCPU, warm)
	res.Latency.setWaits(waits)

	// The exact replay: every decided arrival, in the order of the times
	// they were decided at, through one local limiter. Fixed window: a
	// decision is replayed in the window it counted in, on the clock the
	// limiter decided by (Redis's, or the node's estimate of it): its time
	// is clamped into that window, so that a node whose estimate of Redis's
	// clock is a millisecond ahead of the wall clock is not charged with
	// the replay's disagreement about which window an arrival belongs to.
	if spec.Algo == AlgoFixed {
		for i := range all {
			r := &all[i]
			lo, hi := int64(r.Window)*W, int64(r.Window+1)*W-1
			if r.Window >= 0 {
				r.Actual = uint32(min(max(int64(r.Actual), lo), hi))
			}
		}
	}
	slices.SortStableFunc(all, func(a, b Record) int { return cmp.Compare(a.Actual, b.Actual) })
	exact, err := local.New(lim.Params(), local.Config{Clock: clocktest.Wall{}, NoBackgroundSweep: true, MaxKeys: 1 << 21})
	if err != nil {
		return nil, err
	}
	defer exact.Close()
	names := map[uint32]string{}
	type kw struct {
		key uint32
		w   int32
	}
	exactPer, admittedPer := map[kw]int64{}, map[kw]int64{}
	var falseRej, measured int64
	exactOf := make([]bool, len(all)) // the replay's decision of each record
	for i, r := range all {
		k := r.KeyID()
		name, ok := names[k]
		if !ok {
			name = KeyName(k)
			names[k] = name
		}
		ex := exact.AllowNAt(time.UnixMicro(spec.T0+int64(r.Actual)), name, 1)
		exactOf[i] = ex.Allowed()
		w := int32(int64(r.Actual) / W) // the wall clock's window
		if w < lo || w > hi {
			continue
		}
		if ex.Allowed() {
			res.Exact++
			exactPer[kw{k, w}]++
		}
		if r.Allowed() {
			res.Admitted++
			admittedPer[kw{k, w}]++
		} else if ex.Allowed() {
			falseRej++
		}
		if r.Reason() == uint8(local.ReasonNoLease) {
			res.NoLease++
		}
		measured++
	}
	res.Measured = measured
	if res.Exact > 0 {
		var lost int64
		for k, n := range exactPer {
			lost += max(n-admittedPer[k], 0)
		}
		res.FalseRejPct = 100 * float64(falseRej) / float64(res.Exact)
		res.LostPct = 100 * float64(lost) / float64(res.Exact)
	}

	// Over-admission, by each algorithm's own invariant.
	over := make([]float64, hi-lo+1)
	for i := range over {
		over[i] = math.Inf(-1)
	}
	switch spec.Algo {
	case AlgoFixed:
		per := map[kw]int64{}
		for _, r := range all {
			if r.Allowed() && r.Window >= lo && r.Window <= hi {
				per[kw{r.KeyID(), r.Window}]++
			}
		}
		for k, n := range per {
			over[k.w-lo] = max(over[k.w-lo], float64(n)/float64(spec.Limit)-1)
		}
	case AlgoGCRA, AlgoToken, AlgoLeaky:
		arrivalCurve(all, lim, W, lo, hi, over)
	case AlgoCounter:
		counterOver(all, lim, W, lo, hi, over)
	}
	for i := range over {
		if math.IsInf(over[i], -1) {
			over[i] = -1 // nothing admitted in the window
		}
		if bucket(spec.Algo) {
			// The arrival curve's excess is about −burst for a trace that
			// keeps to the curve with its bucket drained: report the excess
			// beyond the curve, 0 when the invariant holds.
			over[i] = max(over[i], 0)
		}
	}
	res.OverWindows = over
	res.Over = dist(over)

	if spec.Workload == WorkAPIUsers {
		res.Users = analyzeUsers(spec, lim, all, exactOf)
	}

	// Redis: per decision of every rule the run decided.
	if res.Decided > 0 {
		d := float64(res.Decided * len(spec.RuleAlgos()))
		res.ScriptsPerDecision = float64(res.Scripts) / d
		res.ServerScripts = rst.EvalshaCalls + rst.EvalCalls
		res.ServerScriptsPerDecision = float64(res.ServerScripts) / d
		res.ScriptUsecPerDecision = float64(rst.EvalshaUsec) / d
		res.RedisCPUusPerDecision = perDecision(rst.CPU, res.Decided, spec)
	}
	res.RedisCPUPct = 100 * rst.CPU / wall.Seconds()

	// Validity.
	if res.RateOff > MaxRateOff {
		res.Invalid = append(res.Invalid, fmt.Sprintf("achieved rate %.1f%% off schedule", 100*res.RateOff))
	}
	syncs := spec.Mode == ModeNaive || res.ModeRun == ModeHybrid
	if syncs && !spec.Outage() && !(res.Sync.P99 <= MaxSyncP99*float64(spec.Interval.Milliseconds())) {
		res.Invalid = append(res.Invalid, fmt.Sprintf("sync p99 %.0f ms > %.0f ms", res.Sync.P99, MaxSyncP99*float64(spec.Interval.Milliseconds())))
	}
	res.Valid = len(res.Invalid) == 0
	return res, nil
}

// arrivalCurve sets over[w − lo] to the largest arrival-curve excess, over
// every key, of intervals (t0, t] with t in window w and t0 at or after the
// first measured window: admitted(t0, t] − burst − rate × (t − t0), over the
// burst. With a_i the i-th admission time of a key, the excess of (a_i⁻,
// a_j] is f(j) − f(i) + 1 − burst, f(k) = k − rate × a_k: one pass with
// the running minimum of f.
func arrivalCurve(all []Record, lim localx.Limit, W int64, lo, hi int32, over []float64) {
	start := int64(lo) * W
	burst := float64(lim.Burst())
	curveExcess(all, lim, W, func(r Record) bool {
		at := int64(r.Actual)
		return at >= start && int32(at/W) <= hi
	}, func(r Record, excess float64) {
		w := int32(int64(r.Actual) / W)
		over[w-lo] = max(over[w-lo], excess/burst)
	})
}

// curveExcess walks the admissions of all (sorted by time) that keep
// selects and calls emit at each with the largest arrival-curve excess of
// an interval of its key ending there: admitted(t0, t] − burst − rate ×
// (t − t0), t0 at or after the key's first selected admission.
func curveExcess(all []Record, lim localx.Limit, W int64, keep func(Record) bool, emit func(r Record, excess float64)) {
	rate := float64(lim.Quota()) / float64(W) // per µs
	burst := float64(lim.Burst())
	type st struct {
		n    float64
		minF float64
	}
	keys := map[uint32]*st{}
	for _, r := range all {
		if !r.Allowed() || !keep(r) {
			continue
		}
		s := keys[r.KeyID()]
		if s == nil {
			s = &st{minF: math.Inf(1)}
			keys[r.KeyID()] = s
		}
		f := s.n - rate*float64(r.Actual)
		s.minF = min(s.minF, f)
		s.n++
		emit(r, f-s.minF+1-burst)
	}
}

// counterOver checks the sliding window counter's own invariant at every
// admission: the previous window's admissions weighted by the steps of it
// still inside the sliding window, plus this window's, at most the limit.
// Windows are the node clock's.
func counterOver(all []Record, lim localx.Limit, W int64, lo, hi int32, over []float64) {
	step, ws := lim.Counter()
	per := map[[2]int64]int64{}
	for _, r := range all {
		if !r.Allowed() {
			continue
		}
		at := int64(r.Actual)
		w := at - at%W
		k := int64(r.KeyID())
		per[[2]int64{k, w}]++
		idx := int32(w / W)
		if idx < lo || idx > hi {
			continue
		}
		left := ws - (at-w)/step
		est := float64(per[[2]int64{k, w - W}])*float64(left)/float64(ws) + float64(per[[2]int64{k, w}])
		over[idx-lo] = max(over[idx-lo], est/float64(lim.Quota())-1)
	}
}

// Float is a float64 whose NaN (no data) is null in JSON.
type Float float64

// MarshalJSON writes NaN and infinities as null.
func (f Float) MarshalJSON() ([]byte, error) {
	v := float64(f)
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return []byte("null"), nil
	}
	return []byte(strconv.FormatFloat(v, 'g', -1, 64)), nil
}

// UnmarshalJSON reads null as NaN.
func (f *Float) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		*f = Float(math.NaN())
		return nil
	}
	v, err := strconv.ParseFloat(string(b), 64)
	*f = Float(v)
	return err
}

// MarshalJSON writes NaN (no data) as null.
func (d Dist) MarshalJSON() ([]byte, error) {
	f := func(v float64) string {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return "null"
		}
		return strconv.FormatFloat(v, 'g', -1, 64)
	}
	return []byte(`{"P50":` + f(d.P50) + `,"P99":` + f(d.P99) + `,"Max":` + f(d.Max) + `}`), nil
}

// UnmarshalJSON reads null as NaN.
func (d *Dist) UnmarshalJSON(b []byte) error {
	var v struct{ P50, P99, Max *float64 }
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	g := func(p *float64) float64 {
		if p == nil {
			return math.NaN()
		}
		return *p
	}
	d.P50, d.P99, d.Max = g(v.P50), g(v.P99), g(v.Max)
	return nil
}

// perDecision is cpu (seconds) in µs per decision of every rule the run
// decided: decided requests, each decided by spec's every rule.
func perDecision(cpu float64, decided int, spec Spec) float64 {
	if decided == 0 {
		return math.NaN()
	}
	return cpu * 1e6 / float64(decided*len(spec.RuleAlgos()))
}
