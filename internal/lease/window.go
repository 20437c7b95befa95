package lease

import "github.com/hybridlimit/hybridlimit/local"

// The window algorithms' decisions (fixed window, sliding window counter,
// sub-window counter): a grant per window, counted against as requests come,
// and the window state rolled forward as time passes.

// windowNow returns node time now as Redis time, with the window state
// rolled forward to it. A reply may move the key's offset back across a
// window boundary the lease has already crossed: its window stays, and the
// time reads as that window's start, so that a decision counts, and says it
// counts, in the window whose grant it uses.
func (k *Lease) windowNow(r *Rule, now int64) int64 {
	rnow := now + k.offset
	k.roll(r, rnow-rnow%r.w)
	return max(rnow, k.wid)
}

// roll moves the window state forward to the window w (Redis time): the
// current window becomes the previous one, the next the current.
func (k *Lease) roll(r *Rule, w int64) {
	switch {
	case w <= k.wid:
		return
	case k.wid != 0 && w == k.wid+r.w:
		if r.sub { // the sub-windows before this one, the oldest kept: an upper bound until the next reply
			k.prevR += k.others + max(k.used, k.granted)
		} else {
			k.prevR = k.others + max(k.used, k.granted)
		}
		k.pused, k.packed = k.used, k.acked
		carry := k.next
		k.flags &^= flagExhaustedPrev | flagCarried
		if r.counter && k.room >= 0 {
			// The counter's grant unused in the window just over carries
			// into this one: Redis moves it at the next exchange
			// (lease_window.lua) and weighs it in full until then. Only a
			// grant Redis told of in that window: a carry not yet moved
			// carries no further.
			carry = max(k.granted-k.used, 0)
			if carry > 0 {
				k.flags |= flagCarried
			}
		}
		k.granted, k.used, k.acked, k.next = carry, 0, 0, 0
		k.others, k.room = 0, -1
		if k.flags&flagExhausted != 0 {
			k.flags |= flagExhaustedPrev
		}
	default: // two or more windows on, or the first window
		if k.wid != 0 && w == k.wid+2*r.w {
			k.pused, k.packed = 0, 0 // the window in between: nothing used
			k.granted, k.used, k.acked, k.next = 0, 0, 0, 0
		} else {
			// Anything still unreported of a window long past is dropped:
			// Redis no longer accepts reports for it.
			k.pused, k.packed = 0, 0
			k.granted, k.used, k.acked, k.next = 0, 0, 0, 0
		}
		if !r.sub || w >= k.wid+r.ws*r.w { // the sub-window counter's earlier ones may still count
			k.prevR = 0
		}
		k.others, k.room = 0, -1
		k.flags &^= flagExhaustedPrev | flagCarried
	}
	k.wid = w
	k.flags &^= flagExhausted | flagRecover
}

// decideWindow is Decide for a window rule: within the window's grant, or,
// without one, the allowance.
func (k *Lease) decideWindow(r *Rule, now, n int64, charge bool) (Verdict, Signal) {
	rnow := k.windowNow(r, now)
	end := k.wid + r.w - rnow
	if used := k.used + n; used <= k.granted {
		if charge {
			k.used = used
		}
		// Sync early when what is left lasts less than a sync interval, or
		// when a grant made on a guess is half used or MinGap old: that
		// exchange measures the key's demand, which the others' grants
		// wait for (the scripts count an unknown demand for 2 × MinGap;
		// after that, the guess is an ordinary grant, renewed as it runs
		// low, and a key seen again long after pays no exchange for it).
		// And once a carried grant is used: until the exchange moves it,
		// Redis holds it in the window before, which the next window no
		// longer weighs, so its use must not wait for the window's end.
		ahead := r.interval
		if r.sub {
			ahead = min(ahead, end) // a sub-window's grant lasts its sub-window (Request)
		}
		low := k.granted-used < k.demand*ahead/r.w+1 ||
			k.flags&flagGuess != 0 && now-k.lastSync < 2*r.minGap && (2*used >= k.granted || now-k.lastSync >= r.minGap) ||
			k.flags&flagCarried != 0
		if low {
			k.flags |= flagUrgent
		}
		return Verdict{Remaining: k.remaining(r, rnow), Reset: end}, syncIf(low || k.flags&flagSynced == 0)
	}
	if a := r.allowance(); k.flags&(flagExhausted|flagExhaustedPrev) == 0 && !(r.counter && k.granted > 0) &&
		!k.Recovering(r, now) && k.used+n <= k.granted+a && k.roomFor(r, min(n+a*max(r.Nodes(), 1), r.limit)) {
		// The allowance: a key without a lease (new to this node, or new in
		// this window, or, but for the counter, whose grant is used up)
		// admits up to the allowance unreported, as debt reported at the
		// next exchange, unless the node saw it exhausted in this window or
		// the last, or an outage touched this window (Recovering). Once
		// Redis has counted the debt, its room says whether more may come.
		// The counter's window is never said to be exhausted (its budget
		// grows with every step), so a used-up grant of it waits for its
		// top-up: the room its last reply told is being granted to the
		// other nodes, and every node spending it again would admit up to
		// nodes × allowance past the limit.
		used := k.used + n
		if charge {
			k.used = used
		}
		if k.flags&flagSynced == 0 || used-k.granted >= a/2+1 {
			k.flags |= flagUrgent
		}
		return Verdict{Remaining: k.remaining(r, rnow), Reset: end}, SignalSync
	}
	k.flags |= flagUrgent
	// A refusal says what the node may admit at once, less than n: never
	// the cluster's estimate, which a node without a grant cannot use.
	held := max(k.granted-k.used, 0)
	if k.flags&flagExhausted != 0 {
		retry := end
		if r.counter {
			retry = r.counterRetry(k, rnow, n)
		}
		return Verdict{Reason: local.ReasonLimited, Remaining: min(k.remaining(r, rnow), held), Reset: end, Retry: retry}, SignalSync
	}
	k.short = max(k.short, n)
	if r.global && k.room >= 0 && k.room < n {
		// The region's part is spent until its exchanger brings more,
		// across regions: the request does not wait for the exchange.
		return Verdict{Reason: local.ReasonNoLease, Remaining: held, Reset: end, Retry: r.minGap}, SignalSync
	}
	return Verdict{Reason: local.ReasonNoLease, Remaining: held, Reset: end, Retry: r.minGap}, SignalSync | SignalWait
}

// roomFor reports whether, by what the last reply said, the window has room
// for x more beyond what is committed: the allowance is for keys far from
// their limit. For a window with no reply yet, the previous window tells:
// the counter starts with it at full weight; the fixed window with all of
// its budget, but a key that came within x of its limit there is not far
// from it.
func (k *Lease) roomFor(r *Rule, x int64) bool {
	switch {
	case k.room >= 0:
		return k.room-max(k.used-k.granted, 0) >= x
	case r.counter || r.sub:
		return k.prevR+max(k.used, k.granted)+x <= r.limit
	default:
		return max(k.used, k.granted)+x <= r.limit && k.prevR+x <= r.limit
	}
}

// remaining estimates what the whole cluster may still admit in the
// current window: the limit, less what the others held at the last sync,
// less what this node used (and, for the counter, the previous window's
// weight).
func (k *Lease) remaining(r *Rule, rnow int64) int64 {
	budget := r.limit
	if r.sub { // what the earlier sub-windows of the window left
		budget = max(r.limit-k.prevR, 0)
	}
	if r.counter {
		left := r.ws - (rnow-k.wid)/r.step
		budget = max(r.limit*r.ws-k.prevR*left, 0) / r.ws
	}
	// At most the budget: a reply's figures may disagree (others counted
	// with a grant Redis since revoked), never the estimate with the limit.
	return min(max(budget-k.others-max(k.used, k.granted), 0)+max(k.granted-k.used, 0), budget)
}

func (r *Rule) counterRetry(k *Lease, rnow, n int64) int64 {
	// When the previous window's weight would leave room for n, were the
	// current one's commitments to stay as they are; the next window's start
	// otherwise. An estimate: leases move in between.
	cur := k.others + max(k.used, k.granted)
	room := r.limit - cur - n
	end := k.wid + r.w - rnow
	if room < 0 || k.prevR == 0 {
		return end
	}
	at := k.wid + (r.ws-room*r.ws/k.prevR)*r.step
	return max(min(at-rnow, end), 1)
}
