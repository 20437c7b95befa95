package local

import (
	"time"
	"unsafe"
)

// Request is one rule of a multi-rule decision: a cost N for Key under
// Limiter.
type Request struct {
	Limiter *Limiter
	Key     string
	N       int64
}

// AllowMulti is AllowMultiAt with the time of reqs[0].Limiter's clock.
func AllowMulti(reqs []Request, out []Decision) bool {
	if len(reqs) == 0 {
		return true
	}
	return allowMulti(reqs[0].Limiter.nowMicro(), reqs, out)
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
	return allowMulti(now.UnixMicro(), reqs, out)
}

// multiInline is how many requests AllowMultiAt handles without allocating.
const multiInline = 8

func allowMulti(now int64, reqs []Request, out []Decision) bool {
	if len(out) < len(reqs) {
		panic("local: AllowMulti: out is shorter than reqs")
	}
	now = clampTime(now)
	var ebuf [multiInline]*Entry[keyState]
	var obuf [multiInline]int
	var hbuf [multiInline]held
	ents, order, hs := ebuf[:0], obuf[:0], hbuf[:0]
	if len(reqs) > multiInline {
		ents, order = make([]*Entry[keyState], 0, len(reqs)), make([]int, 0, len(reqs))
		hs = make([]held, 0, len(reqs))
	}
	ents, order, hs = ents[:len(reqs)], order[:len(reqs)], hs[:len(reqs)]
retry:
	ok := true
	for i, r := range reqs {
		out[i] = Decision{}
		ents[i] = nil
		order[i] = i
		if r.N < 0 {
			out[i] = verdict{reason: ReasonInvalidCost}.decision(r.Limiter.limit.Load().max)
			ok = false
			continue
		}
		e := r.Limiter.store.Get(r.Key, now)
		if e == nil {
			switch r.Limiter.overflow {
			case OverflowShared:
				e = &r.Limiter.shared
			case OverflowAllow:
				out[i] = decisionOf(r.Limiter.overflowed(now, r.N))
				ok = ok && out[i].Allowed()
				continue
			default:
				out[i] = decisionOf(r.Limiter.overflowed(now, r.N))
				ok = false
				continue
			}
		}
		ents[i] = e
	}
	// Lock order: entry address. Insertion sort: the lists are short.
	for i := 1; i < len(order); i++ {
		for j := i; j > 0 && addr(ents[order[j]]) < addr(ents[order[j-1]]); j-- {
			order[j], order[j-1] = order[j-1], order[j]
		}
	}
	for k, i := range order {
		if e := ents[i]; e != nil && (k == 0 || e != ents[order[k-1]]) {
			e.mu.Lock()
		}
	}
	unlock := func() {
		for k, i := range order {
			if e := ents[i]; e != nil && (k == 0 || e != ents[order[k-1]]) {
				e.mu.Unlock()
			}
		}
	}
	for _, e := range ents {
		if e != nil && e.Evicted() { // evicted between lookup and lock
			unlock()
			goto retry
		}
	}
	// groups calls f once per distinct entry, with the requests on it (order
	// puts equal entries next to each other) and the sum of their costs.
	groups := func(f func(e *Entry[keyState], lim *Limiter, group []int, total int64)) {
		for k := 0; k < len(order); {
			e := ents[order[k]]
			end := k + 1
			for end < len(order) && ents[order[end]] == e {
				end++
			}
			if e != nil {
				var total int64
				for _, i := range order[k:end] {
					total += reqs[i].N
				}
				f(e, reqs[order[k]].Limiter, order[k:end], total)
			}
			k = end
		}
	}
	// Carry each entry over to its limiter's limit in force, and hold its
	// state; the check and the commit below use that limit, so a SetLimit in
	// between does not change what was checked. An entry replaced by the
	// carrying over sends the call back to the lookups. A cost above the
	// limit's MaxCost is refused without touching the state.
	replaced := false
	groups(func(e *Entry[keyState], l *Limiter, group []int, total int64) {
		h := &hs[group[0]]
		*h = held{lim: l.limit.Load()}
		if total <= h.lim.max && !replaced && !l.settle(e, h.lim, reqs[group[0]].Key, now) {
			replaced = true
		}
	})
	if replaced {
		unlock()
		goto retry
	}
	groups(func(e *Entry[keyState], _ *Limiter, group []int, total int64) {
		if h := &hs[group[0]]; total <= h.lim.max {
			h.st, h.w = holdInto(e, h.lim, &h.tmp)
			h.held = true
		}
	})
	// Check every rule, charging nothing.
	groups(func(e *Entry[keyState], l *Limiter, group []int, total int64) {
		v, limit := decideHeld(hs[group[0]].state(), hs[group[0]].lim, now, total, false)
		if e == &l.shared {
			v = v.overflowed()
		}
		d := v.decision(limit)
		for _, i := range group {
			out[i] = d
		}
		ok = ok && d.Allowed()
	})
	groups(func(e *Entry[keyState], _ *Limiter, group []int, total int64) {
		h := &hs[group[0]]
		switch {
		case ok:
			decideHeld(h.state(), h.lim, now, total, true)
		case out[group[0]].Allowed():
			// It had room but another rule refused: report it uncharged.
			d := decisionOf(decideHeld(h.state(), h.lim, now, 0, false)).Refused()
			for _, i := range group {
				out[i] = d
			}
		}
		if h.held {
			release(e, h.lim, h.state(), h.w)
		}
	})
	unlock()
	if !ok {
		for i := range reqs {
			out[i] = out[i].Refused()
		}
	}
	return ok
}

// held is an entry's state held for a multi-rule decision: the limit it is
// decided under, and what holdInto returned (held false for a cost above the
// limit's MaxCost, which is refused without holding). It keeps no pointer
// into itself: the requests' helds live in an array on AllowMultiAt's stack,
// which such a pointer would move to the heap.
type held struct {
	lim  *Limit
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

// addr orders entries for locking. Go's heap objects do not move, so an
// entry's address is a stable, total order; nil sorts first.
func addr(e *Entry[keyState]) uintptr { return uintptr(unsafe.Pointer(e)) }

func decisionOf(v verdict, limit int64) Decision { return v.decision(limit) }
