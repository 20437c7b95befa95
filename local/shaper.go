package local

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/hybridlimit/hybridlimit/internal/keyed"
	"github.com/hybridlimit/hybridlimit/internal/usec"
)

// Reservation is a request scheduled by Reserve: instead of being rejected
// when the bucket is short, it is admitted at a later time, TimeToAct. This is
// the leaky bucket as a shaper (a queue drained at the limit's rate), and it
// works on the same state as Allow: queued reservations count as consumed,
// and keep their times across SetLimit. Decisions on a key whose queue runs
// past the burst are refused, a cost of 0 included, with RetryAfter and
// ResetAfter measured from their own time.
type Reservation struct {
	// OK reports whether the request was scheduled. When it was not, nothing
	// was consumed and Reason says why: ReasonLimited if it would have had
	// to wait longer than the maximum delay, ReasonCostTooHigh,
	// ReasonInvalidCost or ReasonOverflow. A key that did not fit in a full
	// table is reported with ReasonOverflow whatever OK is (see Overflow).
	OK     bool
	Reason Reason
	// Delay is how long after the reservation's time the request may act.
	// For a request refused with ReasonLimited, it is the delay it would
	// have needed.
	Delay time.Duration
	// TimeToAct is the reservation's time plus Delay.
	TimeToAct time.Time

	l         *Limiter
	e         *keyed.Entry[keyState]
	lim       *compiled
	n         int64
	at        int64 // TimeToAct in µs
	tat, frac int64 // the state this reservation left, to recognise it as the last one
}

// notShaper is Reserve's and Wait's error on a Limiter of a, a window
// algorithm.
func notShaper(a Algorithm) error {
	return invalid("Algorithm", a, "Reserve and Wait need token_bucket, leaky_bucket or gcra")
}

// Reserve is ReserveAt with the Limiter's clock.
func (l *Limiter) Reserve(key string, n int64, maxDelay time.Duration) (Reservation, error) {
	return l.reserve(l.nowMicro(), key, n, maxDelay)
}

// ReserveAt schedules a request of cost n for key at the earliest time at or
// after now that the bucket admits it, provided that is at most maxDelay
// away. The limit's Burst requests may act at once; the rest are spaced at the
// limit's rate. For the window algorithms, which cannot delay a request,
// it returns an error wrapping ErrInvalidConfig.
func (l *Limiter) ReserveAt(now time.Time, key string, n int64, maxDelay time.Duration) (Reservation, error) {
	return l.reserve(now.UnixMicro(), key, n, maxDelay)
}

func (l *Limiter) reserve(now int64, key string, n int64, maxDelay time.Duration) (Reservation, error) {
	now = clampTime(now)
	if a := l.limit.Load().p.Algorithm; !a.bucket() {
		return Reservation{}, notShaper(a)
	}
	if n < 0 {
		return Reservation{Reason: ReasonInvalidCost}, nil
	}
	for {
		e := l.store.Lock(key, now)
		if e == nil {
			switch l.overflow {
			case OverflowAllow:
				if n > l.limit.Load().max {
					return Reservation{Reason: ReasonCostTooHigh}, nil
				}
				return Reservation{OK: true, Reason: ReasonOverflow, TimeToAct: time.UnixMicro(now)}, nil
			case OverflowShared:
				e = &l.shared
				e.Lock()
			default:
				return Reservation{Reason: ReasonOverflow}, nil
			}
		}
		r, ok, err := l.reserveLocked(e, key, now, n, maxDelay)
		e.Unlock()
		if !ok { // replaced under a new limit
			continue
		}
		if e == &l.shared && r.Reason != ReasonCostTooHigh {
			r.Reason = ReasonOverflow
		}
		return r, err
	}
}

// reserveLocked reserves under e's lock. It reports false when e was
// replaced by an entry under the limit in force (settle), to be looked up
// again.
func (l *Limiter) reserveLocked(e *keyed.Entry[keyState], key string, now, n int64, maxDelay time.Duration) (Reservation, bool, error) {
	lim := l.limit.Load()
	if !lim.p.Algorithm.bucket() {
		return Reservation{}, true, notShaper(lim.p.Algorithm)
	}
	if n > lim.max {
		return Reservation{Reason: ReasonCostTooHigh}, true, nil
	}
	if !l.settle(e, lim, key, now) {
		return Reservation{}, false, nil
	}
	var tmp state
	v, w := hold(e, lim, &tmp)
	defer release(e, lim, v, w)
	// Keep (TAT − now)·rl far from overflowing however long the queue, and
	// a packed TAT within its word.
	limitDelay := min(max(maxDelay.Microseconds(), 0), (math.MaxInt64/4)/lim.rl)
	if packedIn(e, lim) {
		limitDelay = min(limitDelay, lim.maxTAT-now-usec.CeilDiv(lim.tau, lim.rl)-1)
	}
	tat, frac := v.at, v.count
	if tat < now {
		tat, frac = now, 0
	}
	need := n * lim.el
	delay := queueDelay(tat-now, frac, need, lim)
	if delay > limitDelay {
		return Reservation{Reason: ReasonLimited, Delay: usec.Duration(min(delay, math.MaxInt64/int64(time.Microsecond)))}, true, nil
	}
	f := frac + need
	v.at, v.count = tat+f/lim.rl, f%lim.rl
	if delay > 0 {
		lim.noteQueue(delay)
	}
	return Reservation{
		OK: true, Delay: usec.Duration(delay), TimeToAct: time.UnixMicro(now + delay),
		l: l, e: e, lim: lim, n: n, at: now + delay, tat: v.at, frac: v.count,
	}, true, nil
}

// queueDelay returns how long after now a request that needs need (in
// units of 1/rl µs) may act on a bucket whose TAT is ahead µs and frac
// past now: ⌈((TAT − now)·rl + frac + need − τ)/rl⌉, at least 0. The
// quotient is taken apart, as ahead + ⌈(frac + need − τ)/rl⌉, so that a
// long queue, or a time that ran back far, is never multiplied by rl.
func queueDelay(ahead, frac, need int64, lim *compiled) int64 {
	// frac + need − τ is in (−τ, rl): its quotient rounded up is 1 when
	// it is positive, and minus the quotient of its opposite otherwise.
	if y := frac + need - lim.tau; y > 0 {
		ahead++
	} else {
		ahead -= -y / lim.rl
	}
	return max(ahead, 0)
}

// queue returns how far past the burst, in µs, the shaper may have queued
// a state under l: a bucket's TAT is at most ⌈τ/rl⌉ + queue() ahead of the
// time it was stored at. It is 0 outside a Limiter and until a request
// under l is delayed.
func (l *compiled) queue() int64 {
	if l.queued == nil {
		return 0
	}
	return l.queued.Load()
}

// noteQueue records that a state under l was stored q µs further ahead
// than the burst allows (see queue). Outside a Limiter it does nothing.
func (l *compiled) noteQueue(q int64) {
	if l.queued == nil {
		return
	}
	for {
		old := l.queued.Load()
		if q <= old || l.queued.CompareAndSwap(old, q) {
			return
		}
	}
}

// Cancel gives the reservation back at the time of the Limiter's clock (see
// cancelAt).
func (r *Reservation) Cancel() {
	if r.e != nil {
		r.cancelAt(time.UnixMicro(r.l.nowMicro()))
	}
}

// cancelAt gives the reservation back, if it can be given back exactly: when
// its time to act is still ahead and no later reservation or admission for
// the key has been queued behind it. The key's state is then as if it had
// never been made. A reservation with others behind it keeps its slot, which
// stays unused: moving the later ones is impossible, since their times were
// promised, and reusing the slot would break the spacing. Cancel at most once.
func (r *Reservation) cancelAt(now time.Time) {
	e := r.e
	if e == nil {
		return
	}
	r.e = nil
	us := now.UnixMicro()
	e.Lock()
	defer e.Unlock()
	if e.Evicted() || e.Value.lim.Load() != r.lim || us >= r.at {
		return
	}
	var tmp state
	v, w := hold(e, r.lim, &tmp)
	defer release(e, r.lim, v, w)
	if v.at != r.tat || v.count != r.frac {
		return
	}
	f, a := v.count-r.n*r.lim.el, v.at
	if f < 0 {
		k := usec.CeilDiv(-f, r.lim.rl)
		a, f = a-k, f+k*r.lim.rl
	}
	v.at, v.count = a, f
}

// Wait blocks until a request of cost n for key may act, and returns nil; or
// returns an error, having consumed nothing, when the context ends first or
// its deadline is nearer than the request's time to act (ErrLimitExceeded,
// without waiting), or when the key cannot be shaped (ErrInvalidConfig for
// a window algorithm,
// ErrLimitExceeded for costs above the burst or a full key table). Wait
// measures the delay with the Limiter's clock and sleeps on a real timer.
func (l *Limiter) Wait(ctx context.Context, key string, n int64) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	now := l.nowMicro()
	maxDelay := maxWindow
	if dl, ok := ctx.Deadline(); ok {
		maxDelay = dl.Sub(time.UnixMicro(now))
	}
	r, err := l.reserve(now, key, n, maxDelay)
	if err != nil {
		return err
	}
	if !r.OK {
		if r.Reason == ReasonLimited {
			return fmt.Errorf("%w: the request could act in %v, after the context's deadline", ErrLimitExceeded, r.Delay)
		}
		return fmt.Errorf("%w: %s", ErrLimitExceeded, r.Reason)
	}
	if r.Delay <= 0 {
		return nil
	}
	t := time.NewTimer(r.Delay)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		r.cancelAt(time.UnixMicro(l.nowMicro()))
		return ctx.Err()
	}
}
