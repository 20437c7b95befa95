package hybrid

import (
	"sync/atomic"
	"time"

	"github.com/hybridlimit/hybridlimit/local"
)

// failover is a distributed rule's failure policy: it decides what Redis
// cannot, and, once the Limiter is shut down, what it no longer asks Redis.
// Central and hybrid rules each own one. Its decisions are Degraded.
type failover struct {
	rs     *ruleState
	policy Policy
	// part is this node's part of the limit, the limiter of FailLocal and
	// of every policy after Shutdown; under Fallback with gossip, a hybrid
	// bucket rule's limit scaled for its demand shares (byShare).
	part *local.Limiter
	// scale is the limit part runs on for byShare, nil before its first
	// use; even, the one it runs on for local, nil before its first use.
	scale *atomic.Pointer[shareScaled]
	even  *atomic.Pointer[evenSplit]
}

// evenSplit is the limit local's part runs on: base, the rule's limit,
// divided by nodes.
type evenSplit struct {
	base  *local.Limit
	nodes int64
	lim   local.Limit
}

func newFailover(rs *ruleState, lim local.Limit) (failover, error) {
	f := failover{rs: rs, policy: rs.policy, scale: new(atomic.Pointer[shareScaled]), even: new(atomic.Pointer[evenSplit])}
	var err error
	f.part, err = local.New(lim, rs.l.localConfig())
	return f, err
}

// decide decides by the policy, or on this node's part of the limit once
// the Limiter is shut down; nodes is how many nodes share the limit.
func (f *failover) decide(nodes int64, now int64, key string, n int64) local.Decision {
	policy := f.policy
	if f.rs.l.shut.Load() {
		policy = FailLocal
	}
	var d local.Decision
	switch policy {
	case FailOpen:
		d = f.open()
	case FailClosed:
		d = f.closed()
	default:
		d = f.local(nodes, now, key, n)
	}
	return f.counted(d)
}

// counted counts d, a decision of the policy's, and marks it Degraded.
func (f *failover) counted(d local.Decision) local.Decision {
	rs := f.rs
	rs.counts.fallback.Add(1)
	if d.Allowed() {
		rs.counts.count(local.ReasonOK) // FailOpen's ReasonUnavailable included
	} else {
		rs.counts.count(d.Reason())
	}
	return d.AsDegraded()
}

// open admits (FailOpen). The callers refuse bad costs first.
func (f *failover) open() local.Decision {
	max := f.rs.limit.Load().MaxCost()
	return local.Outcome{Allowed: true, Reason: local.ReasonUnavailable, Limit: max, Remaining: max}.Decision()
}

// closed refuses (FailClosed).
func (f *failover) closed() local.Decision {
	return local.Outcome{Reason: local.ReasonUnavailable, Limit: f.rs.limit.Load().MaxCost(), RetryAfter: time.Second}.Decision()
}

// local decides on this node's part of the limit, the limit divided by
// nodes (FailLocal); a rejection by that part is ReasonUnavailable.
func (f *failover) local(nodes int64, now int64, key string, n int64) local.Decision {
	nodes = f.gossipNodes(nodes) // Fallback: the gossip's members
	lim := f.rs.limit.Load()
	sp := f.even.Load()
	if sp == nil || sp.base != lim || sp.nodes != nodes {
		sp = evenPart(lim, nodes)
		f.even.Store(sp)
	}
	if f.part.Limit() != sp.lim {
		f.part.SetLimit(sp.lim)
	}
	d := f.part.AllowNAt(time.UnixMicro(now), key, n)
	if !d.Allowed() && d.Reason() == local.ReasonLimited {
		o := d.Outcome()
		o.Reason = local.ReasonUnavailable
		d = o.Decision()
	}
	return d
}

// evenPart returns lim divided by nodes: its limit and burst each at least
// one, lim itself for one node (or a part its bounds refuse).
func evenPart(lim *local.Limit, nodes int64) *evenSplit {
	sp := &evenSplit{base: lim, nodes: nodes, lim: *lim}
	if nodes > 1 {
		p := lim.Params()
		p.Limit = max(p.Limit/nodes, 1)
		if p.Burst > 0 {
			p.Burst = max(p.Burst/nodes, 1)
		}
		if nl, err := local.NewLimit(p); err == nil {
			sp.lim = nl
		}
	}
	return sp
}

func (f *failover) sweep(now time.Time) int { return f.part.SweepAt(now) }

func (f *failover) close() { f.part.Close() }
