package hybrid

import (
	"context"
	"time"

	"github.com/hybridlimit/hybridlimit/internal/keyed"
	"github.com/hybridlimit/hybridlimit/internal/lease"
	"github.com/hybridlimit/hybridlimit/internal/localx"
	"github.com/hybridlimit/hybridlimit/local"
)

// multiMode is what hybridMulti does beyond checking the hybrid requests.
type multiMode uint8

const (
	// multiCommit charges the requests when all admit.
	multiCommit multiMode = 1 << iota
	// multiWait waits, as each rule's Wait says, for the exchanges that may
	// turn a refusal into an admission.
	multiWait
)

// hybridMulti decides the hybrid requests among reqs (hrs[i], nil for the
// others) as one at now, writing their Decisions into out, and reports
// whether all admit. It charges them only under multiCommit and if all
// admit. Under multiWait, while the only refusals are of keys an exchange
// with Redis may settle, it waits for those exchanges, as AllowN would for
// each rule alone (hybridRule.waitLease), then decides again. A key
// without a lease while Redis is out of reach is decided by its rule's
// failure policy. It locks the keys' entries in address order, so
// concurrent calls cannot deadlock, and decides requests on one entry
// together, with the sum of their costs. It does not count the decisions:
// AllowMulti does.
func (l *Limiter) hybridMulti(ctx context.Context, now int64, reqs []Request, hrs []*hybridRule, out []local.Decision, mode multiMode) bool {
	var ebuf [multiInline]*keyed.Entry[lease.Lease]
	var obuf [multiInline]int
	ents, order := ebuf[:], obuf[:]
	if len(reqs) > len(ebuf) {
		ents, order = make([]*keyed.Entry[lease.Lease], len(reqs)), make([]int, len(reqs))
	}
	ents, order = ents[:len(reqs)], order[:len(reqs)]
	var w *multiWaiter // set once the decision first waits
	noted := false
	for {
		found := l.lookupMulti(now, reqs, hrs, out, ents)
		lk, locked := keyed.LockAll(ents, order)
		if !locked {
			continue // an entry was evicted since its lookup
		}
		if w != nil {
			w.unawait(lk)
		}
		c := l.checkHybrid(lk, now, reqs, hrs, out, noted, w)
		noted = true
		ok := found && c.ok
		if ok && mode&multiCommit != 0 {
			l.chargeHybrid(lk, now, reqs, hrs, out)
		}
		if ok || mode&multiWait == 0 || !found || !c.wait || w != nil && w.over(lk) {
			lk.Unlock()
			if w != nil {
				w.done(reqs, hrs, out)
			}
			return ok
		}
		if w == nil {
			w = newMultiWaiter(l, len(reqs), hrs)
		}
		w.await(lk, reqs, hrs)
		round := w.cluster.NextRound() // taken under the locks: a reply applied after the check wakes us
		lk.Unlock()
		select {
		case <-ctx.Done():
			w.gone = true
		case <-w.timer.C:
			w.late = true
		case <-round:
		}
		now = l.nowMicro()
	}
}

// multiCheck is what checkHybrid found: whether every request admits, and
// whether the refusals are all of keys an exchange with Redis may settle.
type multiCheck struct{ ok, wait bool }

// checkHybrid checks the hybrid requests of lk, charging nothing, and
// writes their Decisions into out: each entry's lease's, or its failure
// policy's (Degraded) for a key without a lease while Redis is out of
// reach or did not answer in time (w.late). noted reports that the
// requests were counted as demand already (a decision checked again after
// a wait). A refusal an exchange may settle (lease.SignalWait) is marked
// in w, if set, for its await; no wait is possible once w is gone or late.
func (l *Limiter) checkHybrid(lk keyed.Locked[lease.Lease], now int64, reqs []Request, hrs []*hybridRule, out []local.Decision, noted bool, w *multiWaiter) multiCheck {
	c := multiCheck{ok: true}
	definite := false
	for k := lk.First(); k < lk.Len(); {
		e, group, next := lk.Group(k)
		k = next
		i0 := group[0]
		m := hrs[i0]
		lr, total := m.lease.Load(), sumCost(reqs, group)
		l.setDigest(&e.Value, reqs[i0].Key)
		var d local.Decision
		waits := false
		if total > lr.MaxCost() {
			d = dress(lease.Verdict{Reason: local.ReasonCostTooHigh}, lr.MaxCost())
		} else {
			var v lease.Verdict
			var signal lease.Signal
			if noted {
				v, signal = e.Value.Redecide(lr, now, total, false)
			} else {
				v, signal = e.Value.Check(lr, now, total)
			}
			if signal.Sync() {
				lr.Notify(e)
			}
			late, wait := w != nil && (w.late || w.gone), signal.Wait()
			switch {
			case m.byPolicy(e, lr, now, v) || w != nil && w.late && wait && v.Reason == local.ReasonNoLease:
				d = m.degraded(e, lr, now, reqs[i0].Key, total, false)
			case wait && m.rs.wait != WaitNever && !l.breakerOpen() && !late:
				waits = true
				d = dress(v, lr.MaxCost()) // refused, for now
			default:
				d = dress(refusal(lr, v), lr.MaxCost())
			}
			if w != nil && w.gone && wait {
				d = dress(lease.Verdict{Reason: local.ReasonNoLease, Remaining: v.Remaining, Reset: v.Reset, Retry: lr.MinGap()}, lr.MaxCost())
			}
		}
		for _, i := range group {
			out[i] = d
		}
		if w != nil {
			w.waits[i0] = waits
		}
		if !d.Allowed() {
			c.ok = false
			if waits {
				c.wait = true
			} else {
				definite = true
			}
		}
	}
	c.wait = c.wait && !definite
	return c
}

// chargeHybrid charges the hybrid requests of lk, which checkHybrid found
// all admitted at now, the entries locked since, and writes their
// Decisions into out.
func (l *Limiter) chargeHybrid(lk keyed.Locked[lease.Lease], now int64, reqs []Request, hrs []*hybridRule, out []local.Decision) {
	for k := lk.First(); k < lk.Len(); {
		e, group, next := lk.Group(k)
		k = next
		i0 := group[0]
		m := hrs[i0]
		lr, total := m.lease.Load(), sumCost(reqs, group)
		var d local.Decision
		if out[i0].Degraded() {
			d = m.degraded(e, lr, now, reqs[i0].Key, total, true)
		} else {
			v, signal := e.Value.Redecide(lr, now, total, true)
			if signal.Sync() {
				lr.Notify(e)
			}
			d = dress(refusal(lr, v), lr.MaxCost())
		}
		for _, i := range group {
			out[i] = d
		}
	}
}

// multiWaiter is a multi-rule decision's wait for its keys' exchanges: one
// per decision that waits, off the hot path.
type multiWaiter struct {
	l       *Limiter
	cluster *lease.Cluster
	start   time.Time
	timer   *time.Timer // Config.Timeout from start
	late    bool        // the timer fired: the failure policies decide what Redis did not
	gone    bool        // the context ended: refused
	// Per request index, for the first request of each entry's group:
	// whether its refusal waits for an exchange (checkHybrid), the cost it
	// awaits on the entry, and the ticket of its first wait.
	waits   []bool
	awaited []int64
	ticket  []uint16
	has     []bool
}

func newMultiWaiter(l *Limiter, n int, hrs []*hybridRule) *multiWaiter {
	var c *lease.Cluster // the Limiter's syncer's, which every hybrid rule shares
	for _, m := range hrs {
		if m != nil {
			c = m.lease.Load().Cluster()
			break
		}
	}
	return &multiWaiter{
		l: l, cluster: c, start: time.Now(), timer: time.NewTimer(l.cfg.Timeout),
		waits: make([]bool, n), awaited: make([]int64, n), ticket: make([]uint16, n), has: make([]bool, n),
	}
}

// await puts the cost of each group that waits on its key's next exchange,
// and hands the key to the syncer. The entries are locked.
func (w *multiWaiter) await(lk keyed.Locked[lease.Lease], reqs []Request, hrs []*hybridRule) {
	for k := lk.First(); k < lk.Len(); {
		e, group, next := lk.Group(k)
		k = next
		i0 := group[0]
		if !w.waits[i0] {
			continue
		}
		if !w.has[i0] {
			w.ticket[i0], w.has[i0] = e.Value.Ticket(hrs[i0].lease.Load()), true
		}
		w.awaited[i0] = sumCost(reqs, group)
		e.Value.Await(w.awaited[i0])
		hrs[i0].lease.Load().Notify(e)
	}
}

// unawait takes back what await put on the entries, locked again.
func (w *multiWaiter) unawait(lk keyed.Locked[lease.Lease]) {
	for k := lk.First(); k < lk.Len(); {
		e, group, next := lk.Group(k)
		k = next
		if n := w.awaited[group[0]]; n > 0 {
			e.Value.Unawait(n)
			w.awaited[group[0]] = 0
		}
	}
}

// over reports whether the wait is over: every key it waits for had an
// exchange sent since its wait began answered, and still refuses.
func (w *multiWaiter) over(lk keyed.Locked[lease.Lease]) bool {
	for k := lk.First(); k < lk.Len(); {
		e, group, next := lk.Group(k)
		k = next
		i0 := group[0]
		if w.waits[i0] && (!w.has[i0] || !e.Value.Exchanged(w.ticket[i0])) {
			return false
		}
	}
	return true
}

// done marks the hybrid decisions of a multi-rule decision that waited as
// Waited, and counts the wait under each hybrid rule.
func (w *multiWaiter) done(reqs []Request, hrs []*hybridRule, out []local.Decision) {
	w.timer.Stop()
	took := time.Since(w.start)
	for i, m := range hrs {
		if m == nil {
			continue
		}
		out[i] = localx.MarkWaited(out[i])
		if w.has[i] {
			w.l.metrics.waited(m.rs, took, out[i])
		}
	}
}

// lookupMulti puts in ents the entry of each hybrid request among reqs
// (hrs[i] not nil), nil for the others. A hybrid request refused without
// its entry (a bad cost, a key the table has no room for) gets its Decision
// in out, and makes lookupMulti report false.
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
			out[i] = localx.Outcome{Reason: local.ReasonOverflow, Capacity: lr.MaxCost()}.Decision()
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
