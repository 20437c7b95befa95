package local

import (
	"math"

	"github.com/hybridlimit/hybridlimit/internal/decision"
	"github.com/hybridlimit/hybridlimit/internal/usec"
)

// state is one key's algorithm state, all integers, time in microseconds
// since the Unix epoch. The zero state is every algorithm's initial state.
type state struct {
	// at is the state's time: the window's start (fixed window, sliding
	// window counter), the newest time stored (sliding window log), the
	// newest sub-window's start (sub-window counter), or the TAT in whole µs
	// (the buckets and GCRA).
	at int64
	// count is what the window at holds (fixed window, sliding window
	// counter), or the TAT's fraction in units of 1/rl µs, 0 ≤ count < rl
	// (the buckets and GCRA).
	count int64
	// prev is the previous window's count (sliding window counter).
	prev int64
	// log holds the admitted requests (sliding window log), or the counts
	// of the sub-windows, each as a pair at its start (sub-window counter).
	log *ring
}

// verdict is a decision as the algorithms produce it, times in µs. It is
// four words, which the compiler passes in registers (at most four fields of
// at most 32 bytes), like a Decision.
type verdict struct {
	reason    Reason // ReasonOK or reasonAdmittedOverflow admit; the rest reject
	remaining int64
	reset     int64
	retry     int64
}

// reasonAdmittedOverflow marks an admission under OverflowAllow; the
// Decision reports it as Allowed with ReasonOverflow.
const reasonAdmittedOverflow Reason = 255

// decision dresses v as the Decision the API returns. limit is the limit's
// MaxCost.
func (v verdict) decision(limit int64) Decision {
	return Decision(decision.Make(v.allowed(), uint8(v.public()), limit, v.remaining, usec.Duration(v.reset), usec.Duration(v.retry)))
}

// overflowed marks v as decided for a key that did not fit in the table,
// against the state such keys share (OverflowShared).
func (v verdict) overflowed() verdict {
	switch v.reason {
	case ReasonOK:
		v.reason = reasonAdmittedOverflow
	case ReasonLimited:
		v.reason = ReasonOverflow
	}
	return v
}

func (v verdict) allowed() bool { return v.reason == ReasonOK || v.reason == reasonAdmittedOverflow }

// public returns the Reason the Decision reports.
func (v verdict) public() Reason {
	if v.reason == reasonAdmittedOverflow {
		return ReasonOverflow
	}
	return v.reason
}

// decide is the algorithm's transition (state, now, n) → (state', decision).
// It assumes 0 ≤ n ≤ l.max and now ≥ 0. State changes only when commit is
// true and a request of cost n > 0 is admitted: a rejected request consumes
// nothing, and a cost of 0 only asks. Time running backwards is clamped to
// the last time the state stored.
func (l *compiled) decide(s *state, now, n int64, commit bool) verdict {
	switch l.p.Algorithm {
	case FixedWindow:
		return l.fixed(s, now, n, commit)
	case SlidingWindowLog:
		return l.slidingLog(s, now, n, commit)
	case SlidingWindowCounter:
		return l.counter(s, now, n, commit)
	case SubWindowCounter:
		return l.subWindows(s, now, n, commit)
	default:
		return l.bucket(s, now, n, commit)
	}
}

// initial reports whether s is back to the initial state at now: a fresh
// key would be decided identically, so the key may be forgotten.
func (l *compiled) initial(s *state, now int64) bool {
	switch l.p.Algorithm {
	case FixedWindow:
		return s.count == 0 || now >= s.at+l.w
	case SlidingWindowLog, SubWindowCounter:
		return s.log == nil || s.log.n == 0 || now >= s.at+l.w
	case SlidingWindowCounter:
		return (s.count == 0 && s.prev == 0) || now >= s.at+2*l.w || (s.count == 0 && now >= s.at+l.w)
	default:
		return s.at < now || (s.at == now && s.count == 0)
	}
}

func (l *compiled) fixed(s *state, now, n int64, commit bool) verdict {
	start, count := s.at, s.count
	if now >= start+l.w || (l.p.Anchored && count == 0) {
		start, count = now-now%l.w, 0
		if l.p.Anchored { // a window starts at its first request
			start = now
		}
	} else if now < start {
		now = start
	}
	if count+n > l.p.Quota {
		return l.fixedLimited(count, start+l.w-now)
	}
	count += n
	if commit && n > 0 {
		s.at, s.count = start, count
	}
	v := verdict{remaining: l.p.Quota - count}
	if count > 0 {
		v.reset = start + l.w - now
	}
	return v
}

// fixedLimited is the fixed window's rejection, with count in the window
// and reset µs left of it.
func (l *compiled) fixedLimited(count, reset int64) verdict {
	return verdict{reason: ReasonLimited, remaining: l.p.Quota - count, reset: reset, retry: reset}
}

func (l *compiled) counter(s *state, now, n int64, commit bool) verdict {
	start, cur, prev := s.at, s.count, s.prev
	if now >= start+l.w {
		next := now - now%l.w
		if next == start+l.w {
			prev = cur
		} else {
			prev = 0
		}
		start, cur = next, 0
	} else if now < start {
		now = start
	}
	lim, ws := l.p.Quota, l.ws
	left := ws - (now-start)/l.step // steps of the previous window still inside the sliding one
	// estimate + n ≤ limit, with estimate = prev·left/ws + cur, cross-multiplied.
	if cur+n <= lim && prev*left <= (lim-cur-n)*ws {
		cur += n
		if commit && n > 0 {
			s.at, s.count, s.prev = start, cur, prev
		}
		return verdict{remaining: (lim*ws - prev*left - cur*ws) / ws, reset: counterReset(start, cur, prev, now, l.w)}
	}
	return l.counterLimited(start, cur, prev, left, now, n)
}

// counterLimited is the sliding window counter's rejection of n at now, in
// the window at start that counts cur, after one that counted prev, which
// weighs left steps: one where the estimate passes the limit, with n at
// most the limit.
func (l *compiled) counterLimited(start, cur, prev, left, now, n int64) verdict {
	lim, ws := l.p.Quota, l.ws
	v := verdict{reason: ReasonLimited, reset: counterReset(start, cur, prev, now, l.w)}
	if room := lim*ws - prev*left - cur*ws; room > 0 {
		v.remaining = room / ws
	}
	// The earliest step at which the request fits, with no other traffic.
	var at int64
	if cur+n <= lim { // later in this window, as the previous one weighs less (prev > 0 here)
		at = start + (ws-(lim-cur-n)*ws/prev)*l.step
	} else { // in the next window, where this window's count is the previous one (cur > 0)
		at = start + l.w + (ws-(lim-n)*ws/cur)*l.step
	}
	v.retry = at - now
	return v
}

func counterReset(start, cur, prev, now, w int64) int64 {
	switch {
	case cur > 0:
		return start + 2*w - now
	case prev > 0:
		return start + w - now
	}
	return 0
}

func (l *compiled) slidingLog(s *state, now, n int64, commit bool) verdict {
	now = max(now, s.at)
	return l.ringDecide(s, now, now, n, commit)
}

// subWindows is the sub-window counter: a log whose requests are counted
// at the start of their sub-window, so that it holds one pair per
// sub-window with requests, at most SubWindows (l.ws), and whose window is
// the last SubWindows sub-windows.
func (l *compiled) subWindows(s *state, now, n int64, commit bool) verdict {
	now = max(now, s.at)
	var start int64
	switch {
	case !l.p.Anchored:
		start = now - now%l.step
	case s.log == nil || s.log.n == 0 || now >= s.at+l.w:
		start = now // nothing in the window: a new one starts here
	default: // on the grid of the newest sub-window held
		start = now - (now-s.at)%l.step
	}
	return l.ringDecide(s, start, now, n, commit)
}

// ringDecide decides n at now for a log's state: the request is recorded
// at t ≤ now, at or after every time held, and the window is (t − w, t].
// A pair at time u leaves the window at u + w.
func (l *compiled) ringDecide(s *state, t, now, n int64, commit bool) verdict {
	lim := l.p.Quota
	r := s.log
	var expired int
	var count, expiredSum int64
	if r != nil {
		expired, expiredSum = r.expired(t - l.w)
		count = r.sum - expiredSum
	}
	if count+n > lim {
		return l.logLimited(s, r, expired, count, now, n)
	}
	count += n
	v := verdict{remaining: lim - count}
	if n > 0 { // the newest request is this one
		v.reset = t + l.w - now
		if commit {
			s.at = t
			if r == nil {
				r = newRing(l.pairs())
				s.log = r
			}
			r.admit(expired, expiredSum, t, n)
		}
	} else if count > 0 {
		v.reset = s.at + l.w - now
	}
	return v
}

// logLimited is the sliding log's rejection of n at now, with count held
// in the window past the ring's expired oldest pairs. It frees enough by
// letting the oldest pairs leave the window.
func (l *compiled) logLimited(s *state, r *ring, expired int, count, now, n int64) verdict {
	return verdict{
		reason: ReasonLimited, remaining: max(l.p.Quota-count, 0),
		reset: s.at + l.w - now, retry: r.freedAt(expired, count+n-l.p.Quota) + l.w - now,
	}
}

// logAt is slidingLog for Limiter.allow: it decides, committing, a request
// of cost n > 0 at now on s, a log's state, in the usual case, a time past
// every one the log holds and a ring that needs no new buffer, and reports
// false, having changed nothing, otherwise. It is slidingLog and ring.admit
// without the cases they handle that allow never has (a cost of 0, no
// commit) or rarely (time run back, two requests in one microsecond, a
// ring that grows or shrinks), in one call: fewer branches and calls on
// the path every log decision takes.
func (l *compiled) logAt(s *state, now, n int64) (verdict, bool) {
	r := s.log
	if now <= s.at || r == nil {
		return verdict{}, false
	}
	expired, gone := r.expired(now - l.w)
	count := r.sum - gone
	if count+n > l.p.Quota {
		return l.logLimited(s, r, expired, count, now, n), true
	}
	if !r.push(expired, count+n, now, n) {
		return verdict{}, false
	}
	s.at = now
	return verdict{remaining: l.p.Quota - count - n, reset: l.w}, true
}

func (l *compiled) bucket(s *state, now, n int64, commit bool) verdict {
	tat, frac := s.at, s.count
	if tat < now {
		tat, frac = now, 0
	} else if early := tat - usec.CeilDiv(l.tau, l.rl); now < early {
		// The TAT is more than τ ahead: reservations queue past the burst,
		// or time ran back. A time before any the state could have been
		// stored at (TAT − τ, less the longest delay the shaper gave)
		// counts as that time, which keeps (TAT − now)·rl bounded and the
		// decision the same, a rejection; the Redis twin, which has no
		// shaper, clamps the same way.
		if early -= l.queue(); now < early {
			now = early
		}
	}
	dl := (tat-now)*l.rl + frac // (TAT − now)·rl
	need := n * l.el
	if dl+need > l.tau {
		return l.bucketLimited(dl, need)
	}
	dl += need
	if commit && n > 0 {
		f := frac + need
		s.at, s.count = tat+f/l.rl, f%l.rl
	}
	return verdict{remaining: (l.tau - dl) / l.el, reset: usec.CeilDiv(dl, l.rl)}
}

// bucketLimited is a bucket's rejection of a request that needs need, with
// (TAT − now)·rl at dl: one where dl + need passes τ.
func (l *compiled) bucketLimited(dl, need int64) verdict {
	return verdict{
		reason: ReasonLimited, remaining: max(l.tau-dl, 0) / l.el,
		reset: usec.CeilDiv(dl, l.rl), retry: usec.CeilDiv(dl+need-l.tau, l.rl),
	}
}

// convert re-expresses s, last decided under from, for the limit to. For the
// same algorithm consumption is kept: window counts stay (clamped to the new
// limit) and a bucket keeps its available tokens, rounded down and clamped to
// the new burst, or what reservations queued past the burst owe, which the
// new rate repays before it admits anything; the three bucket algorithms
// count as one here, as they share one state and one decision. A bucket
// whose rate and burst did not change keeps its state exactly, its fraction
// of a token included. Any other change of algorithm starts afresh, and so
// does a key back in its initial state.
func (to *compiled) convert(s *state, from *compiled, now int64) {
	switch {
	case from == nil: // a new key: its zero state is every algorithm's initial state
		return
	case from.p == to.p || (from.p.Algorithm.bucket() && to.p.Algorithm.bucket() && from.rl == to.rl && from.el == to.el && from.tau == to.tau):
		// The same parameters, or the same bucket under another name (say,
		// GCRA for a token bucket, or 2/2s for 1/1s): the state is kept, and
		// so is how far past the burst it may be queued.
		to.noteQueue(from.queue())
		return
	case from.initial(s, now):
		// Nothing consumed is pending: the key is as a new one (and may be
		// evicted and come back as one at any time), so it starts afresh.
		*s = state{}
		return
	case from.p.Algorithm != to.p.Algorithm && !(from.p.Algorithm.bucket() && to.p.Algorithm.bucket()):
		*s = state{}
		return
	}
	switch to.p.Algorithm {
	case FixedWindow:
		now = max(now, s.at) // time ran back: the window stored is the current one
		if now >= s.at+from.w {
			s.count = 0
		}
		if !to.p.Anchored { // an anchored window keeps its start
			s.at = now - now%to.w
		}
		s.count = min(s.count, to.p.Quota)
	case SubWindowCounter:
		// The ring reads the same under another limit on the same
		// sub-windows; other sub-windows start afresh.
		if to.w != from.w || to.step != from.step || to.p.Anchored != from.p.Anchored {
			*s = state{}
		}
	case SlidingWindowCounter:
		if to.w != from.w {
			// Windows of another length: keep what the current window
			// counted, as the current window of the new length.
			now = max(now, s.at)
			cur := s.count
			if now >= s.at+from.w {
				cur = 0
			}
			s.at, s.count, s.prev = now-now%to.w, cur, 0
		}
		s.count, s.prev = min(s.count, to.p.Quota), min(s.prev, to.p.Quota)
	case SlidingWindowLog:
		// The log holds timestamps; it reads the same under any limit.
	default:
		to.convertBucket(s, from, now)
	}
}

// convertBucket is convert between two buckets, for a state that is not
// initial at now (its TAT is not behind now). It keeps the tokens available
// at now, rounded down and clamped to the new burst. Requests the shaper
// queued under from past its burst keep the times they were promised, and
// count as consumed until then: the new limit admits nothing that would
// act before the last of them, and has no tokens at that time. (Keeping
// what they owe in tokens instead would let a faster limit admit its own
// requests alongside them; and when the limit changes again before they
// act, tokens read from such a state would stand for time, not for
// requests.) A limit whose shaper delayed nothing holds no queue.
func (to *compiled) convertBucket(s *state, from *compiled, now int64) {
	q := from.queue()
	used := from.p.Burst // time ran back before any time the state could have been stored at: no tokens
	var last int64       // how long until the last request queued past from's burst acts, in µs
	if ahead := s.at - now; ahead <= usec.CeilDiv(from.tau, from.rl)+q {
		if q > 0 {
			last = queueDelay(ahead, s.count, 0, from)
		}
		// Without a queue past the burst (last == 0), a TAT past the burst
		// is time run back (by less than τ), with no tokens, as the Redis
		// twin converts it.
		used = min(usec.CeilDiv(ahead*from.rl+s.count, from.el), from.p.Burst)
	}
	// (TAT − now)·rl under to. A queue past what the shaper could queue
	// under to (a quarter of the int64 range, or past a packed word's
	// latest TAT) is cut there.
	f := max(to.p.Burst-from.p.Burst+used, 0) * to.el
	if last > 0 {
		f = min(last, (math.MaxInt64/4)/to.rl)*to.rl + to.tau
	}
	if to.packed {
		f = min(f, (to.maxTAT-now)*to.rl)
	}
	s.at, s.count = now+f/to.rl, f%to.rl
	if f > to.tau {
		to.noteQueue(max(s.at-now-usec.CeilDiv(to.tau, to.rl), 1))
	}
}
