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
	Rule *Rule
	Key  string
	N    int64
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
func (l *Limiter) AllowMulti(ctx context.Context, reqs []Request, out []local.Decision) (bool, error) {
	if len(out) < len(reqs) {
		panic("hybrid: AllowMulti: out is shorter than reqs")
	}
	if len(reqs) == 0 {
		return true, nil
	}
	var nLocal, nCentral, nHybrid int
	states := make([]*ruleState, len(reqs))
	for i, q := range reqs {
		rs, err := l.state(q.Rule)
		if err != nil {
			return false, err
		}
		states[i] = rs
		switch rs.mode {
		case Local:
			nLocal++
		case Central:
			nCentral++
		default:
			nHybrid++
		}
	}
	now := l.nowMicro()
	switch {
	case nLocal == len(reqs):
		lr := make([]local.Request, len(reqs))
		for i, q := range reqs {
			lr[i] = local.Request{Limiter: states[i].local, Key: q.Key, N: q.N}
		}
		return local.AllowMultiAt(time.UnixMicro(now), lr, out), nil
	case nLocal > 0:
		return false, ErrMixedModes
	case nHybrid == len(reqs):
		ok := l.hybridMulti(now, reqs, states, out, true)
		if !ok {
			for i := range reqs {
				out[i] = out[i].Refused()
			}
		}
		return ok, nil
	}
	// Central rules, alone or with hybrid ones.
	var cr []syncer.Request
	var ci []int // their indexes in reqs
	for i, q := range reqs {
		if states[i].mode == Central {
			cr = append(cr, syncer.Request{Rule: states[i].redis.Load(), Key: q.Key, N: q.N})
			ci = append(ci, i)
		}
	}
	cout := make([]local.Decision, len(cr))
	if nHybrid > 0 && !l.hybridMulti(now, reqs, states, out, false) {
		// The hybrid rules refuse: report the central ones as they stand.
		for j := range cr {
			cr[j].N = 0
		}
		l.centralMulti(ctx, now, cr, cout, false)
		for j, i := range ci {
			out[i] = cout[j]
			out[i] = out[i].Refused()
		}
		return false, nil
	}
	charge, ok, err := l.centralMulti(ctx, now, cr, cout, nHybrid > 0)
	for j, i := range ci {
		out[i] = cout[j]
	}
	switch {
	case err != nil && errors.Is(err, syncer.ErrUnavailable):
		l.markUnavailable(now, err)
	case err == nil && l.unavailable.Load() != 0:
		l.markAvailable()
	}
	if err != nil {
		// Redis could not decide: each central rule's failure policy
		// decides it, and the whole is admitted only if they all admit.
		ok = true
		for _, i := range ci {
			d, _ := states[i].failed(ctx, now, reqs[i].Key, reqs[i].N, err)
			out[i] = d
			ok = ok && d.Allowed()
		}
	}
	if ok && nHybrid > 0 && !l.hybridMulti(now, reqs, states, out, true) {
		// Taken in between: give the central charge back.
		if charge != nil {
			if rerr := charge.Refund(ctx); rerr != nil && err == nil {
				err = rerr
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
func (l *Limiter) hybridMulti(now int64, reqs []Request, states []*ruleState, out []local.Decision, commit bool) bool {
	var ebuf [8]*keyed.Entry[lease.Lease]
	var obuf [8]int
	ents, order := ebuf[:], obuf[:]
	if len(reqs) > len(ebuf) {
		ents, order = make([]*keyed.Entry[lease.Lease], len(reqs)), make([]int, len(reqs))
	}
	ents, order = ents[:len(reqs)], order[:len(reqs)]
	for {
		ok := l.lookupMulti(now, reqs, states, out, ents)
		lk, locked := keyed.LockAll(ents, order)
		if !locked {
			continue // an entry was evicted since its lookup
		}
		// Check each entry once, for the sum of its requests' costs.
		for k := lk.First(); k < lk.Len(); {
			e, group, next := lk.Group(k)
			lr, total := states[group[0]].lease.Load(), sumCost(reqs, group)
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
				lr := states[group[0]].lease.Load()
				v, signal := e.Value.Decide(lr, now, sumCost(reqs, group))
				if signal {
					lr.Notify(e)
				}
				for _, i := range group {
					out[i] = dress(v, lr.MaxCost())
					states[i].counts.count(v.Reason)
				}
				k = next
			}
		}
		lk.Unlock()
		return ok
	}
}

// lookupMulti puts in ents the entry of each hybrid request among reqs, nil
// for the others. A hybrid request refused without its entry (a bad cost, a
// key the table has no room for) gets its Decision in out, and makes
// lookupMulti report false.
func (l *Limiter) lookupMulti(now int64, reqs []Request, states []*ruleState, out []local.Decision, ents []*keyed.Entry[lease.Lease]) bool {
	ok := true
	for i, q := range reqs {
		ents[i] = nil
		rs := states[i]
		if rs.mode != Hybrid {
			continue
		}
		lr := rs.lease.Load()
		if v, bad := badCost(lr, q.N); bad {
			out[i] = dress(v, lr.MaxCost())
			ok = false
			continue
		}
		if ents[i] = rs.store.Get(q.Key, now); ents[i] == nil {
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

func dress(v lease.Verdict, limit int64) local.Decision {
	return local.NewDecision(v.Reason == local.ReasonOK, v.Reason, limit, v.Remaining, micros(v.Reset), micros(v.Retry))
}
