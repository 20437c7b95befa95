package hybrid

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/hybridlimit/hybridlimit/internal/keyed"
	"github.com/hybridlimit/hybridlimit/internal/lease"
	"github.com/hybridlimit/hybridlimit/local"
	"github.com/hybridlimit/hybridlimit/syncer"
)

// ErrMixedModes is returned by AllowMulti for requests that mix rules in
// Local mode with rules in Central or Hybrid mode: a local rule cannot be
// charged and refunded together with a distributed one. Decide them apart.
var ErrMixedModes = errors.New("hybrid: AllowMulti: local rules cannot be combined with central or hybrid ones")

// Request is one rule of a multi-rule decision.
type Request struct {
	Rule *Rule  // a rule registered with the Limiter
	Key  string // the key it limits
	N    int64  // the request's cost
}

// AllowMulti decides several requests as one: all are admitted and charged,
// or none is charged. It writes one Decision per request into out (at least
// as long as reqs) and reports whether all were admitted; the Decisions
// follow local.AllowMultiAt's conventions (when refused, Allowed is false
// everywhere and ReasonOK marks a rule that had room).
//
// Among hybrid rules the decision is exact: the keys' entries are locked in
// one global order, checked, and charged together. Among central rules it is
// syncer.Central.AllowMulti's. Hybrid and central rules together: the hybrid
// rules are checked, then the central ones decided in Redis, then the hybrid
// ones charged; if they refuse by then (another request took what was left),
// the central charge is refunded. A concurrent request may be refused on
// account of a charge about to be refunded; none is admitted past a limit.
// Local rules combine only with local rules (ErrMixedModes).
//
// When Redis cannot decide, or the circuit breaker is open, each central
// rule's failure policy decides its request (Degraded, as AllowN says), and
// the error is nil; errors mean misuse, as for AllowN.
func (l *Limiter) AllowMulti(ctx context.Context, reqs []Request, out []Decision) (bool, error) {
	if len(out) < len(reqs) {
		panic("hybrid: AllowMulti: out is shorter than reqs")
	}
	if len(reqs) == 0 {
		return true, nil
	}
	b := multiBatch{n: len(reqs)}
	for i, q := range reqs {
		rs, err := l.state(q.Rule)
		if err != nil {
			return false, err
		}
		rs.mode.join(&b, i, q)
	}
	now := l.nowMicro()
	switch {
	case len(b.local) == len(reqs):
		return local.AllowMultiAt(time.UnixMicro(now), b.local, out), nil
	case len(b.local) > 0:
		return false, ErrMixedModes
	case b.nHybrid == len(reqs):
		ok := l.hybridMulti(now, reqs, b.hybrid, out, true)
		if !ok {
			for i := range reqs {
				out[i] = out[i].Refused()
			}
		}
		return ok, nil
	}
	// Central rules, alone or with hybrid ones.
	cr, ci, nHybrid := b.central, b.centralAt, b.nHybrid
	cout := make([]local.Decision, len(cr))
	if nHybrid > 0 && !l.hybridMulti(now, reqs, b.hybrid, out, false) {
		// The hybrid rules refuse: report the central ones as they stand.
		for j := range cr {
			cr[j].N = 0
		}
		if l.breakerOpen() {
			for j, c := range ci {
				cout[j] = c.m.failed(now, reqs[c.i].Key, 0)
			}
		} else {
			l.centralMulti(ctx, now, cr, cout, false)
		}
		for j, c := range ci {
			out[c.i] = cout[j]
			out[c.i] = out[c.i].Refused()
		}
		return false, nil
	}
	var charge *syncer.Charge
	var ok, degraded bool
	var err error
	if degraded = l.breakerOpen(); !degraded {
		// Redis is not known down: ask it.
		charge, ok, err = l.centralMulti(ctx, now, cr, cout, nHybrid > 0)
		for j, c := range ci {
			out[c.i] = cout[j]
		}
		if err != nil {
			degraded, err = true, l.centralFailed(ctx, now, err)
		}
	}
	if degraded {
		// Redis could not decide: each central rule's failure policy
		// decides it, and the whole is admitted only if they all admit.
		ok = true
		for _, c := range ci {
			d := c.m.failed(now, reqs[c.i].Key, reqs[c.i].N)
			out[c.i] = d
			ok = ok && d.Allowed()
		}
	}
	if ok && nHybrid > 0 && !l.hybridMulti(now, reqs, b.hybrid, out, true) {
		// Taken in between: give the central charge back. A refund that
		// fails leaves a charge that was not used: false rejections until
		// the window ends, never over-admission.
		if charge != nil {
			if rerr := charge.Refund(ctx); rerr != nil && err == nil {
				err = l.centralFailed(ctx, now, rerr)
			}
		}
		ok = false
	}
	if !ok {
		for i := range reqs {
			out[i] = out[i].Refused()
		}
	}
	if err != nil {
		return ok, fmt.Errorf("hybrid: AllowMulti: %w", err)
	}
	return ok, nil
}

// multiBatch is a multi-rule decision's requests grouped by mode; each
// mode's join adds its rules' requests to its group.
type multiBatch struct {
	local     []local.Request
	central   []syncer.Request
	centralAt []centralRequest // central[j]'s rule and index in the requests
	// hybrid[i] is request i's rule when it is a hybrid one: hybridMulti
	// takes the requests by index. nil without hybrid requests.
	hybrid  []*hybridRule
	nHybrid int
	n       int // the requests
}

type centralRequest struct {
	m *centralRule
	i int
}

func (l *Limiter) centralMulti(ctx context.Context, now int64, cr []syncer.Request, out []local.Decision, refundable bool) (*syncer.Charge, bool, error) {
	var at time.Time
	if l.cfg.VirtualTime {
		at = time.UnixMicro(now)
	}
	if refundable {
		return l.central.AllowMultiCharge(ctx, at, cr, out)
	}
	if !at.IsZero() {
		ok, err := l.central.AllowMultiAt(ctx, at, cr, out)
		return nil, ok, err
	}
	ok, err := l.central.AllowMulti(ctx, cr, out)
	return nil, ok, err
}

// hybridMulti decides the hybrid requests among reqs as one, writing their
// Decisions into out; it charges them only if commit is true and all admit.
// It locks the keys' entries in address order, so concurrent calls cannot
// deadlock, and decides requests on one entry together, with the sum of
// their costs.
func (l *Limiter) hybridMulti(now int64, reqs []Request, hrs []*hybridRule, out []local.Decision, commit bool) bool {
	var ebuf [8]*keyed.Entry[lease.Lease]
	var obuf [8]int
	ents, order := ebuf[:], obuf[:]
	if len(reqs) > len(ebuf) {
		ents, order = make([]*keyed.Entry[lease.Lease], len(reqs)), make([]int, len(reqs))
	}
	ents, order = ents[:len(reqs)], order[:len(reqs)]
	for {
		ok := l.lookupMulti(now, reqs, hrs, out, ents)
		lk, locked := keyed.LockAll(ents, order)
		if !locked {
			continue // an entry was evicted since its lookup
		}
		// Check each entry once, for the sum of its requests' costs.
		for k := lk.First(); k < lk.Len(); {
			e, group, next := lk.Group(k)
			lr, total := hrs[group[0]].lease.Load(), sumCost(reqs, group)
			l.setDigest(&e.Value, reqs[group[0]].Key)
			v := e.Value.Check(lr, now, min(total, lr.MaxCost()+1))
			if total > lr.MaxCost() {
				v = lease.Verdict{Reason: local.ReasonCostTooHigh}
			}
			for _, i := range group {
				out[i] = dress(v, lr.MaxCost())
			}
			ok = ok && v.Reason == local.ReasonOK
			k = next
		}
		if ok && commit {
			for k := lk.First(); k < lk.Len(); {
				e, group, next := lk.Group(k)
				lr := hrs[group[0]].lease.Load()
				v, signal := e.Value.Decide(lr, now, sumCost(reqs, group))
				if signal {
					lr.Notify(e)
				}
				for _, i := range group {
					out[i] = dress(v, lr.MaxCost())
					hrs[i].counts.count(v.Reason)
				}
				k = next
			}
		}
		lk.Unlock()
		return ok
	}
}

// lookupMulti puts in ents the entry of each hybrid request among reqs
// (hrs[i] not nil), nil for the others. A hybrid request refused without its entry (a bad cost, a
// key the table has no room for) gets its Decision in out, and makes
// lookupMulti report false.
func (l *Limiter) lookupMulti(now int64, reqs []Request, hrs []*hybridRule, out []local.Decision, ents []*keyed.Entry[lease.Lease]) bool {
	ok := true
	for i, q := range reqs {
		ents[i] = nil
		m := hrs[i]
		if m == nil {
			continue
		}
		lr := m.lease.Load()
		if v, bad := badCost(lr, q.N); bad {
			out[i] = dress(v, lr.MaxCost())
			ok = false
			continue
		}
		if ents[i] = m.store.Get(q.Key, now); ents[i] == nil {
			out[i] = local.Outcome{Reason: local.ReasonOverflow, Limit: lr.MaxCost()}.Decision()
			ok = false
		}
	}
	return ok
}

// sumCost is the sum of the costs of the requests in group.
func sumCost(reqs []Request, group []int) int64 {
	var n int64
	for _, i := range group {
		n += reqs[i].N
	}
	return n
}
