package keyed

import "unsafe"

// Lock returns key's entry, locked and not evicted: an entry evicted
// between its lookup and its lock is looked up again. It returns nil when
// the key is new and the store has no room for it (Get).
func (s *Store[V]) Lock(key string, now int64) *Entry[V] {
	for {
		e := s.Get(key, now)
		if e == nil {
			return nil
		}
		// LockLive's body, written out: the mutex's fast path inlines
		// here, where a call to LockLive would not.
		e.mu.Lock()
		if !e.evicted {
			return e
		}
		e.mu.Unlock()
	}
}

// Locked is a set of entries locked together for a decision on several
// requests: ents holds request i's entry at i (nil for a request decided
// without one), and order the requests' indexes sorted by entry address,
// so that requests on one entry are next to each other. Each distinct
// entry is locked once. Locking in address order, one global order, keeps
// concurrent callers over overlapping entries from deadlocking.
type Locked[V any] struct {
	ents  []*Entry[V]
	order []int
	first int // order[first:] are the requests with an entry
}

// LockAll locks the distinct entries among ents, the entries of requests
// 0 to len(ents)−1 (nil for requests without one), in address order.
// order is the caller's scratch space, as long as ents, which the Locked
// keeps. When an entry turns out evicted since the caller looked it up,
// LockAll unlocks everything and reports false: the caller looks its
// entries up again.
func LockAll[V any](ents []*Entry[V], order []int) (Locked[V], bool) {
	order = order[:len(ents)]
	for i := range order {
		order[i] = i
	}
	// Insertion sort: the lists are short.
	for i := 1; i < len(order); i++ {
		for j := i; j > 0 && addr(ents[order[j]]) < addr(ents[order[j-1]]); j-- {
			order[j], order[j-1] = order[j-1], order[j]
		}
	}
	first := 0
	for first < len(order) && ents[order[first]] == nil {
		first++ // nil sorts first
	}
	l := Locked[V]{ents: ents, order: order, first: first}
	evicted := false
	for k := l.first; k < len(order); k = l.next(k) {
		e := ents[order[k]]
		e.mu.Lock()
		evicted = evicted || e.evicted
	}
	if evicted {
		l.Unlock()
		return Locked[V]{}, false
	}
	return l, true
}

// Unlock unlocks the entries.
func (l Locked[V]) Unlock() {
	for k := l.first; k < len(l.order); k = l.next(k) {
		l.ents[l.order[k]].mu.Unlock()
	}
}

// First is where the groups begin: Group(l.First()) is the first.
func (l Locked[V]) First() int { return l.first }

// Group returns the group of requests beginning at k: their entry, their
// indexes into ents, and where the next group begins (Len once past the
// last). Iterate with
//
//	for k := l.First(); k < l.Len(); {
//		e, group, next := l.Group(k)
//		…
//		k = next
//	}
func (l Locked[V]) Group(k int) (e *Entry[V], group []int, next int) {
	next = l.next(k)
	return l.ents[l.order[k]], l.order[k:next], next
}

// Len is the end of the groups: the number of requests.
func (l Locked[V]) Len() int { return len(l.order) }

// next returns where the group beginning at k ends.
func (l Locked[V]) next(k int) int {
	e := l.ents[l.order[k]]
	k++
	for k < len(l.order) && l.ents[l.order[k]] == e {
		k++
	}
	return k
}

// addr orders entries for locking. Go's heap objects do not move, so an
// entry's address is a stable, total order; nil sorts first.
func addr[V any](e *Entry[V]) uintptr { return uintptr(unsafe.Pointer(e)) }
