package main

import (
	"cmp"
	"slices"
	"strings"
	"time"

	"github.com/hybridlimit/hybridlimit/local"
)

// ruleWindow is the window of the demo's rule, and the unit of every count
// the demo shows: admissions are counted per window as Redis places them,
// so that a fixed window's boundary (up to twice the limit in any second
// that straddles one) does not read as over-admission.
const ruleWindow = time.Second

// classOf returns the class of the client the load generator named key, or
// -1 for a key it does not make.
func classOf(key string) int {
	switch {
	case key == "abuser":
		return classAbuser
	case key == "skewed":
		return classSkewed
	case strings.HasPrefix(key, "new-"):
		return classNew
	case strings.HasPrefix(key, "steady-"):
		return classSteady
	}
	return -1
}

// firstWindow returns the start of the first window that begins at least
// lead after now: windows start at multiples of window on Redis's clock, as
// Redis's scripts place them (all three µs on Redis's clock).
func firstWindow(now, window, lead int64) int64 {
	t := now + lead
	if r := t % window; r != 0 {
		t += window - r
	}
	return t
}

// windowOf returns the index of the window that holds at: 0 for the one
// starting at start, negative before it.
func windowOf(at, start, window int64) int {
	d := at - start
	if d < 0 {
		return int((d - window + 1) / window)
	}
	return int(d / window)
}

// demoLimit is the Limit of the nodes' rule (demoRule): the exact replay's.
func demoLimit(algo string, limit int64) (local.Limit, error) {
	var a local.Algorithm
	if err := a.UnmarshalText([]byte(algo)); err != nil {
		return local.Limit{}, err
	}
	lim := local.Limit{Algorithm: a, Quota: limit, Window: ruleWindow}
	return lim, lim.Validate()
}

// sortRecords puts records in the order their requests were decided (the
// nodes' files are each in order, but interleave).
func sortRecords(recs []record) {
	slices.SortStableFunc(recs, func(a, b record) int {
		return cmp.Or(cmp.Compare(a.at, b.at), cmp.Compare(a.node, b.node))
	})
}

// exactReplay is one local.Limiter under the rule's Limit, deciding the
// requests the cluster decided, at the times it decided them (on Redis's
// clock, so its windows are Redis's): what an exact limiter admits on the
// same arrivals. Not safe for concurrent use.
type exactReplay struct {
	l *local.Limiter
}

// wallClock is a local.Clock that calls time.Now: unlike the Limiter's
// default clock, it runs no goroutine.
type wallClock struct{}

func (wallClock) Now() time.Time { return time.Now() }

func newExactReplay(lim local.Limit) (*exactReplay, error) {
	// Times are the records', not the clock's: no background sweep (see
	// local.Config.Clock).
	l, err := local.New(lim, local.Config{Clock: wallClock{}, NoBackgroundSweep: true})
	if err != nil {
		return nil, err
	}
	return &exactReplay{l: l}, nil
}

// decide sets each record's exact; recs must be sorted (sortRecords) and
// come after every record decided before.
func (r *exactReplay) decide(recs []record) {
	for i := range recs {
		recs[i].exact = r.l.AllowNAt(time.UnixMicro(recs[i].at), recs[i].key, 1).Allowed()
	}
}

func (r *exactReplay) close() { r.l.Close() }

// replay sorts recs and decides them all with a new exactReplay.
func replay(lim local.Limit, recs []record) error {
	r, err := newExactReplay(lim)
	if err != nil {
		return err
	}
	defer r.close()
	sortRecords(recs)
	r.decide(recs)
	return nil
}

// windowCounts are one window's requests, per class of client, as the
// cluster decided them and as the exact replay does.
type windowCounts struct {
	admitted, exact [numClasses]int64 // by the cluster, by the exact replay
	refused, failed [numClasses]int64 // by the cluster
	clients         [numClasses]int64 // clients with a request in the window
	most            [numClasses]int64 // the most the cluster admitted for one client
	over, under     [numClasses]int64 // Σ per client of what the cluster admitted beyond the exact replay, and short of it
	nodeAdmitted    [numClasses][maxNodes]int64
	nodeRefused     [maxNodes]int64 // every class
	decisions       int64           // requests recorded, every class
}

// countWindow counts the records of one window, exact already decided.
func countWindow(recs []record) windowCounts {
	var w windowCounts
	type perClient struct{ admitted, exact int64 }
	clients := make(map[string]*perClient)
	for _, r := range recs {
		w.decisions++
		cl := classOf(r.key)
		if cl < 0 {
			continue // not a key of the load generator's
		}
		c := clients[r.key]
		if c == nil {
			c = &perClient{}
			clients[r.key] = c
			w.clients[cl]++
		}
		switch r.outcome {
		case outcomeAdmitted:
			w.admitted[cl]++
			w.nodeAdmitted[cl][r.node]++
			c.admitted++
		case outcomeRefused:
			w.refused[cl]++
			w.nodeRefused[r.node]++
		default:
			w.failed[cl]++
		}
		if r.exact {
			w.exact[cl]++
			c.exact++
		}
	}
	for key, c := range clients {
		cl := classOf(key)
		w.most[cl] = max(w.most[cl], c.admitted)
		w.over[cl] += max(0, c.admitted-c.exact)
		w.under[cl] += max(0, c.exact-c.admitted)
	}
	return w
}

// tally counts n windows of window µs from start, out of records already
// decided by the exact replay; records outside them are left out.
func tally(recs []record, start, window int64, n int) []windowCounts {
	byWindow := make([][]record, n)
	for _, r := range recs {
		if i := windowOf(r.at, start, window); i >= 0 && i < n {
			byWindow[i] = append(byWindow[i], r)
		}
	}
	out := make([]windowCounts, n)
	for i, rs := range byWindow {
		out[i] = countWindow(rs)
	}
	return out
}

// ratio returns a ÷ b, and false when b is 0.
func ratio(a, b int64) (float64, bool) {
	if b == 0 {
		return 0, false
	}
	return float64(a) / float64(b), true
}
