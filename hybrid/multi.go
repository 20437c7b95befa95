package hybrid

import (
	"context"
	"fmt"
	"time"

	"github.com/hybridlimit/hybridlimit/internal/keyed"
	"github.com/hybridlimit/hybridlimit/internal/lease"
	"github.com/hybridlimit/hybridlimit/local"
	"github.com/hybridlimit/hybridlimit/syncer"
)

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
// everywhere and ReasonOK marks a rule that had room). Rules of every mode
// combine.
//
// Among local rules, and among hybrid ones, the decision is exact: the
// keys' entries are locked in one global order, checked, and charged
// together. Among central rules it is syncer.Central.AllowMulti's. Local
// and hybrid rules together: the local keys stay locked while the hybrid
// ones are decided, and all are charged, or none. With central rules, the
// local and hybrid rules are checked, then the central ones decided in
// Redis, then the local and hybrid ones charged; if they refuse by then
// (another request took what was left), the central charge is refunded. A
// concurrent request may be refused on account of a charge about to be
// refunded; none is admitted past a limit.
//
// When Redis cannot decide, or the circuit breaker is open, each central
// rule's failure policy decides its request (Degraded, as AllowN says), and
// the error is nil; errors mean misuse, as for AllowN.
//
// Without central rules, AllowMulti allocates nothing for up to eight
// requests.
func (l *Limiter) AllowMulti(ctx context.Context, reqs []Request, out []Decision) (bool, error) {
	if len(out) < len(reqs) {
		panic("hybrid: AllowMulti: out is shorter than reqs")
	}
	if len(reqs) == 0 {
		return true, nil
	}
	// The batch's slices start in arrays on the stack: no allocation for up
	// to multiInline requests without central rules.
	var lbuf [multiInline]local.Request
	var labuf [multiInline]int
	var lobuf [multiInline]local.Decision
	var hbuf [multiInline]*hybridRule
	b, err := l.batch(reqs, multiBatch{local: lbuf[:0], localAt: labuf[:0], lout: lobuf[:], hybrid: hbuf[:]})
	if err != nil {
		return false, err
	}
	now := l.nowMicro()
	switch {
	case len(b.local) == len(reqs):
		return local.AllowMultiAt(time.UnixMicro(now), b.local, out), nil
	case len(b.central) == 0:
		// Hybrid rules, alone or with local ones.
		ok := l.commitMulti(now, reqs, &b, out)
		if !ok {
			refuseAll(out[:len(reqs)])
		}
		return ok, nil
	}
	// Central rules, alone or with local and hybrid ones.
	cr, ci := b.central, b.centralAt
	others := len(cr) < len(reqs)
	cout := make([]local.Decision, len(cr))
	if others && !l.checkMulti(now, reqs, &b, out) {
		// A local or hybrid rule refuses: report the central ones as they
		// stand.
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
		}
		refuseAll(out[:len(reqs)])
		return false, nil
	}
	var charge *syncer.Charge
	var ok, degraded bool
	if degraded = l.breakerOpen(); !degraded {
		// Redis is not known down: ask it.
		charge, ok, err = l.centralMulti(ctx, now, cr, cout, others)
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
	if ok && others && !l.commitMulti(now, reqs, &b, out) {
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
		refuseAll(out[:len(reqs)])
	}
	if err != nil {
		return ok, fmt.Errorf("hybrid: AllowMulti: %w", err)
	}
	return ok, nil
}

// refuseAll marks every Decision in out refused, as a refused multi-rule
// decision reports them.
func refuseAll(out []Decision) {
	for i := range out {
		out[i] = out[i].Refused()
	}
}

// checkMulti checks the local and hybrid requests among reqs, charging
// nothing, writes their Decisions into out, and reports whether all have
// room.
func (l *Limiter) checkMulti(now int64, reqs []Request, b *multiBatch, out []Decision) bool {
	ok := true
	if len(b.local) > 0 {
		ok = local.CheckMultiAt(time.UnixMicro(now), b.local, b.localOut())
		b.scatterLocal(out)
	}
	if b.hybrid != nil {
		ok = l.hybridMulti(now, reqs, b.hybrid, out, false) && ok
	}
	return ok
}

// commitMulti decides and charges the local and hybrid requests among reqs
// as one, writes their Decisions into out, and reports whether all were
// admitted. The local keys stay locked while the hybrid ones are decided,
// so that no concurrent request takes their room in between; the lock
// orders agree (local entries, then hybrid ones), so calls cannot deadlock.
func (l *Limiter) commitMulti(now int64, reqs []Request, b *multiBatch, out []Decision) bool {
	if len(b.local) == 0 {
		return l.hybridMulti(now, reqs, b.hybrid, out, true)
	}
	if b.hybrid == nil {
		ok := local.AllowMultiAt(time.UnixMicro(now), b.local, b.localOut())
		b.scatterLocal(out)
		return ok
	}
	hybridDecided := false
	ok := local.AllowMultiIfAt(time.UnixMicro(now), b.local, b.localOut(), func() bool {
		hybridDecided = true
		return l.hybridMulti(now, reqs, b.hybrid, out, true)
	})
	b.scatterLocal(out)
	if !hybridDecided {
		// A local rule refused first: report the hybrid ones as they stand.
		l.hybridMulti(now, reqs, b.hybrid, out, false)
	}
	return ok
}

// multiInline is how many requests AllowMulti groups without allocating.
const multiInline = 8

// multiBatch is a multi-rule decision's requests grouped by mode.
type multiBatch struct {
	local     []local.Request
	localAt   []int            // local[j]'s index in the requests
	lout      []local.Decision // local[j]'s Decision, in a mixed decision
	central   []syncer.Request
	centralAt []centralRequest // central[j]'s rule and index in the requests
	// hybrid[i] is request i's rule when it is a hybrid one: hybridMulti
	// takes the requests by index. nil without hybrid requests.
	hybrid []*hybridRule
}

// batch groups reqs by mode into b, whose slices are the caller's room
// (hybrid as long as it is, and nil; it gets one of its own when too
// short). It takes and returns b by value, and switches on the modes'
// types rather than calling a method of modeRule, so that a batch on the
// caller's stack stays there.
func (l *Limiter) batch(reqs []Request, b multiBatch) (multiBatch, error) {
	room := b.hybrid
	b.hybrid = nil
	for i, q := range reqs {
		rs, err := l.state(q.Rule)
		if err != nil {
			return b, err
		}
		switch m := rs.mode.(type) {
		case *localRule:
			b.local = append(b.local, local.Request{Limiter: m.lim, Key: q.Key, N: q.N})
			b.localAt = append(b.localAt, i)
		case *centralRule:
			b.central = append(b.central, syncer.Request{Rule: m.redis.Load(), Key: q.Key, N: q.N})
			b.centralAt = append(b.centralAt, centralRequest{m: m, i: i})
		case *hybridRule:
			if b.hybrid == nil {
				if b.hybrid = room; len(room) < len(reqs) {
					b.hybrid = make([]*hybridRule, len(reqs))
				}
				b.hybrid = b.hybrid[:len(reqs)]
			}
			b.hybrid[i] = m
		default:
			panic("hybrid: AllowMulti: unknown mode")
		}
	}
	return b, nil
}

// localOut returns the local requests' Decisions, len(local) long.
func (b *multiBatch) localOut() []local.Decision {
	if len(b.lout) < len(b.local) {
		b.lout = make([]local.Decision, len(b.local))
	}
	return b.lout[:len(b.local)]
}

// scatterLocal copies the local requests' Decisions to their places in out.
func (b *multiBatch) scatterLocal(out []Decision) {
	for j, i := range b.localAt {
		out[i] = b.lout[j]
	}
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
	var ebuf [multiInline]*keyed.Entry[lease.Lease]
	var obuf [multiInline]int
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
			v = refusal(lr, v)
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
				v = refusal(lr, v)
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
