package local

import "github.com/hybridlimit/hybridlimit/internal/keyed"

// ring is the sliding window log of one key: the admitted requests, oldest
// first, as (time, cost) pairs. Requests admitted in the same microsecond
// share a pair, so a key holds at most Limit pairs. Its first pairs are in
// the ring itself (room); past them it moves to a buffer of its own, which
// doubles when full and is halved or more when a quarter full or less
// (admit), so that a key holds room for about what its window holds now,
// not for the most it ever held.
type ring struct {
	buf  []logEntry
	head int   // index of the oldest pair
	n    int   // pairs held
	sum  int64 // total cost held
	room [firstPairs]logEntry
}

type logEntry struct{ t, n int64 }

// firstPairs is how many pairs a ring holds in itself: a key that sees a
// few requests per window needs no buffer of its own.
const firstPairs = 4

// minShrunk is the least buffer a ring that outgrew its room shrinks to:
// it does not move back into room, so that a key whose window holds about
// firstPairs requests does not allocate a buffer each time it passes them
// (a buffer of 8 pairs costs 128 bytes, and at most that, per key).
const minShrunk = 2 * firstPairs

// pairs is the most pairs a log's ring holds: one per request admitted at
// a distinct time in the window, at most Limit, and for the sub-window
// counter one per sub-window.
func (l *compiled) pairs() int64 {
	if l.p.Algorithm == SubWindowCounter {
		return min(l.p.Quota, l.ws)
	}
	return l.p.Quota
}

func newRing(limit int64) *ring {
	r := new(ring)
	r.init(limit)
	return r
}

// init makes r an empty ring for a log of limit pairs at most, in its
// room: its length is the least power of two that holds them, up to
// firstPairs.
func (r *ring) init(limit int64) {
	size := 1
	for size < firstPairs && int64(size) < limit {
		size *= 2
	}
	*r = ring{}
	r.buf = r.room[:size]
}

// logState is a sliding window log's state allocated with its ring, in one
// object of 144 bytes. A key's first one is allocated with its entry
// (logBlock), so that a key among many reaches its log in the lines next
// to its entry's, where one behind a pointer of its own costs a dependent
// cache miss. The ring's room holds, without a buffer, the log of a key
// that sees a few requests per window.
type logState struct {
	s state
	r ring
}

// logBlock is the entry of a key first seen under a sliding window log,
// allocated with room for its log: 208 bytes, one size class. The Limiter
// allocates its entries as logBlocks while its limit is a log
// (Limiter.newEntry), so that its log is next to its entry (logState).
type logBlock struct {
	e keyed.Entry[keyState]
	l logState
}

// newState returns a zero state for a key decided under lim, a log's (the
// sliding window log, the sub-window counter) with its ring in place: in
// spare, a logBlock's room, when there is one.
func newState(lim *compiled, spare *logState) *state {
	if !lim.logged() {
		return new(state)
	}
	b := spare
	if b == nil {
		b = new(logState)
	}
	b.r.init(lim.pairs())
	b.s.log = &b.r
	return &b.s
}

// moveLog moves the log of s, a sliding window log's state, into spare,
// empty room in a new entry, and returns the state there: a log carried
// over to a new limit (settle) then does not hold on to its old entry. A
// ring that outgrew its room keeps its buffer. It returns s itself when
// there is no room to move to, or no log.
func moveLog(s *state, spare *logState) *state {
	if spare == nil || s.log == nil {
		return s
	}
	spare.s, spare.r = *s, *s.log // the ring's room comes with it
	r := &spare.r
	if len(r.buf) <= len(r.room) {
		r.buf = r.room[:len(r.buf)]
	}
	spare.s.log = r
	return &spare.s
}

// at returns the i-th oldest pair. The buffer's length is a power of two.
func (r *ring) at(i int) *logEntry { return &r.buf[(r.head+i)&(len(r.buf)-1)] }

// expired returns how many of the oldest pairs, and their total cost, have
// times at or before cut, that is, outside the window (cut, now].
func (r *ring) expired(cut int64) (int, int64) {
	buf, head, mask, n := r.buf, r.head, len(r.buf)-1, r.n
	var k int
	var sum int64
	for ; k < n; k++ {
		e := &buf[(head+k)&mask]
		if e.t > cut {
			break
		}
		sum += e.n
	}
	return k, sum
}

// freedAt returns the time of the pair whose leaving the window frees need:
// walking from the oldest pair still in the window (skip pairs are already
// out), the first at which the cost passed reaches need.
func (r *ring) freedAt(skip int, need int64) int64 {
	var acc int64
	for i := skip; i < r.n; i++ {
		e := r.at(i)
		acc += e.n
		if acc >= need {
			return e.t
		}
	}
	return r.at(r.n - 1).t // not reached: need never exceeds the sum held
}

// admit forgets the k oldest pairs, of total cost sum, and records a
// request of cost n at t, t at or after every time held: drop and push in
// one, the sliding log's every admission. A buffer of its own that the
// pairs then fill a quarter of or less is replaced by a smaller one
// (shrunk). A ring allocates only when its pairs have doubled or halved
// since it last did.
func (r *ring) admit(k int, sum, t, n int64) {
	total := r.sum + n - sum
	mask := len(r.buf) - 1
	head, cnt := (r.head+k)&mask, r.n-k
	if cnt > 0 {
		if last := &r.buf[(head+cnt-1)&mask]; last.t == t {
			last.n += n
			r.head, r.n, r.sum = head, cnt, total
			return
		}
	}
	if r.push(k, total, t, n) {
		return
	}
	r.head, r.n, r.sum = head, cnt, total
	r.refit()
	r.buf[r.n] = logEntry{t: t, n: n}
	r.n++
}

// push forgets the k oldest pairs and appends a new one, of cost n at t,
// after which the ring holds total, when that needs no new buffer: it
// reports false, having changed nothing, when the pairs left fill the
// buffer, or would fill a quarter of a buffer of its own or less (admit
// then refits). t must be later than every time held.
func (r *ring) push(k int, total, t, n int64) bool {
	size := len(r.buf)
	cnt := r.n - k
	if cnt == size || size > minShrunk && 4*(cnt+1) <= size {
		return false
	}
	head := (r.head + k) & (size - 1)
	r.buf[(head+cnt)&(size-1)] = logEntry{t: t, n: n}
	r.head, r.n, r.sum = head, cnt+1, total
	return true
}

// refit moves the pairs, oldest first, to a buffer of twice the size when
// they fill it, and otherwise to the one shrunk gives for them and the pair
// to come.
func (r *ring) refit() {
	size := 2 * len(r.buf)
	if r.n < len(r.buf) {
		size = shrunk(r.n + 1)
	}
	buf := make([]logEntry, size)
	for i := range r.n {
		buf[i] = *r.at(i)
	}
	r.buf, r.head = buf, 0
}

// shrunk is the buffer a ring shrinks to for pairs pairs: the least power
// of two they fill half of or less, and at least minShrunk.
func shrunk(pairs int) int {
	size := minShrunk
	for size < 2*pairs {
		size *= 2
	}
	return size
}
