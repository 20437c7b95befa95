package local

import (
	"math/big"
	"sort"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/internal/clocktest"
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
func decodeFuzz(data []byte) (compiled, []fuzzReq, bool) {
	if len(data) < 4 {
		return compiled{}, nil, false
	}
	// The first six algorithms only, as the corpus was written for them;
	// FuzzWindowVariants takes the sub-window counter and anchored windows.
	algo := Algorithm(data[0]%uint8(GCRA) + 1)
	p := Limit{
		Algorithm: algo,
		Quota:     1 + int64(data[1]%20),
		Window:    fuzzWindows[int(data[2])%len(fuzzWindows)],
	}
	if algo.bucket() {
		p.Burst = int64(data[3] % 25)
	}
	return decodeRequests(p, data[4:])
}

// decodeVariant turns bytes into a sub-window counter, aligned or
// anchored, or an anchored fixed window, and requests, as decodeFuzz does.
// The fourth byte picks the number of sub-windows among those that divide
// the window.
func decodeVariant(data []byte) (compiled, []fuzzReq, bool) {
	if len(data) < 4 {
		return compiled{}, nil, false
	}
	p := Limit{
		Algorithm: SubWindowCounter,
		Quota:     1 + int64(data[1]%20),
		Window:    fuzzWindows[int(data[2])%len(fuzzWindows)],
		Anchored:  data[0]%3 != 0,
	}
	if data[0]%3 == 2 {
		p.Algorithm = FixedWindow
	} else {
		var ks []int64
		for k := int64(1); k <= maxSubWindows; k++ {
			if p.Window.Microseconds()%k == 0 {
				ks = append(ks, k)
			}
		}
		p.SubWindows = ks[int(data[3])%len(ks)]
	}
	return decodeRequests(p, data[4:])
}

// decodeRequests returns p's Limit and the requests b encodes.
func decodeRequests(p Limit, b []byte) (compiled, []fuzzReq, bool) {
	lim, err := compile(p)
	if err != nil {
		return compiled{}, nil, false
	}
	data := b
	const base = 1_700_006_400_000_000
	now := int64(base)
	var reqs []fuzzReq
	for b := data; len(b) >= 3 && len(reqs) < 300; b = b[3:] {
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

func newReference(l *compiled) reference {
	switch {
	case l.p.Anchored && l.p.Algorithm == FixedWindow:
		return &refAnchored{l: l}
	case l.p.Algorithm == SubWindowCounter:
		return &refSub{l: l, counts: map[int64]int64{}}
	}
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
	l      *compiled
	counts map[int64]int64
}

func (r *refFixed) decide(now, n int64) (bool, int64) {
	w := now / r.l.w
	if r.counts[w]+n > r.l.p.Quota {
		return false, r.l.p.Quota - r.counts[w]
	}
	r.counts[w] += n
	return true, r.l.p.Quota - r.counts[w]
}

// refAnchored is the counter with a timestamp: a window starts at the
// first admission after the last one ended.
type refAnchored struct {
	l            *compiled
	start, count int64
}

func (r *refAnchored) decide(now, n int64) (bool, int64) {
	start, count := r.start, r.count
	if count == 0 || now >= start+r.l.w {
		start, count = now, 0
	}
	if count+n > r.l.p.Quota {
		return false, r.l.p.Quota - count
	}
	if n > 0 {
		r.start, r.count = start, count+n
	}
	return true, r.l.p.Quota - count - n
}

// refSub keeps a count per sub-window start; a sub-window's requests count
// while its start is in (t − W, t], t the start of now's sub-window, on
// the grid of multiples of the sub-window or, anchored, of the newest
// sub-window counted, or at now when the window counts nothing.
type refSub struct {
	l      *compiled
	counts map[int64]int64
	newest int64
	starts []int64 // the sub-window of each admission, in order
}

func (r *refSub) start(now int64) int64 {
	step := r.l.step
	switch {
	case !r.l.p.Anchored:
		return now - now%step
	case len(r.counts) == 0 || now >= r.newest+r.l.w:
		return now
	}
	return now - (now-r.newest)%step
}

func (r *refSub) decide(now, n int64) (bool, int64) {
	t := r.start(now)
	var count int64
	for at, c := range r.counts {
		if at > t-r.l.w {
			count += c
		}
	}
	if count+n > r.l.p.Quota {
		return false, r.l.p.Quota - count
	}
	if n > 0 {
		r.counts[t] += n
		r.newest = t
		r.starts = append(r.starts, t)
	}
	return true, r.l.p.Quota - count - n
}

type refLog struct {
	l   *compiled
	log []fuzzReq
}

func (r *refLog) decide(now, n int64) (bool, int64) {
	var count int64
	for _, e := range r.log {
		if e.at > now-r.l.w && e.at <= now {
			count += e.n
		}
	}
	if count+n > r.l.p.Quota {
		return false, r.l.p.Quota - count
	}
	r.log = append(r.log, fuzzReq{now, n})
	return true, r.l.p.Quota - count - n
}

type refCounter struct {
	l      *compiled
	counts map[int64]int64
}

func (r *refCounter) decide(now, n int64) (bool, int64) {
	w := now / r.l.w
	k := (now - w*r.l.w) / r.l.step
	// estimate = prev·(steps − k)/steps + cur
	est := big.NewRat(r.counts[w-1]*(r.l.ws-k), r.l.ws)
	est.Add(est, big.NewRat(r.counts[w], 1))
	after := new(big.Rat).Add(est, big.NewRat(n, 1))
	lim := big.NewRat(r.l.p.Quota, 1)
	if after.Cmp(lim) > 0 {
		return false, floorRat(new(big.Rat).Sub(lim, est))
	}
	r.counts[w] += n
	return true, floorRat(new(big.Rat).Sub(lim, after))
}

type refBucket struct {
	l      *compiled
	tokens *big.Rat
	last   int64
	used   bool
}

func (r *refBucket) decide(now, n int64) (bool, int64) {
	if r.used {
		// tokens += elapsed · Limit/Window, at most Burst
		r.tokens.Add(r.tokens, big.NewRat((now-r.last)*r.l.p.Quota, r.l.w))
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

func checkSequence(t *testing.T, lim compiled, reqs []fuzzReq) {
	t.Helper()
	ref := newReference(&lim)
	var s state
	var admitted []fuzzReq
	l, err := New(lim.p, Config{Clock: clocktest.Wall{}, NoBackgroundSweep: true})
	require.NoError(t, err)
	defer l.Close()
	for i, q := range reqs {
		before := cloneState(s)
		d := lim.decide(&s, q.at, q.n, true).decision(lim.max)
		got := l.AllowNAt(time.UnixMicro(q.at), "k", q.n)
		require.Equal(t, d.String(), got.String(), "%v step %d (t=%d n=%d): the Limiter's decision, want the transition's", lim, i, q.at, q.n)
		wantAllowed, wantRemaining := ref.decide(q.at, q.n)
		require.Equal(t, wantAllowed, d.Allowed(), "%v step %d (t=%d n=%d): allowed, want the reference's", lim, i, q.at, q.n)
		require.Equal(t, wantRemaining, d.Remaining(), "%v step %d (t=%d n=%d): remaining, want the reference's", lim, i, q.at, q.n)
		require.GreaterOrEqual(t, d.Remaining(), int64(0), "%v step %d: remaining out of range", lim, i)
		require.LessOrEqual(t, d.Remaining(), lim.max, "%v step %d: remaining out of range", lim, i)
		require.Equal(t, lim.max, d.Capacity(), "%v step %d: limit", lim, i)
		if d.Allowed() {
			require.Equal(t, ReasonOK, d.Reason(), "%v step %d: admitted with %+v", lim, i, d)
			require.Zero(t, d.RetryAfter(), "%v step %d: admitted with %+v", lim, i, d)
			if q.n > 0 {
				admitted = append(admitted, q)
			}
		} else {
			require.Equal(t, ReasonLimited, d.Reason(), "%v step %d: rejected with %+v", lim, i, d)
			require.Positive(t, d.RetryAfter(), "%v step %d: rejected with %+v", lim, i, d)
			retry := d.RetryAfter().Microseconds()
			at := cloneState(before)
			require.Equal(t, ReasonOK, lim.decide(&at, q.at+retry, q.n, false).reason, "%v step %d: retry-after %v is not honest", lim, i, d.RetryAfter())
			at = cloneState(before)
			require.NotEqual(t, ReasonOK, lim.decide(&at, q.at+retry-1, q.n, false).reason, "%v step %d: retry-after %v is not the shortest", lim, i, d.RetryAfter())
		}
		reset := d.ResetAfter().Microseconds()
		require.True(t, lim.initial(&s, q.at+reset), "%v step %d: not initial after reset-after %v", lim, i, d.ResetAfter())
		if reset > 0 {
			require.False(t, lim.initial(&s, q.at+reset-1), "%v step %d: initial before reset-after %v", lim, i, d.ResetAfter())
		}
		if reset == 0 {
			require.Equal(t, lim.max, d.Remaining(), "%v step %d: remaining with reset-after 0", lim, i)
		}
	}
	if r, ok := ref.(*refSub); ok {
		checkSubBound(t, lim, admitted, r.starts)
		return
	}
	checkWindowBound(t, lim, admitted)
}

// checkSubBound checks the sub-window counter's guarantee on the admitted
// trace, with the start of each admission's sub-window: at most Limit in any
// SubWindows consecutive sub-windows; and so at most Limit plus one
// sub-window's admissions in any (t − Window, t].
func checkSubBound(t *testing.T, lim compiled, adm []fuzzReq, starts []int64) {
	t.Helper()
	for i, a := range adm {
		var inSubs, inWindow, oldest int64
		for j, b := range adm[:i+1] {
			if starts[j] > starts[i]-lim.w {
				inSubs += b.n
			}
			if b.at > a.at-lim.w {
				inWindow += b.n
				if starts[j] <= starts[i]-lim.w {
					oldest += b.n // in the sub-window the window's start cuts
				}
			}
		}
		require.LessOrEqual(t, inSubs, lim.p.Quota, "%v: admitted in the sub-windows up to %d", lim, starts[i])
		require.LessOrEqual(t, inWindow-oldest, lim.p.Quota, "%v: admitted in (%d, %d] less the sub-window its start cuts (%d)", lim, a.at-lim.w, a.at, oldest)
	}
}

// checkWindowBound checks the exact algorithms' own guarantee on the
// admitted trace.
func checkWindowBound(t *testing.T, lim compiled, adm []fuzzReq) {
	t.Helper()
	switch lim.p.Algorithm {
	case FixedWindow:
		if lim.p.Anchored {
			return // its windows are refAnchored's, which the decisions matched
		}
		per := map[int64]int64{}
		for _, a := range adm {
			per[a.at/lim.w] += a.n
			require.LessOrEqual(t, per[a.at/lim.w], lim.p.Quota, "%v: admitted in window %d", lim, a.at/lim.w)
		}
	case SlidingWindowLog:
		for i, a := range adm {
			var sum int64
			for _, b := range adm[:i+1] {
				if b.at > a.at-lim.w {
					sum += b.n
				}
			}
			require.LessOrEqual(t, sum, lim.p.Quota, "%v: admitted in (%d, %d]", lim, a.at-lim.w, a.at)
		}
	case TokenBucket, LeakyBucket, GCRA:
		// admitted in [t0, t1] ≤ burst + rate·(t1 − t0), cross-multiplied.
		for i := range adm {
			var sum int64
			for j := i; j < len(adm); j++ {
				sum += adm[j].n
				if (sum-lim.p.Burst)*lim.w > lim.p.Quota*(adm[j].at-adm[i].at) {
					require.Failf(t, "more than burst + rate · length admitted", "%v: [%d, %d] admitted %d", lim, adm[i].at, adm[j].at, sum)
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

// FuzzWindowVariants is FuzzAlgorithms for the sub-window counter, aligned
// and anchored, and the anchored fixed window.
func FuzzWindowVariants(f *testing.F) {
	for v := range byte(3) {
		f.Add([]byte{v, 4, 0, 6, 1, 0, 1, 1, 0, 1, 0, 0xc0, 2, 0, 8, 1, 0xff, 0x0f, 3, 0, 0xc0, 1})
		f.Add([]byte{v, 19, 1, 0, 0, 1, 5, 0, 1, 5, 0, 1, 9, 0x40, 0, 1, 0, 0xc0, 20})
		f.Add([]byte{v, 9, 5, 3, 0x20, 0, 3, 0x20, 0, 4, 0x00, 0x02, 2, 0x00, 0x10, 5, 0xff, 0x3f, 1, 0x01, 0, 9})
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		lim, reqs, ok := decodeVariant(data)
		if !ok {
			return
		}
		checkSequence(t, lim, reqs)
	})
}

// FuzzShaper drives one key of a bucket Limiter through a mix of AllowNAt,
// ReserveAt, CancelAt and SetLimit, with non-decreasing times, and holds
// every Decision and Reservation to refShaper's exactly. It then checks
// that the requests admitted and the reservations acting in any interval
// [t0, t1] number at most burst + rate·(t1 − t0), with the largest burst
// and rate of the limits used.
func FuzzShaper(f *testing.F) {
	for a := range byte(3) {
		// Reservations queued past the burst, an Allow and a peek inside
		// the queue, a cancel of the last, then a faster limit.
		f.Add([]byte{a, 9, 0, 2, 1, 0, 0, 2, 32, 1, 0, 0, 2, 32, 0, 0x40, 0, 1, 0, 0, 0, 0, 0, 0, 2, 0, 0, 1, 0, 3, 0, 0, 19, 0, 1, 0, 0, 1, 32})
		// Wait-like reservations with a long delay, a slower limit, an
		// unpacked limit (rl = 1999), and costs above the burst.
		f.Add([]byte{a, 4, 1, 3, 1, 0, 0, 3, 0xff, 1, 0, 0, 3, 0xff, 3, 0, 0, 0, 3, 0, 1, 0, 4, 0, 0, 0x10, 0, 1, 0, 3, 0, 0, 31, 2, 1, 1, 0x08, 0, 2, 16, 0, 0x08, 0, 9, 0})
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		checkShaper(t, data)
	})
}

// shaperLimit decodes a bucket limit from three bytes; 31 in the first
// picks one whose state does not pack (rl = 1999).
func shaperLimit(algo Algorithm, b []byte) compiled {
	p := Limit{Algorithm: algo, Quota: 1 + int64(b[0]%20), Window: fuzzWindows[int(b[1])%len(fuzzWindows)], Burst: int64(b[2] % 25)}
	if b[0]%32 == 31 {
		p.Quota, p.Window = 1999, time.Second
	}
	lim, err := compile(p)
	if err != nil {
		panic(err)
	}
	return lim
}

func checkShaper(t *testing.T, data []byte) {
	if len(data) < 4 {
		return
	}
	algo := []Algorithm{TokenBucket, LeakyBucket, GCRA}[data[0]%3]
	lim := shaperLimit(algo, data[1:4])
	l, err := New(lim.p, Config{Clock: clocktest.Wall{}, NoBackgroundSweep: true})
	require.NoError(t, err)
	defer l.Close()
	ref := &refShaper{pending: lim}
	used := []compiled{lim}
	var held []*refReservation // the Limiter's reservations, as the model has them
	var acts []shapedAct       // the Limiter's admissions of a positive cost
	const base = 1_700_006_400_000_000
	now := int64(base)
	for i, b := 0, data[4:]; len(b) >= 5 && i < 300; i, b = i+1, b[5:] {
		w := ref.pending.w
		// A step of time, but for SetLimit, whose bytes name the limit.
		if dt := int64(b[1]) | int64(b[2])<<8; b[0]%4 != 3 && dt&0xc000 != 0xc000 {
			now += w * int64(dt&0x3fff) / 4096
		}
		at := time.UnixMicro(now)
		n := int64(b[3]) % (ref.pending.max + 2)
		switch b[0] % 4 {
		case 0:
			got := l.AllowNAt(at, "k", n)
			require.Equal(t, ref.allow(now, n).String(), got.String(), "op %d: AllowNAt(t=%d, n=%d), want the model's", i, now-base, n)
			if got.Allowed() && n > 0 {
				acts = append(acts, shapedAct{at: now, n: n})
			}
		case 1:
			maxDelay := maxWindow
			if b[4] != 0xff {
				maxDelay = time.Duration(w*int64(b[4])/32) * time.Microsecond
			}
			got, err := l.ReserveAt(at, "k", n, maxDelay)
			require.NoError(t, err, "op %d", i)
			want, e := ref.reserve(now, n, maxDelay.Microseconds())
			require.Equal(t, want.OK, got.OK, "op %d: ReserveAt(t=%d, n=%d, maxDelay=%v) = %+v, want %+v", i, now-base, n, maxDelay, got, want)
			require.Equal(t, want.Reason, got.Reason, "op %d: ReserveAt(t=%d, n=%d, maxDelay=%v) = %+v, want %+v", i, now-base, n, maxDelay, got, want)
			require.Equal(t, want.Delay, got.Delay, "op %d: ReserveAt(t=%d, n=%d, maxDelay=%v) = %+v, want %+v", i, now-base, n, maxDelay, got, want)
			require.WithinDuration(t, want.TimeToAct, got.TimeToAct, 0, "op %d: ReserveAt(t=%d, n=%d, maxDelay=%v) = %+v, want %+v", i, now-base, n, maxDelay, got, want)
			if got.OK {
				if e == nil { // the model refused it
					e = &refReservation{}
				}
				e.r, e.at = got, got.TimeToAct.UnixMicro()
				held = append(held, e)
			}
		case 2:
			if len(held) == 0 {
				continue
			}
			e := held[int(b[3])%len(held)]
			e.r.cancelAt(at)
			ref.cancel(now, e)
		case 3:
			next := shaperLimit(algo, b[2:5])
			require.NoError(t, l.SetLimit(next.p), "op %d", i)
			ref.pending, ref.changed = next, true
			used = append(used, next)
		}
	}
	for _, e := range held {
		if !e.cancelled && e.r.Delay > 0 {
			acts = append(acts, shapedAct{at: e.at, n: e.r.n, rounded: true})
		} else if !e.cancelled && e.r.n > 0 {
			acts = append(acts, shapedAct{at: e.at, n: e.r.n})
		}
	}
	checkActs(t, used, acts)
}

// shapedAct is a request admitted at, or a reservation acting at, a time.
// A delayed reservation's time is its exact time rounded up to the µs.
type shapedAct struct {
	at, n   int64
	rounded bool
}

// checkActs checks that acts admit at most burst + rate · length in any
// interval, with the largest burst and rate among lims. An interval that
// starts at a delayed reservation's time may have started up to 1µs
// earlier, at the exact time.
func checkActs(t *testing.T, lims []compiled, acts []shapedAct) {
	t.Helper()
	fast := lims[0]
	var burst int64
	for _, lim := range lims {
		burst = max(burst, lim.p.Burst)
		if lim.p.Quota*fast.w > fast.p.Quota*lim.w {
			fast = lim
		}
	}
	sort.Slice(acts, func(i, j int) bool {
		return acts[i].at < acts[j].at || (acts[i].at == acts[j].at && acts[i].rounded && !acts[j].rounded)
	})
	for i := range acts {
		var sum, slack int64
		if acts[i].rounded {
			slack = 1
		}
		for j := i; j < len(acts); j++ {
			sum += acts[j].n
			if (sum-burst)*fast.w > fast.p.Quota*(acts[j].at-acts[i].at+slack) {
				require.Failf(t, "more than burst + rate · length admitted", "[%d, %d] admits %d: more than burst %d + rate %d/%dµs · length", acts[i].at, acts[j].at, sum, burst, fast.p.Quota, fast.w)
			}
		}
	}
}

// refShaper is the obvious model of a bucket Limiter's key: a rational
// count of tokens, refilled at the limit's rate up to its burst, that
// reservations may drive below zero. A new limit (SetLimit) takes effect
// at the key's next decision that is not refused for its cost, keeping the
// tokens rounded down and clamped to the new burst; below zero, the new
// limit has no tokens when the last reservation acts.
type refShaper struct {
	cur, pending compiled
	changed      bool // a SetLimit since the key was last settled
	settled      bool
	tokens       *big.Rat
	last         int64
	stack        []*refReservation // admissions and reservations not given back, oldest first
}

// refReservation is a reservation as refShaper sees it, with the
// Limiter's.
type refReservation struct {
	r         Reservation
	at, n     int64
	live      bool // neither given back nor spent by a CancelAt that could not give it back
	cancelled bool // given back
}

// settle brings the key to the limit in force at now, for a decision.
func (m *refShaper) settle(now int64) {
	if !m.settled {
		m.cur, m.settled, m.changed, m.tokens, m.last = m.pending, true, false, big.NewRat(m.pending.p.Burst, 1), now
		return
	}
	m.refill(now)
	if !m.changed {
		return
	}
	m.changed = false
	from, to := m.cur, m.pending
	switch {
	case from.rl == to.rl && from.el == to.el && from.tau == to.tau: // the same bucket: kept exactly
	case m.tokens.Cmp(big.NewRat(from.p.Burst, 1)) == 0: // full: as a new key
		m.tokens = big.NewRat(to.p.Burst, 1)
	case m.tokens.Sign() < 0:
		// Reservations queued past the burst act at the times they were
		// promised, the last ⌈−tokens / rate⌉ µs from now: to has no tokens
		// then.
		last := new(big.Rat).Neg(m.tokens)
		last.Mul(last, big.NewRat(from.w, from.p.Quota))
		m.tokens = big.NewRat(-ceilRat(last)*to.p.Quota, to.w)
	default:
		m.tokens = big.NewRat(min(floorRat(m.tokens), to.p.Burst), 1)
	}
	m.cur = to
	for _, e := range m.stack {
		e.live = false // the Limiter moved the key to a new entry, even under equal parameters
	}
	m.stack = nil
}

func (m *refShaper) refill(now int64) {
	m.tokens.Add(m.tokens, big.NewRat((now-m.last)*m.cur.p.Quota, m.cur.w))
	if b := big.NewRat(m.cur.p.Burst, 1); m.tokens.Cmp(b) > 0 {
		m.tokens = b
	}
	m.last = now
}

// wait returns how long, in whole µs rounded up, until the key holds n
// tokens.
func (m *refShaper) wait(n int64) int64 {
	short := new(big.Rat).Sub(big.NewRat(n, 1), m.tokens)
	if short.Sign() <= 0 {
		return 0
	}
	short.Mul(short, big.NewRat(m.cur.w, m.cur.p.Quota))
	return ceilRat(short)
}

func ceilRat(r *big.Rat) int64 {
	return -floorRat(new(big.Rat).Neg(r))
}

func (m *refShaper) allow(now, n int64) Decision {
	if n > m.pending.max {
		return makeDecision(false, ReasonCostTooHigh, m.pending.max, 0, 0, 0)
	}
	m.settle(now)
	allowed, reason, retry := false, ReasonLimited, time.Duration(0)
	if m.tokens.Cmp(big.NewRat(n, 1)) >= 0 {
		m.tokens.Sub(m.tokens, big.NewRat(n, 1))
		allowed, reason = true, ReasonOK
		if n > 0 {
			m.stack = append(m.stack, &refReservation{})
		}
	} else {
		retry = time.Duration(m.wait(n)) * time.Microsecond
	}
	reset := time.Duration(m.wait(m.cur.p.Burst)) * time.Microsecond
	return makeDecision(allowed, reason, m.cur.max, max(floorRat(m.tokens), 0), reset, retry)
}

func (m *refShaper) reserve(now, n, maxDelay int64) (Reservation, *refReservation) {
	if n > m.pending.max {
		return Reservation{Reason: ReasonCostTooHigh}, nil
	}
	m.settle(now)
	delay := m.wait(n)
	if delay > max(maxDelay, 0) {
		return Reservation{Reason: ReasonLimited, Delay: time.Duration(delay) * time.Microsecond}, nil
	}
	m.tokens.Sub(m.tokens, big.NewRat(n, 1))
	e := &refReservation{at: now + delay, n: n, live: true}
	if n > 0 {
		m.stack = append(m.stack, e)
	}
	return Reservation{OK: true, Delay: time.Duration(delay) * time.Microsecond, TimeToAct: time.UnixMicro(now + delay)}, e
}

// cancel gives e back at now if it is the last not given back, still
// ahead, and under the limit the key is expressed in.
func (m *refShaper) cancel(now int64, e *refReservation) {
	live := e.live
	e.live = false
	if !live || len(m.stack) == 0 || m.stack[len(m.stack)-1] != e || now >= e.at {
		return
	}
	m.stack = m.stack[:len(m.stack)-1]
	m.refill(now)
	m.tokens.Add(m.tokens, big.NewRat(e.n, 1))
	if b := big.NewRat(m.cur.p.Burst, 1); m.tokens.Cmp(b) > 0 {
		m.tokens = b
	}
	e.cancelled = true
}
