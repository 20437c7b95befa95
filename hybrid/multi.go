package hybrid

import (
	"context"
	"fmt"
	"time"

	"github.com/hybridlimit/hybridlimit/internal/localx"
	"github.com/hybridlimit/hybridlimit/internal/syncx"
	"github.com/hybridlimit/hybridlimit/local"
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
// combine, and each decides as it would alone: a hybrid rule's request
// waits for its key's exchange as Rule.Wait says, and a rule Redis cannot
// decide is decided by its failure policy.
//
// Among local rules, and among hybrid ones, the decision is exact: the
// keys' entries are locked in one global order, checked, and charged
// together. Among central rules it is one script, exact, when their keys
// share a Redis slot (one server, or a Cluster with Keyspace.SharedKeyTag
// and one user key); otherwise each rule is reserved by a script of its
// own, and the reservations are refunded if any refused. Local and hybrid
// rules together: the hybrid rules first wait for the leases they need,
// then the local keys stay locked while the hybrid ones are decided, and
// all are charged, or none. With central rules, the local and
// hybrid rules are checked, then the central ones decided in Redis, then
// the local and hybrid ones charged; if they refuse by then (another
// request took what was left), the central charge is refunded. A
// concurrent request may be refused on account of a charge about to be
// refunded; none is admitted past a limit.
//
// When Redis cannot decide, or the circuit breaker is open, each central
// rule's failure policy decides its request, and so does a hybrid rule's
// for a key without a lease (Degraded, as AllowN says), and the error is
// nil; errors mean misuse, as for AllowN.
//
// Without central rules, AllowMulti allocates nothing for up to eight
// requests that do not wait.
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
	var cabuf [multiInline]centralRequest
	b, central, err := l.batch(reqs, multiBatch{local: lbuf[:0], localAt: labuf[:0], lout: lobuf[:], hybrid: hbuf[:], centralAt: cabuf[:0]})
	if err != nil {
		return false, err
	}
	out = out[:len(reqs)]
	now := l.nowMicro()
	var ok bool
	switch {
	case len(b.local) == len(reqs):
		ok = local.AllowMultiAt(time.UnixMicro(now), b.local, out)
	case len(central) == 0 && len(b.local) == 0:
		ok = l.hybridMulti(ctx, now, reqs, b.hybrid, out, multiCommit|multiWait)
	case len(central) == 0:
		// Hybrid rules with local ones: the hybrid leases first, waiting
		// for them as the rules say, then all of it as one.
		if ok = l.hybridMulti(ctx, now, reqs, b.hybrid, out, multiWait); ok {
			now = l.nowMicro()
			ok = l.commitMulti(now, reqs, &b, out)
		} else {
			local.CheckMultiAt(time.UnixMicro(now), b.local, b.localOut())
			b.scatterLocal(out)
		}
	default:
		ok, err = l.centralAndOthers(ctx, now, reqs, &b, central, out)
	}
	if !ok {
		refuseAll(out)
	}
	l.countMulti(reqs, out, ok)
	if err != nil {
		return ok, fmt.Errorf("hybrid: AllowMulti: %w", err)
	}
	return ok, nil
}

// centralAndOthers decides reqs, among which central rules (cr, as batch
// returned them) and others (local, hybrid), as AllowMulti says, and writes
// their Decisions into out; its error is a central decision's (wrapping
// ErrRedis: the failure policy decided).
func (l *Limiter) centralAndOthers(ctx context.Context, now int64, reqs []Request, b *multiBatch, cr []syncx.Request, out []Decision) (bool, error) {
	ci := b.centralAt
	others := len(cr) < len(reqs)
	cout := make([]local.Decision, len(cr))
	if others && !l.checkMulti(ctx, now, reqs, b, out) {
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
		return false, nil
	}
	if others {
		now = l.nowMicro() // the hybrid rules may have waited
	}
	var charge syncx.Charge
	var ok, degraded bool
	var err error
	if degraded = l.breakerOpen(); !degraded {
		// Redis is not known down: ask it.
		charge, ok, err = l.centralMulti(ctx, now, cr, cout, others)
		for j, c := range ci {
			out[c.i] = cout[j]
		}
		if err != nil {
			degraded, err = true, l.centralFailed(ctx, now, "", err)
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
	if ok && others && !l.commitMulti(now, reqs, b, out) {
		// Taken in between: give the central charge back. A refund that
		// fails leaves a charge that was not used: false rejections until
		// the window ends, never over-admission.
		if charge != nil {
			if rerr := charge.Refund(ctx); rerr != nil && err == nil {
				err = l.centralFailed(ctx, now, "", rerr)
			}
		}
		ok = false
	}
	return ok, err
}

// refuseAll marks every Decision in out refused, as a refused multi-rule
// decision reports them.
func refuseAll(out []Decision) {
	for i := range out {
		out[i] = localx.Refused(out[i])
	}
}

// countMulti counts the Decisions of a multi-rule decision, one per
// request under its rule: admitted, or why its rule refused, or, for a
// rule that had room, refused by another.
func (l *Limiter) countMulti(reqs []Request, out []Decision, ok bool) {
	for i, q := range reqs {
		c := q.Rule.state.counts
		d := out[i]
		if d.Degraded() {
			c.fallback.Add(1)
		}
		switch {
		case ok:
			c.count(local.ReasonOK)
		case d.Reason() == local.ReasonOK:
			c.countOther()
		default:
			c.count(d.Reason())
		}
	}
}

// checkMulti checks the local and hybrid requests among reqs, charging
// nothing, the hybrid ones after waiting for the leases they need, writes
// their Decisions into out, and reports whether all have room.
func (l *Limiter) checkMulti(ctx context.Context, now int64, reqs []Request, b *multiBatch, out []Decision) bool {
	ok := true
	if b.hybrid != nil {
		ok = l.hybridMulti(ctx, now, reqs, b.hybrid, out, multiWait)
		now = l.nowMicro()
	}
	if len(b.local) > 0 {
		ok = local.CheckMultiAt(time.UnixMicro(now), b.local, b.localOut()) && ok
		b.scatterLocal(out)
	}
	return ok
}

// commitMulti decides and charges the local and hybrid requests among reqs
// as one, writes their Decisions into out, and reports whether all were
// admitted. It does not wait for leases: the caller did (checkMulti). The
// local keys stay locked while the hybrid ones are decided, so that no
// concurrent request takes their room in between; the lock orders agree
// (local entries, then hybrid ones), so calls cannot deadlock.
func (l *Limiter) commitMulti(now int64, reqs []Request, b *multiBatch, out []Decision) bool {
	if len(b.local) == 0 {
		return l.hybridMulti(context.Background(), now, reqs, b.hybrid, out, multiCommit)
	}
	if b.hybrid == nil {
		ok := local.AllowMultiAt(time.UnixMicro(now), b.local, b.localOut())
		b.scatterLocal(out)
		return ok
	}
	hybridDecided := false
	ok := local.AllowMultiIfAt(time.UnixMicro(now), b.local, b.localOut(), func() bool {
		hybridDecided = true
		return l.hybridMulti(context.Background(), now, reqs, b.hybrid, out, multiCommit)
	})
	b.scatterLocal(out)
	if !hybridDecided {
		// A local rule refused first: report the hybrid ones as they stand.
		l.hybridMulti(context.Background(), now, reqs, b.hybrid, out, 0)
	}
	return ok
}

// multiInline is how many requests AllowMulti groups without allocating.
const multiInline = 8

// multiBatch is a multi-rule decision's requests grouped by mode, but for
// the central requests, which batch returns apart: they go to Redis through
// a function value (internal/syncx), which escape analysis cannot see into,
// and a slice held beside the arrays on the caller's stack would move them
// to the heap.
type multiBatch struct {
	local     []local.Request
	localAt   []int            // local[j]'s index in the requests
	lout      []local.Decision // local[j]'s Decision, in a mixed decision
	centralAt []centralRequest // the central requests' rules and indexes in the requests
	// hybrid[i] is request i's rule when it is a hybrid one: hybridMulti
	// takes the requests by index. nil without hybrid requests.
	hybrid []*hybridRule
}

// batch groups reqs by mode into b, whose slices are the caller's room
// (hybrid as long as it is, and nil; it gets one of its own when too
// short), and returns the central requests apart (see multiBatch). It takes
// and returns b by value, and switches on the modes' types rather than
// calling a method of modeRule, so that a batch on the caller's stack stays
// there.
func (l *Limiter) batch(reqs []Request, b multiBatch) (multiBatch, []syncx.Request, error) {
	room := b.hybrid
	b.hybrid = nil
	var central []syncx.Request
	for i, q := range reqs {
		rs, err := l.state(q.Rule)
		if err != nil {
			return b, nil, err
		}
		switch m := rs.mode.(type) {
		case *localRule:
			b.local = append(b.local, local.Request{Limiter: m.lim, Key: q.Key, N: q.N})
			b.localAt = append(b.localAt, i)
		case *centralRule:
			central = append(central, syncx.Request{Rule: m.redis.Load(), Key: q.Key, N: q.N})
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
	return b, central, nil
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

// centralMulti decides the central requests cr as one in Redis, at Redis's
// time (the Limiter's with virtualTime), and, if refundable, returns what
// it charged when it admitted.
func (l *Limiter) centralMulti(ctx context.Context, now int64, cr []syncx.Request, out []local.Decision, refundable bool) (syncx.Charge, bool, error) {
	var at time.Time // the zero Time: Redis's clock
	if l.cfg.virtualTime {
		at = time.UnixMicro(now)
	}
	if refundable {
		return syncx.AllowMultiCharge(ctx, l.central, at, cr, out)
	}
	ok, err := syncx.AllowMulti(ctx, l.central, at, cr, out)
	return nil, ok, err
}
