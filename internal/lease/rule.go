package lease

import (
	"errors"
	"math"
	"sync/atomic"
	"time"

	"github.com/hybridlimit/hybridlimit/internal/localx"
	"github.com/hybridlimit/hybridlimit/local"
)

// Params are the sync parameters a Rule's leases are sized and renewed by
// (see hybrid.SyncConfig, whose fields they copy).
type Params struct {
	Interval    time.Duration // the regular sync period
	Horizon     time.Duration // how long a lease is sized to last
	MinGap      time.Duration // the least gap between early syncs of a key; the retry-after of a refusal for want of a lease
	PaceGap     time.Duration // sizes paced grants
	Safety      time.Duration // a share is dropped this long before its expiry
	IdleRelease time.Duration // a key idle this long gives its lease back
	Epsilon     float64       // the cold-start allowance, as a fraction of the limit; 0 for none
	Virtual     bool          // the scripts run on the node's clock (syncx.Config.PassTime): the offset stays 0
}

// Rule is a limit as the hybrid mode runs it: split into leases, with the
// sync parameters its leases need. Build one with NewRule. It is safe for
// concurrent use.
type Rule struct {
	lim     localx.Limit
	maxCost int64 // lim.MaxCost(), read on every decision without copying lim
	buckets bool  // rate shares (token/leaky bucket, GCRA); windows otherwise
	counter bool  // the sliding window counter
	sub     bool  // the sub-window counter: leased per sub-window (w), ws of them to a window

	w, limit, burst int64 // window (µs; the sub-window counter's sub-window), limit per window, burst (buckets)
	step, ws        int64 // the counter's steps; the sub-window counter's sub-window and sub-windows

	interval    int64 // the syncer's interval (µs)
	horizon     int64 // how long a lease should last (µs)
	safety      int64 // a share is dropped this long before its expiry (µs)
	minGap      int64 // MinGap (µs, at least 1): spaces a key's early syncs; the retry-after of a rejection for want of a lease
	paceGap     int64 // PaceGap (µs, at least 1)
	idleRelease int64 // IdleRelease (µs)
	epsilon     float64
	virtual     bool // Params.Virtual
	waitFirst   bool // admit nothing without a lease (SetWaitFirst)
	global      bool // leased from the region's part of the limit (SetGlobal)

	cluster *Cluster // counts the live nodes
	ref     any      // the caller's (the syncer's Redis form of the rule); opaque here

	tap      Tap   // receives each key's figures at every round (SetOutage)
	handBack bool  // no new grant in a window an outage touched (SetOutage)
	share    Share // the policy's part of a bucket rule for a key (SetShare)

	next    atomic.Pointer[Rule] // the rule that replaced this one (a limit changed)
	removed atomic.Bool          // the limiter dropped the rule (Remove)
}

// ErrNotLeasable is returned by NewRule for a sliding window log: it keeps
// every request, and no exact lease of it exists.
var ErrNotLeasable = errors.New("the sliding window log has no exact lease")

// ErrAnchored is returned by NewRule for an anchored limit: each key's
// windows start at its own first request, and leases name windows on the
// clock.
var ErrAnchored = errors.New("anchored windows are not leased")

// NewRule returns lim as leased under p, with the live nodes and Redis's
// clock as c learns them, and ref, which Ref returns and the package does
// not look at. A sliding window log cannot be leased: its error wraps
// ErrNotLeasable.
func NewRule(lim localx.Limit, p Params, c *Cluster, ref any) (*Rule, error) {
	if lim.Algorithm() == local.SlidingWindowLog {
		return nil, ErrNotLeasable
	}
	if lim.Anchored() {
		return nil, ErrAnchored
	}
	lp := lim.Params()
	r := &Rule{
		lim: lim, maxCost: lim.MaxCost(), w: lp.Window.Microseconds(), limit: lp.Quota, burst: lp.Burst,
		interval: p.Interval.Microseconds(), horizon: p.Horizon.Microseconds(),
		safety: p.Safety.Microseconds(), minGap: max(p.MinGap.Microseconds(), 1),
		paceGap: max(p.PaceGap.Microseconds(), 1), idleRelease: p.IdleRelease.Microseconds(),
		epsilon: p.Epsilon, virtual: p.Virtual, cluster: c, ref: ref,
	}
	switch lim.Algorithm() {
	case local.FixedWindow:
	case local.SlidingWindowCounter:
		r.counter = true
		r.step, r.ws = lim.Counter()
	case local.SubWindowCounter:
		// A lease names a sub-window: the window machinery runs on
		// sub-windows, each with the budget the last ws − 1 leave it.
		r.sub = true
		r.step, r.ws = lim.Counter()
		r.w = r.step
	default:
		r.buckets = true
	}
	return r, nil
}

// Ref returns the value NewRule was given for it.
func (r *Rule) Ref() any { return r.ref }

// Replace records that next replaces r (the limit changed at runtime): keys
// the syncer looks after under r are exchanged under next from then on.
func (r *Rule) Replace(next *Rule) { r.next.Store(next) }

// Remove records that the limiter dropped r's rule: the syncer's next
// exchange of each of its keys gives back what the key holds and reports
// what it used, as on a node's leaving, and a key that then holds nothing
// and owes nothing is forgotten (Lease.Due, Lease.Request). Requests the
// limiter still decides under r meanwhile are reported the same way. Call
// it on the rule in force (Latest), and replace it no more.
func (r *Rule) Remove() { r.removed.Store(true) }

// Removed reports whether Remove was called on r.
func (r *Rule) Removed() bool { return r.removed.Load() }

// Latest follows the replacements of r to the rule in force.
func (r *Rule) Latest() *Rule {
	for {
		n := r.next.Load()
		if n == nil {
			return r
		}
		r = n
	}
}

// allowance is the cold-start allowance per node: what it may admit
// unreported for a key it holds no lease for, max(1, ⌈ε × MaxCost ÷
// nodes⌉), with nodes the live nodes the registry counted; 1 while they
// are unknown, so that a key's first request never waits on Redis. It is 0
// when ε is (SyncConfig.NoColdStart) and for a rule that waits for its
// first lease (SetWaitFirst).
func (r *Rule) allowance() int64 {
	if r.epsilon == 0 || r.waitFirst {
		return 0
	}
	n := r.cluster.Nodes()
	if n < 1 {
		return 1
	}
	return max(int64(math.Ceil(r.epsilon*float64(r.MaxCost())/float64(n))), 1)
}

// SetWaitFirst makes r admit nothing without a lease: no cold-start
// allowance, and a refusal for want of a lease (local.ReasonNoLease), which
// the caller may wait out (Cluster.RoundDone). Call it before r is used.
func (r *Rule) SetWaitFirst() { r.waitFirst = true }

// WaitsFirst reports whether r waits for its leases (SetWaitFirst).
func (r *Rule) WaitsFirst() bool { return r.waitFirst }

// SetGlobal makes r's leases come from its region's part of the limit,
// which the region's exchanger leases from the global store, rather than
// from the whole limit. Call it before r is used.
func (r *Rule) SetGlobal() { r.global = true }

// Global reports whether r is of global reach (SetGlobal).
func (r *Rule) Global() bool { return r.global }

// MinGap is the least gap between two early exchanges of a key (µs): about
// when a lease asked for now arrives.
func (r *Rule) MinGap() int64 { return r.minGap }

// MaxCost is the largest cost a request can have: the limit, or the burst.
func (r *Rule) MaxCost() int64 { return r.maxCost }

// Nodes returns the number of live nodes (Cluster.Nodes).
func (r *Rule) Nodes() int64 { return r.cluster.Nodes() }

// Cluster returns the Cluster r's leases read.
func (r *Rule) Cluster() *Cluster { return r.cluster }
