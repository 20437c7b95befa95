package hybrid

import (
	"time"

	"github.com/hybridlimit/hybridlimit/local"
)

// failover is a distributed rule's failure policy: it decides what Redis
// cannot. Central and hybrid rules each own one.
type failover struct {
	rs     *ruleState
	policy Policy
	// fallback is FailLocal's limiter, holding this node's part of the
	// limit; nil under the other policies.
	fallback *local.Limiter
}

func newFailover(rs *ruleState, lim local.Limit) (failover, error) {
	f := failover{rs: rs, policy: rs.policy}
	if f.policy == FailLocal || f.policy == Fallback {
		fl, err := local.New(lim, rs.l.localConfig())
		if err != nil {
			return f, err
		}
		f.fallback = fl
	}
	return f, nil
}

// decide decides by the policy; nodes is how many nodes share the limit
// under FailLocal, and err says why Redis could not decide.
func (f *failover) decide(nodes int64, now int64, key string, n int64, err error) (local.Decision, error) {
	rs := f.rs
	lim := rs.limit.Load()
	rs.counts.fallback.Add(1)
	switch f.policy {
	case FailOpen:
		rs.counts.count(local.ReasonOK)
		return local.Outcome{Allowed: true, Reason: local.ReasonUnavailable, Limit: lim.MaxCost(), Remaining: lim.MaxCost()}.Decision(), err
	case FailClosed:
		rs.counts.count(local.ReasonUnavailable)
		return local.Outcome{Reason: local.ReasonUnavailable, Limit: lim.MaxCost(), RetryAfter: time.Second}.Decision(), err
	default: // FailLocal: this node's part of the limit (Fallback: of the gossip's members)
		nodes = f.gossipNodes(nodes)
		part := *lim
		if nodes > 1 {
			p := lim.Params()
			p.Limit = max(p.Limit/nodes, 1)
			if p.Burst > 0 {
				p.Burst = max(p.Burst/nodes, 1)
			}
			if nl, perr := local.NewLimit(p); perr == nil {
				part = nl
			}
		}
		if f.fallback.Limit() != part {
			f.fallback.SetLimit(part)
		}
		d := f.fallback.AllowNAt(time.UnixMicro(now), key, n)
		if !d.Allowed() && d.Reason() == local.ReasonLimited {
			o := d.Outcome()
			o.Reason = local.ReasonUnavailable
			d = o.Decision()
		}
		rs.counts.count(d.Reason())
		return d, err
	}
}

func (f *failover) sweep(now time.Time) int {
	if f.fallback == nil {
		return 0
	}
	return f.fallback.SweepAt(now)
}

func (f *failover) close() {
	if f.fallback != nil {
		f.fallback.Close()
	}
}
