package local

import (
	"time"

	"github.com/hybridlimit/hybridlimit/internal/decision"
	"github.com/hybridlimit/hybridlimit/internal/keyed"
)

// Request is one rule of a multi-rule decision: a cost N for Key under
// Limiter.
type Request struct {
	Limiter *Limiter
	Key     string
	N       int64
}

// AllowMultiAt decides several requests as one: it admits them all, charging
// each, or none, charging nothing. It writes one Decision per request into
// out, which must be at least as long as reqs, and reports whether all were
// admitted.
//
// When they are not all admitted, out[i].Allowed is false for every i and
// out[i].Reason tells which rules refused (ReasonOK marks a rule that had
// room); Remaining and ResetAfter then describe each key without this
// request. Requests naming the same Limiter and key are decided together,
// with the sum of their costs.
//
// The keys' locks are taken in one global order, so concurrent calls over
// overlapping keys cannot deadlock. AllowMultiAt allocates nothing for up to
// eight requests.
func AllowMultiAt(now time.Time, reqs []Request, out []Decision) bool {
	return allowMulti(now.UnixMicro(), reqs, out, nil)
}

// CheckMultiAt reports whether AllowMultiAt would admit reqs at now, and
// charges nothing. It writes into out the Decisions of a refusal: Allowed
// false everywhere, ReasonOK for a rule with room, and why the others
// refuse.
func CheckMultiAt(now time.Time, reqs []Request, out []Decision) bool {
	room := false
	allowMulti(now.UnixMicro(), reqs, out, func() bool {
		room = true
		return false
	})
	return room
}

// AllowMultiIfAt is AllowMultiAt with one more condition: when every
// request has room, it calls commit, the keys still locked, and charges
// them only if commit returns true. It decides local requests as one with
// requests kept elsewhere: commit decides and charges those, and no
// concurrent request can take the room of these keys in between. commit
// is called at most once; it must not wait on anything but other keys'
// locks, nor decide any of these keys (it would deadlock). It allocates
// nothing for up to eight requests, when commit does not escape: package
// hybrid decides its local and hybrid rules as one with it.
func AllowMultiIfAt(now time.Time, reqs []Request, out []Decision, commit func() bool) bool {
	return allowMulti(now.UnixMicro(), reqs, out, commit)
}

// multiInline is how many requests AllowMultiAt handles without allocating.
const multiInline = 8

// allowMulti decides reqs as one; commit, when not nil, is the last
// condition, called with the keys locked when all have room.
func allowMulti(now int64, reqs []Request, out []Decision, commit func() bool) bool {
	if len(out) < len(reqs) {
		panic("local: AllowMulti: out is shorter than reqs")
	}
	var ebuf [multiInline]*keyed.Entry[keyState]
	var obuf [multiInline]int
	var hbuf [multiInline]held
	m := multi{now: clampTime(now), reqs: reqs, out: out[:len(reqs)], ents: ebuf[:], order: obuf[:], hs: hbuf[:]}
	if len(reqs) > multiInline {
		m.ents, m.order, m.hs = make([]*keyed.Entry[keyState], len(reqs)), make([]int, len(reqs)), make([]held, len(reqs))
	}
	m.ents, m.order, m.hs = m.ents[:len(reqs)], m.order[:len(reqs)], m.hs[:len(reqs)]
	for {
		ok := m.lookup()
		lk, locked := keyed.LockAll(m.ents, m.order)
		if !locked {
			continue // an entry was evicted since its lookup
		}
		if !m.settle(lk) {
			lk.Unlock()
			continue // an entry was replaced under a new limit
		}
		m.hold(lk)
		ok = m.check(lk) && ok
		if ok && commit != nil {
			ok = commit()
		}
		m.finish(lk, ok)
		lk.Unlock()
		if !ok {
			for i := range m.out {
				m.out[i] = refused(m.out[i])
			}
		}
		return ok
	}
}

// multi is a multi-rule decision in progress: the requests, their
// Decisions, and per request its entry (nil for one decided without) and
// its state held (at the index of the first request on the entry).
type multi struct {
	now   int64
	reqs  []Request
	out   []Decision
	ents  []*keyed.Entry[keyState]
	order []int
	hs    []held
}

// lookup finds each request's entry: the key's, or the Limiter's overflow
// entry for a key that does not fit under OverflowShared. A request decided
// without an entry (a negative cost, a key that does not fit under the
// other policies) gets its Decision now and no entry; lookup reports false
// if one of those refuses.
func (m *multi) lookup() bool {
	ok := true
	for i, r := range m.reqs {
		m.out[i], m.ents[i] = Decision{}, nil
		if r.N < 0 {
			m.out[i] = verdict{reason: ReasonInvalidCost}.decision(r.Limiter.limit.Load().max)
			ok = false
			continue
		}
		e := r.Limiter.store.Get(r.Key, m.now)
		switch {
		case e != nil:
			m.ents[i] = e
		case r.Limiter.overflow == OverflowShared:
			m.ents[i] = &r.Limiter.shared
		default:
			m.out[i] = decisionOf(r.Limiter.overflowed(m.now, r.N))
			ok = ok && m.out[i].Allowed()
		}
	}
	return ok
}

// total is the sum of the costs of the requests in group.
func (m *multi) total(group []int) int64 {
	var n int64
	for _, i := range group {
		n += m.reqs[i].N
	}
	return n
}

// settle carries each entry over to its Limiter's limit in force, which
// the check and the commit then use, so that a SetLimit in between does
// not change what was checked. It reports false when an entry was replaced
// by the carrying over: the caller looks the keys up again. A cost above
// the limit's MaxCost is refused without touching the state.
func (m *multi) settle(lk keyed.Locked[keyState]) bool {
	for k := lk.First(); k < lk.Len(); {
		e, group, next := lk.Group(k)
		r := &m.reqs[group[0]]
		h := &m.hs[group[0]]
		*h = held{lim: r.Limiter.limit.Load()}
		if m.total(group) <= h.lim.max && !r.Limiter.settle(e, h.lim, r.Key, m.now) {
			return false
		}
		k = next
	}
	return true
}

// hold holds each entry's state, but for a cost above the limit's MaxCost.
func (m *multi) hold(lk keyed.Locked[keyState]) {
	for k := lk.First(); k < lk.Len(); {
		e, group, next := lk.Group(k)
		if h := &m.hs[group[0]]; m.total(group) <= h.lim.max {
			h.st, h.w = holdInto(e, h.lim, &h.tmp)
			h.held = true
		}
		k = next
	}
}

// check decides every entry for the sum of its requests' costs, charging
// nothing, and reports whether all admit.
func (m *multi) check(lk keyed.Locked[keyState]) bool {
	ok := true
	for k := lk.First(); k < lk.Len(); {
		e, group, next := lk.Group(k)
		h := &m.hs[group[0]]
		v, limit := decideHeld(h.state(), h.lim, m.now, m.total(group), false)
		if e.Standalone() { // the overflow entry
			v = v.overflowed()
		}
		m.setGroup(group, v.decision(limit))
		ok = ok && m.out[group[0]].Allowed()
		k = next
	}
	return ok
}

// finish charges every entry if all admitted (ok), or reports those that
// had room uncharged, and releases the states held.
func (m *multi) finish(lk keyed.Locked[keyState], ok bool) {
	for k := lk.First(); k < lk.Len(); {
		e, group, next := lk.Group(k)
		h := &m.hs[group[0]]
		switch {
		case ok:
			decideHeld(h.state(), h.lim, m.now, m.total(group), true)
		case m.out[group[0]].Allowed():
			// It had room but another rule refused: report it uncharged.
			m.setGroup(group, refused(decisionOf(decideHeld(h.state(), h.lim, m.now, 0, false))))
		}
		if h.held {
			release(e, h.lim, h.state(), h.w)
		}
		k = next
	}
}

// setGroup gives the requests in group the Decision d.
func (m *multi) setGroup(group []int, d Decision) {
	for _, i := range group {
		m.out[i] = d
	}
}

// held is an entry's state held for a multi-rule decision: the limit it is
// decided under, and what holdInto returned (held false for a cost above the
// limit's MaxCost, which is refused without holding). It keeps no pointer
// into itself: the requests' helds live in an array on AllowMultiAt's stack,
// which such a pointer would move to the heap.
type held struct {
	lim  *compiled
	st   *state // the entry's own state, or nil for one unpacked into tmp
	w    uint64
	tmp  state
	held bool
}

// state returns the state held: the entry's own, or the one unpacked into
// tmp. Nil when not held.
func (h *held) state() *state {
	switch {
	case !h.held:
		return nil
	case h.st != nil:
		return h.st
	}
	return &h.tmp
}

func decisionOf(v verdict, limit int64) Decision { return v.decision(limit) }

// refused returns d with Allowed false and its other figures unchanged.
func refused(d Decision) Decision { return Decision(decision.Decision(d).Refused()) }
