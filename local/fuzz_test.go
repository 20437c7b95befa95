package local

import (
	"math/big"
	"testing"
	"time"
)

// The fuzz targets decode a limit and a request sequence from bytes and run
// the pure transition (Limit.decide) against an obviously correct reference
// model of the same algorithm, checking on every step:
//
//   - the decision (allowed, remaining) equals the reference's;
//   - 0 ≤ remaining ≤ limit;
//   - retry-after is honest (the same request then is admitted, with no
//     other traffic) and the shortest (1µs earlier it is not);
//   - reset-after is exact (the state is initial then, and not 1µs before);
//   - the exact algorithms never admit more than their own definition
//     allows: per aligned window (fixed), in any (t − W, t] (log), within
//     burst + rate·(t1 − t0) over any interval (buckets);
//   - a Limiter deciding the same requests for one key returns the same
//     Decisions: its own paths (the packed words, the sliding log's logAt)
//     are the transition's.

var fuzzWindows = []time.Duration{
	time.Second, time.Minute, 7 * time.Microsecond, time.Millisecond,
	3*time.Second + time.Microsecond, 90 * time.Second,
}

type fuzzReq struct{ at, n int64 }

// decodeFuzz turns bytes into a limit and requests with non-decreasing
// times starting at base.
func decodeFuzz(data []byte) (Limit, []fuzzReq, bool) {
	if len(data) < 4 {
		return Limit{}, nil, false
	}
	algo := Algorithm(data[0]%uint8(numAlgorithms) + 1)
	p := Params{
		Algorithm: algo,
		Limit:     1 + int64(data[1]%20),
		Window:    fuzzWindows[int(data[2])%len(fuzzWindows)],
	}
	if algo.bucket() {
		p.Burst = int64(data[3] % 25)
	}
	lim, err := NewLimit(p)
	if err != nil {
		return Limit{}, nil, false
	}
	const base = 1_700_006_400_000_000
	now := int64(base)
	var reqs []fuzzReq
	for b := data[4:]; len(b) >= 3 && len(reqs) < 300; b = b[3:] {
		dt := int64(b[0]) | int64(b[1])<<8
		// Mostly short steps, so limits are reached; now and then long ones.
		step := lim.w * int64(dt&0x3fff) / 4096
		if dt&0xc000 == 0xc000 {
			step = 0
		}
		now += step
		reqs = append(reqs, fuzzReq{at: now, n: int64(b[2]) % (lim.max + 1)})
	}
	return lim, reqs, true
}

func cloneState(s state) state {
	if s.log != nil {
		r := *s.log
		r.buf = append([]logEntry(nil), r.buf...)
		s.log = &r
	}
	return s
}

// reference is the obvious model of one algorithm.
type reference interface {
	// decide returns whether n is admitted at now and the remaining after
	// it, and records it if admitted.
	decide(now, n int64) (bool, int64)
}

func newReference(l *Limit) reference {
	switch l.p.Algorithm {
	case FixedWindow:
		return &refFixed{l: l, counts: map[int64]int64{}}
	case SlidingWindowLog:
		return &refLog{l: l}
	case SlidingWindowCounter:
		return &refCounter{l: l, counts: map[int64]int64{}}
	default:
		return &refBucket{l: l, tokens: big.NewRat(l.p.Burst, 1)}
	}
}

type refFixed struct {
	l      *Limit
	counts map[int64]int64
}

func (r *refFixed) decide(now, n int64) (bool, int64) {
	w := now / r.l.w
	if r.counts[w]+n > r.l.p.Limit {
		return false, r.l.p.Limit - r.counts[w]
	}
	r.counts[w] += n
	return true, r.l.p.Limit - r.counts[w]
}

type refLog struct {
	l   *Limit
	log []fuzzReq
}

func (r *refLog) decide(now, n int64) (bool, int64) {
	var count int64
	for _, e := range r.log {
		if e.at > now-r.l.w && e.at <= now {
			count += e.n
		}
	}
	if count+n > r.l.p.Limit {
		return false, r.l.p.Limit - count
	}
	r.log = append(r.log, fuzzReq{now, n})
	return true, r.l.p.Limit - count - n
}

type refCounter struct {
	l      *Limit
	counts map[int64]int64
}

func (r *refCounter) decide(now, n int64) (bool, int64) {
	w := now / r.l.w
	k := (now - w*r.l.w) / r.l.step
	// estimate = prev·(steps − k)/steps + cur
	est := big.NewRat(r.counts[w-1]*(r.l.ws-k), r.l.ws)
	est.Add(est, big.NewRat(r.counts[w], 1))
	after := new(big.Rat).Add(est, big.NewRat(n, 1))
	lim := big.NewRat(r.l.p.Limit, 1)
	if after.Cmp(lim) > 0 {
		return false, floorRat(new(big.Rat).Sub(lim, est))
	}
	r.counts[w] += n
	return true, floorRat(new(big.Rat).Sub(lim, after))
}

type refBucket struct {
	l      *Limit
	tokens *big.Rat
	last   int64
	used   bool
}

func (r *refBucket) decide(now, n int64) (bool, int64) {
	if r.used {
		// tokens += elapsed · Limit/Window, at most Burst
		r.tokens.Add(r.tokens, big.NewRat((now-r.last)*r.l.p.Limit, r.l.w))
		if b := big.NewRat(r.l.p.Burst, 1); r.tokens.Cmp(b) > 0 {
			r.tokens = b
		}
	}
	r.last, r.used = now, true
	if r.tokens.Cmp(big.NewRat(n, 1)) < 0 {
		return false, max(floorRat(r.tokens), 0)
	}
	r.tokens.Sub(r.tokens, big.NewRat(n, 1))
	return true, floorRat(r.tokens)
}

func floorRat(r *big.Rat) int64 {
	q := new(big.Int).Div(r.Num(), r.Denom()) // Euclidean: floor for a positive divisor
	return q.Int64()
}

func checkSequence(t *testing.T, lim Limit, reqs []fuzzReq) {
	t.Helper()
	ref := newReference(&lim)
	var s state
	var admitted []fuzzReq
	l, err := New(lim, Config{Clock: SystemClock{}, NoBackgroundSweep: true})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	for i, q := range reqs {
		before := cloneState(s)
		d := lim.decide(&s, q.at, q.n, true).decision(lim.max)
		if got := l.AllowNAt(time.UnixMicro(q.at), "k", q.n); got != d {
			t.Fatalf("%v step %d (t=%d n=%d): the Limiter decided %v, the transition %v", lim, i, q.at, q.n, got, d)
		}
		wantAllowed, wantRemaining := ref.decide(q.at, q.n)
		if d.Allowed() != wantAllowed || d.Remaining() != wantRemaining {
			t.Fatalf("%v step %d (t=%d n=%d): got allowed=%v remaining=%d, reference %v %d", lim, i, q.at, q.n, d.Allowed(), d.Remaining(), wantAllowed, wantRemaining)
		}
		if d.Remaining() < 0 || d.Remaining() > lim.max || d.Limit() != lim.max {
			t.Fatalf("%v step %d: remaining %d, limit %d out of range", lim, i, d.Remaining(), d.Limit())
		}
		if d.Allowed() {
			if d.RetryAfter() != 0 || d.Reason() != ReasonOK {
				t.Fatalf("%v step %d: admitted with %+v", lim, i, d)
			}
			if q.n > 0 {
				admitted = append(admitted, q)
			}
		} else {
			if d.Reason() != ReasonLimited || d.RetryAfter() <= 0 {
				t.Fatalf("%v step %d: rejected with %+v", lim, i, d)
			}
			retry := d.RetryAfter().Microseconds()
			at := cloneState(before)
			if lim.decide(&at, q.at+retry, q.n, false).reason != ReasonOK {
				t.Fatalf("%v step %d: retry-after %v is not honest", lim, i, d.RetryAfter())
			}
			at = cloneState(before)
			if lim.decide(&at, q.at+retry-1, q.n, false).reason == ReasonOK {
				t.Fatalf("%v step %d: retry-after %v is not the shortest", lim, i, d.RetryAfter())
			}
		}
		reset := d.ResetAfter().Microseconds()
		if !lim.initial(&s, q.at+reset) {
			t.Fatalf("%v step %d: not initial after reset-after %v", lim, i, d.ResetAfter())
		}
		if reset > 0 && lim.initial(&s, q.at+reset-1) {
			t.Fatalf("%v step %d: initial before reset-after %v", lim, i, d.ResetAfter())
		}
		if reset == 0 && d.Remaining() != lim.max {
			t.Fatalf("%v step %d: reset-after 0 with remaining %d", lim, i, d.Remaining())
		}
	}
	checkWindowBound(t, lim, admitted)
}

// checkWindowBound checks the exact algorithms' own guarantee on the
// admitted trace.
func checkWindowBound(t *testing.T, lim Limit, adm []fuzzReq) {
	t.Helper()
	switch lim.p.Algorithm {
	case FixedWindow:
		per := map[int64]int64{}
		for _, a := range adm {
			per[a.at/lim.w] += a.n
			if per[a.at/lim.w] > lim.p.Limit {
				t.Fatalf("%v: window %d admitted %d", lim, a.at/lim.w, per[a.at/lim.w])
			}
		}
	case SlidingWindowLog:
		for i, a := range adm {
			var sum int64
			for _, b := range adm[:i+1] {
				if b.at > a.at-lim.w {
					sum += b.n
				}
			}
			if sum > lim.p.Limit {
				t.Fatalf("%v: (%d, %d] admitted %d", lim, a.at-lim.w, a.at, sum)
			}
		}
	case TokenBucket, LeakyBucket, GCRA:
		// admitted in [t0, t1] ≤ burst + rate·(t1 − t0), cross-multiplied.
		for i := range adm {
			var sum int64
			for j := i; j < len(adm); j++ {
				sum += adm[j].n
				if (sum-lim.p.Burst)*lim.w > lim.p.Limit*(adm[j].at-adm[i].at) {
					t.Fatalf("%v: [%d, %d] admitted %d", lim, adm[i].at, adm[j].at, sum)
				}
			}
		}
	}
}

func FuzzAlgorithms(f *testing.F) {
	for a := range numAlgorithms {
		f.Add([]byte{byte(a), 4, 0, 6, 1, 0, 1, 1, 0, 1, 0, 0xc0, 2, 0, 8, 1, 0xff, 0x0f, 3, 0, 0xc0, 1})
		f.Add([]byte{byte(a), 19, 1, 0, 0, 1, 5, 0, 1, 5, 0, 1, 9, 0x40, 0, 1, 0, 0xc0, 20})
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		lim, reqs, ok := decodeFuzz(data)
		if !ok {
			return
		}
		checkSequence(t, lim, reqs)
	})
}
