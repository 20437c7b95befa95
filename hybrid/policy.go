package hybrid

import (
	"sync/atomic"
	"time"

	"github.com/hybridlimit/hybridlimit/internal/localx"
	"github.com/hybridlimit/hybridlimit/local"
)

// failover is a distributed rule's failure policy: it decides what Redis
// cannot, and, once the Limiter is shut down, what it no longer asks Redis.
// Central and hybrid rules each own one. Its decisions are Degraded.
type failover struct {
	rs     *ruleState
	policy Policy
	*parts // set once, by newFailover: a failover is copied into its mode
}

// parts are what a failover's policy decides on, each made at its first
// use: most rules never fail over, and a local.Limiter costs a table of
// shards.
type parts struct {
	// part is this node's part of the limit, the limiter of FailLocal and
	// of every policy after Shutdown; under Gossip with Config.Gossip, a hybrid
	// bucket rule's limit scaled for its demand shares (byShare). nil
	// before its first use (partOn).
	part atomic.Pointer[local.Limiter]
	// scale is the limit part runs on for byShare, nil before its first
	// use; even, the one it runs on for local, nil before its first use.
	scale atomic.Pointer[shareScaled]
	even  atomic.Pointer[evenSplit]
}

// evenSplit is the limit local's part runs on: base, the rule's limit,
// divided by nodes.
type evenSplit struct {
	base  *localx.Limit
	nodes int64
	lim   localx.Limit
}

func newFailover(rs *ruleState) failover {
	return failover{rs: rs, policy: rs.policy, parts: new(parts)}
}

// partOn returns part running on lim, made at its first use.
func (f *failover) partOn(lim localx.Limit) *local.Limiter {
	p := f.part.Load()
	if p == nil {
		var err error
		if p, err = local.New(lim.Params(), f.rs.l.localConfig()); err != nil {
			// lim is a rule's limit, or a part of one, validated,
			// and New checked the Config's Shards and MaxKeys as local.New
			// does.
			panic("hybrid: failure policy: " + err.Error())
		}
		if !f.part.CompareAndSwap(nil, p) {
			p = f.part.Load() // another decision made it first
		}
	}
	if p.Limit() != lim.Params() {
		p.SetLimit(lim.Params())
	}
	return p
}

// decide decides by the policy, or on this node's part of the limit once
// the Limiter is shut down; nodes is how many nodes share the limit. charge
// false decides without charging (a multi-rule decision's check). The
// Decision is Degraded, and not counted: the caller counts it.
func (f *failover) decide(nodes int64, now int64, key string, n int64, charge bool) local.Decision {
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
		d = f.local(nodes, now, key, n, charge)
	}
	return localx.Degraded(d)
}

// open admits (FailOpen). The callers refuse bad costs first.
func (f *failover) open() local.Decision {
	max := f.rs.limit.Load().MaxCost()
	return localx.Outcome{Allowed: true, Reason: local.ReasonUnavailable, Capacity: max, Remaining: max}.Decision()
}

// closed refuses (FailClosed).
func (f *failover) closed() local.Decision {
	return localx.Outcome{Reason: local.ReasonUnavailable, Capacity: f.rs.limit.Load().MaxCost(), RetryAfter: time.Second}.Decision()
}

// local decides on this node's part of the limit, the limit divided by
// nodes (FailLocal): its refusals are the part's, ReasonLimited.
func (f *failover) local(nodes int64, now int64, key string, n int64, charge bool) local.Decision {
	return f.partAllow(f.partOn(f.evenOn(nodes).lim), now, key, n, charge)
}

// evenOn returns the even split of the rule's limit over nodes (Gossip's
// members, under Gossip with Config.Gossip) that local decides on.
func (f *failover) evenOn(nodes int64) *evenSplit {
	nodes = f.gossipNodes(nodes)
	lim := f.rs.limit.Load()
	sp := f.even.Load()
	if sp == nil || sp.base != lim || sp.nodes != nodes {
		sp = evenPart(lim, nodes)
		f.even.Store(sp)
	}
	return sp
}

// begin starts key's bucket on part, which runs on lim, at avail tokens
// (in lim's units) rather than full, by charging what lies between: at
// the policy's first decision on a key since its last reply
// (lease.Lease.PolicyStart).
func (f *failover) begin(part *local.Limiter, lim *localx.Limit, now int64, key string, avail float64) {
	if c := lim.MaxCost() - int64(min(max(avail, 0), float64(lim.MaxCost()))); c > 0 {
		part.AllowNAt(time.UnixMicro(now), key, c)
	}
}

// evenPart returns lim divided by nodes: its limit and burst each at least
// one, lim itself for one node (or a part its bounds refuse).
func evenPart(lim *localx.Limit, nodes int64) *evenSplit {
	sp := &evenSplit{base: lim, nodes: nodes, lim: *lim}
	if nodes > 1 {
		p := lim.Params()
		p.Quota = max(p.Quota/nodes, 1)
		if p.Burst > 0 {
			p.Burst = max(p.Burst/nodes, 1)
		}
		if nl, err := localx.NewLimit(p); err == nil {
			sp.lim = nl
		}
	}
	return sp
}

// partAllow decides a request of cost n for key at now on part, and
// charges it only if charge is set.
func (f *failover) partAllow(part *local.Limiter, now int64, key string, n int64, charge bool) local.Decision {
	at := time.UnixMicro(now)
	if charge {
		return part.AllowNAt(at, key, n)
	}
	var out [1]local.Decision
	if local.CheckMultiAt(at, []local.Request{{Limiter: part, Key: key, N: n}}, out[:]) {
		o := localx.OutcomeOf(out[0])
		o.Allowed, o.Remaining = true, max(o.Remaining-n, 0)
		return o.Decision()
	}
	return out[0]
}

func (f *failover) sweep(now time.Time) int {
	if p := f.part.Load(); p != nil {
		return p.SweepAt(now)
	}
	return 0
}

func (f *failover) close() {
	if p := f.part.Load(); p != nil {
		p.Close()
	}
}
