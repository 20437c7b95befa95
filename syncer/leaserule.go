package syncer

import (
	"fmt"
	"math"
	"sync/atomic"
	"time"

	"github.com/hybridlimit/hybridlimit/local"
)

// LeaseRule is a Rule as the hybrid mode runs it: its limit split into
// leases. Build one with Syncer.LeaseRule. It is safe for concurrent use.
type LeaseRule struct {
	rule    *Rule
	buckets bool // rate shares (token/leaky bucket, GCRA); windows otherwise
	counter bool // the sliding window counter

	w, limit, burst int64 // window (µs), limit per window, burst (buckets)
	step, ws        int64 // the counter's steps

	interval int64 // the syncer's interval (µs)
	horizon  int64 // how long a lease should last (µs)
	safety   int64 // a share is dropped this long before its expiry (µs)
	minGap   int64 // MinGap (µs, at least 1), also the retry-after of a rejection for want of a lease
	paceGap  int64 // PaceGap (µs, at least 1)
	epsilon  float64

	sync *Syncer // counts the live nodes

	next atomic.Pointer[LeaseRule] // the rule that replaced this one (a limit changed)
}

// Replace records that next replaces r (the limit changed at runtime): keys
// the syncer looks after under r are exchanged under next from then on.
func (r *LeaseRule) Replace(next *LeaseRule) { r.next.Store(next) }

// latest follows the replacements of r to the rule in force.
func (r *LeaseRule) latest() *LeaseRule {
	for {
		n := r.next.Load()
		if n == nil {
			return r
		}
		r = n
	}
}

// ErrNotLeasable is returned for a rule whose limit cannot be split into
// leases: the sliding window log (no exact lease exists: it keeps every
// request), and buckets whose window × (burst + limit) passes 2^51 (the pool's
// arithmetic in Redis would not be exact). Run such rules in central mode.
var ErrNotLeasable = fmt.Errorf("%w: the limit cannot be split into leases", ErrInvalidRule)

func newLeaseRule(r *Rule, cfg *SyncConfig, s *Syncer) (*LeaseRule, error) {
	lim := r.limit
	p := lim.Params()
	lr := &LeaseRule{
		rule: r, w: p.Window.Microseconds(), limit: p.Limit, burst: p.Burst,
		interval: cfg.Interval.Microseconds(), horizon: cfg.Horizon.Microseconds(),
		safety: cfg.Safety.Microseconds(), minGap: max(cfg.MinGap.Microseconds(), 1),
		paceGap: max(cfg.PaceGap.Microseconds(), 1),
		epsilon: cfg.Epsilon, sync: s,
	}
	switch a := lim.Algorithm(); a {
	case local.SlidingWindowLog:
		return nil, fmt.Errorf("%w: rule %q: the sliding window log has no exact lease; use central mode", ErrNotLeasable, r.name)
	case local.FixedWindow:
	case local.SlidingWindowCounter:
		lr.counter = true
		lr.step, lr.ws = lim.Counter()
	default:
		lr.buckets = true
		if lr.w > local.MaxProduct/(p.Burst+p.Limit) {
			return nil, fmt.Errorf("%w: rule %q: window × (burst + limit) passes 2^51; use central mode", ErrNotLeasable, r.name)
		}
	}
	return lr, nil
}

// Rule returns the rule.
func (r *LeaseRule) Rule() *Rule { return r.rule }

// allowance is the cold-start allowance per node, ⌈ε × MaxCost ÷ nodes⌉,
// with nodes the live nodes the registry counted: 0 while they are unknown.
func (r *LeaseRule) allowance() int64 {
	n := r.sync.Nodes()
	if n < 1 || r.epsilon == 0 {
		return 0
	}
	return int64(math.Ceil(r.epsilon * float64(r.MaxCost()) / float64(n)))
}

// MaxCost is the largest cost a request can have: the limit, or the burst.
func (r *LeaseRule) MaxCost() int64 { return r.rule.limit.MaxCost() }

// Nodes returns the number of live nodes (Syncer.Nodes).
func (r *LeaseRule) Nodes() int64 { return r.sync.Nodes() }

// Split reports whether limit and interval leave enough per node to lease:
// the design goes central when per-node demand per sync period, limit ×
// interval ÷ (window × nodes), is below about 10 (see docs/accuracy.md).
func Split(lim local.Limit, interval time.Duration, nodes int) bool {
	if nodes < 1 {
		nodes = 1
	}
	perNode := float64(lim.Limit()) * interval.Seconds() / (lim.Window().Seconds() * float64(nodes))
	return perNode >= 10
}
