package local

// ring is the sliding window log of one key: the admitted requests, oldest
// first, as (time, cost) pairs. Requests admitted in the same microsecond
// share a pair, so a key holds at most Limit pairs. It grows by doubling up
// to what the key needs and does not shrink.
type ring struct {
	buf  []logEntry
	head int   // index of the oldest pair
	n    int   // pairs held
	sum  int64 // total cost held
}

type logEntry struct{ t, n int64 }

func newRing(limit int64) *ring {
	size := 1
	for size < 4 && int64(size) < limit {
		size *= 2
	}
	return &ring{buf: make([]logEntry, size)}
}

// logState is a sliding window log's state allocated with its ring and
// the ring's first pairs, in one object of 112 bytes: a key among many
// reaches its log in one cache miss from its entry, where three separate
// objects cost three.
type logState struct {
	s     state
	r     ring
	pairs [2]logEntry
}

// newState returns a zero state for a key decided under lim, a sliding
// window log's with its ring in place.
func newState(lim *Limit) *state {
	if lim.p.Algorithm != SlidingWindowLog {
		return new(state)
	}
	b := new(logState)
	b.r.buf = b.pairs[:min(lim.p.Limit, int64(len(b.pairs)))]
	b.s.log = &b.r
	return &b.s
}

// at returns the i-th oldest pair. The buffer's length is a power of two.
func (r *ring) at(i int) *logEntry { return &r.buf[(r.head+i)&(len(r.buf)-1)] }

// expired returns how many of the oldest pairs, and their total cost, have
// times at or before cut, that is, outside the window (cut, now].
func (r *ring) expired(cut int64) (int, int64) {
	var k int
	var sum int64
	for k < r.n {
		e := r.at(k)
		if e.t > cut {
			break
		}
		sum += e.n
		k++
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

// drop forgets the k oldest pairs, of total cost sum.
func (r *ring) drop(k int, sum int64) {
	if k == 0 {
		return
	}
	r.head = (r.head + k) & (len(r.buf) - 1)
	r.n -= k
	r.sum -= sum
	if r.n == 0 {
		r.head = 0
	}
}

// push records a request of cost n at t, t at or after every time held.
func (r *ring) push(t, n int64) {
	if r.n > 0 {
		if last := r.at(r.n - 1); last.t == t {
			last.n += n
			r.sum += n
			return
		}
	}
	if r.n == len(r.buf) {
		r.grow()
	}
	*r.at(r.n) = logEntry{t: t, n: n}
	r.n++
	r.sum += n
}

// grow doubles the buffer, oldest pair first.
func (r *ring) grow() {
	buf := make([]logEntry, 2*len(r.buf))
	for i := range r.n {
		buf[i] = *r.at(i)
	}
	r.buf, r.head = buf, 0
}
