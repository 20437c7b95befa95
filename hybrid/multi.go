package hybrid

import (
	"context"
	"errors"
	"fmt"
	"time"
	"unsafe"

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
func (l *Limiter) AllowMulti(ctx context.Context, reqs []Request, out []Decision) (bool, error) {
	if len(out) < len(reqs) {
		panic("hybrid: AllowMulti: out is shorter than reqs")
	}
	if len(reqs) == 0 {
		return true, nil
	}
	var b multiBatch
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
	case len(b.hybrid) == len(reqs):
		ok := l.hybridMulti(now, reqs, b.hybrid, out, true)
		if !ok {
			for i := range reqs {
				out[i] = out[i].Refused()
			}
		}
		return ok, nil
	}
	// Central rules, alone or with hybrid ones.
	cr, ci, nHybrid := b.central, b.centralAt, len(b.hybrid)
	cout := make([]local.Decision, len(cr))
	if nHybrid > 0 && !l.hybridMulti(now, reqs, b.hybrid, out, false) {
		// The hybrid rules refuse: report the central ones as they stand.
		for j := range cr {
			cr[j].N = 0
		}
		l.centralMulti(ctx, now, cr, cout, false)
		for j, c := range ci {
			out[c.i] = cout[j]
			out[c.i] = out[c.i].Refused()
		}
		return false, nil
	}
	charge, ok, err := l.centralMulti(ctx, now, cr, cout, nHybrid > 0)
	for j, c := range ci {
		out[c.i] = cout[j]
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
		for _, c := range ci {
			d, _ := c.m.failed(now, reqs[c.i].Key, reqs[c.i].N, err)
			out[c.i] = d
			ok = ok && d.Allowed()
		}
	}
	if ok && nHybrid > 0 && !l.hybridMulti(now, reqs, b.hybrid, out, true) {
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

// multiBatch is a multi-rule decision's requests grouped by mode; each
// mode's join adds its rules' requests to its group.
type multiBatch struct {
	local     []local.Request
	central   []syncer.Request
	centralAt []centralRequest // central[j]'s rule and index in the requests
	hybrid    []hybridRequest
}

type centralRequest struct {
	m *centralRule
	i int
}

type hybridRequest struct {
	m *hybridRule
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
func (l *Limiter) hybridMulti(now int64, reqs []Request, hr []hybridRequest, out []local.Decision, commit bool) bool {
	type item struct {
		e *local.Entry[lease.Lease]
		m *hybridRule
		i int
	}
	var buf [8]item
	items := buf[:0]
retry:
	items = items[:0]
	ok := true
	for _, h := range hr {
		m, i, q := h.m, h.i, reqs[h.i]
		lr := m.lease.Load()
		if q.N < 0 || q.N > lr.MaxCost() {
			v := lease.Verdict{Reason: local.ReasonCostTooHigh}
			if q.N < 0 {
				v.Reason = local.ReasonInvalidCost
			}
			out[i] = dress(v, lr.MaxCost())
			ok = false
			continue
		}
		e := m.store.Get(q.Key, now)
		if e == nil {
			out[i] = local.Outcome{Reason: local.ReasonOverflow, Limit: lr.MaxCost()}.Decision()
			ok = false
			continue
		}
		items = append(items, item{e, m, i})
	}
	// Lock order: entry address. Insertion sort: the lists are short.
	for a := 1; a < len(items); a++ {
		for b := a; b > 0 && addr(items[b].e) < addr(items[b-1].e); b-- {
			items[b], items[b-1] = items[b-1], items[b]
		}
	}
	for a, it := range items {
		if a == 0 || it.e != items[a-1].e {
			it.e.Lock()
		}
	}
	unlock := func() {
		for a, it := range items {
			if a == 0 || it.e != items[a-1].e {
				it.e.Unlock()
			}
		}
	}
	for _, it := range items {
		if it.e.Evicted() {
			unlock()
			goto retry
		}
	}
	// group returns the end of the run of items on items[a]'s entry, and
	// the sum of their costs: requests on one entry are decided together.
	group := func(a int) (b int, total int64) {
		for b = a; b < len(items) && items[b].e == items[a].e; b++ {
			total += reqs[items[b].i].N
		}
		return b, total
	}
	// Check each entry once, for the sum of its requests' costs.
	for a := 0; a < len(items); {
		b, total := group(a)
		k, lr := &items[a].e.Value, items[a].m.lease.Load()
		l.setDigest(k, reqs[items[a].i].Key)
		v := k.Check(lr, now, min(total, lr.MaxCost()+1))
		if total > lr.MaxCost() {
			v = lease.Verdict{Reason: local.ReasonCostTooHigh}
		}
		for _, it := range items[a:b] {
			out[it.i] = dress(v, lr.MaxCost())
		}
		ok = ok && v.Reason == local.ReasonOK
		a = b
	}
	if ok && commit {
		for a := 0; a < len(items); {
			b, total := group(a)
			lr := items[a].m.lease.Load()
			v, signal := items[a].e.Value.Decide(lr, now, total)
			if signal {
				lr.Notify(items[a].e)
			}
			for _, it := range items[a:b] {
				out[it.i] = dress(v, lr.MaxCost())
				it.m.counts.count(v.Reason)
			}
			a = b
		}
	}
	unlock()
	return ok
}

// addr orders entries for locking; Go's heap objects do not move.
func addr(e *local.Entry[lease.Lease]) uintptr { return uintptr(unsafe.Pointer(e)) }
