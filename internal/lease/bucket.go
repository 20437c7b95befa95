package lease

import (
	"math/bits"

	"github.com/hybridlimit/hybridlimit/internal/usec"
	"github.com/hybridlimit/hybridlimit/local"
)

// The bucket algorithms' decisions (token bucket, leaky bucket, GCRA): a
// share of the rate and burst, refilled locally until it expires, and
// without one, the cold-start allowance and prepaid tokens.

// decideBucket is Decide for a bucket rule: from the share's tokens while
// it is in force; without one, from prepaid tokens or the allowance.
func (k *Lease) decideBucket(r *Rule, now, n int64, charge bool) (Verdict, Signal) {
	rnow := now + k.offset
	if k.expiry-r.safety > rnow {
		k.refill(r, rnow)
		if left := k.tokens - n; left >= 0 {
			if charge {
				k.tokens = left
			}
			v := Verdict{Remaining: min(left+max(k.others, 0), r.burst), Reset: k.fullIn(r)}
			switch {
			// Early when the share's regular renewal was missed (Due renews
			// it two intervals before its expiry), or half of a share granted
			// on a guess is used: that exchange measures the key's demand.
			case k.expiry-rnow < r.interval || k.flags&flagGuess != 0 && 2*left < k.burst:
				k.flags |= flagUrgent
			case left < k.demand*r.interval/r.w+1: // the tokens last less than a sync interval
				k.flags |= k.askEarly(r, rnow, 1)
			default:
				return v, 0
			}
			return v, SignalSync
		}
		if k.expiry-rnow < r.interval || k.flags&flagGuess != 0 {
			k.flags |= flagUrgent
		} else {
			k.flags |= k.askEarly(r, rnow, n-k.tokens)
		}
		retry := r.minGap
		if k.rate > 0 {
			retry = max(usec.CeilDiv((n-k.tokens)*r.w-k.rem, k.rate), 1)
		}
		v := Verdict{Reason: local.ReasonLimited, Remaining: k.tokens, Reset: k.fullIn(r), Retry: retry}
		// An exchange may admit it: the share was a guess, whose correction
		// is on its way; or the key is under its limit (a burst past the
		// share's part of the burst, a share sized on a quiet spell) and
		// the pool, by the last reply, holds the tokens. When the nodes'
		// demand reaches the rate, the shares ration it: a refusal here is
		// an admission elsewhere, and the pool's trickle not worth a wait.
		if k.flags&flagGuess != 0 || k.flags&flagRationed == 0 && k.poolNow(r, rnow) >= n-k.tokens {
			k.flags |= flagUrgent
			return v, SignalSync | SignalWait
		}
		return v, SignalSync
	}
	// No share, or it expired.
	if k.rate > 0 || k.burst > 0 || k.tokens > 0 {
		k.endShare(r, rnow)
	}
	// The allowance: a new key, or one without a share whose pool had room
	// at the last reply (a quiet node, given no share, or one whose share
	// ran out), admits up to ε × burst ÷ nodes as debt, charged to the pool
	// at the next exchange; never more than that unacknowledged, so the
	// nodes together never owe more than ε × burst + nodes.
	if left := k.prepaid - n; left >= 0 {
		// Tokens a reply prepaid for the requests that waited for it.
		if charge {
			k.prepaid = left
		}
		return Verdict{Remaining: min(left+max(k.poolNow(r, rnow), 0), r.burst)}, 0
	}
	a := r.allowance()
	out := k.debt - k.debtSent
	pool := k.poolNow(r, rnow)
	synced := k.flags&flagSynced != 0
	if a > 0 && out+n <= a && (!synced || pool-out >= n) {
		if charge {
			k.debt += n
		}
		if !synced || out+n >= a/2+1 {
			k.flags |= flagUrgent
		}
		if !synced {
			pool = r.burst // nothing known of the others yet: the whole burst
		}
		return Verdict{Remaining: min(max(pool-out-n, 0), r.burst)}, SignalSync
	}
	return k.refuseUnshared(r, rnow, n, out, pool)
}

// endShare ends a share that just expired, at Redis time rnow: what it held
// unused at its end counts, with the pool the last reply told of, as the
// room the key has, and its remainder goes back (lost). Once per share, so
// out of decideBucket's body.
func (k *Lease) endShare(r *Rule, rnow int64) {
	k.refill(r, min(rnow, k.expiry-r.safety))
	k.others = max(k.others, 0) + k.tokens
	k.lost += k.tokens*r.w + k.rem
	k.tokens, k.rem, k.rate, k.burst = 0, 0, 0, 0
}

// refuseUnshared refuses a request of cost n of a key without a share,
// beyond its prepaid tokens and allowance, at Redis time rnow: out is its
// debt not yet reported, pool the pool's tokens as poolNow estimates them.
// A slow path, which asks for an exchange: out of decideBucket's body.
func (k *Lease) refuseUnshared(r *Rule, rnow, n, out, pool int64) (Verdict, Signal) {
	k.flags |= flagUrgent
	if k.flags&flagSynced != 0 && pool-out < n && rnow-k.pat < r.interval {
		// The pool, by a recent reply, has not the tokens: no exchange is
		// waited for, and the refusal holds until the pool refills them, at
		// the rate nobody held then. (An older reply says little: the
		// shares it saw held may have ended since.)
		retry := r.minGap
		if k.prate > 0 {
			retry = max(usec.CeilDiv((out+n-pool)*r.w, k.prate), 1)
		}
		return Verdict{Reason: local.ReasonNoLease, Remaining: max(pool-out, 0), Retry: retry}, SignalSync
	}
	k.short = max(k.short, n)
	return Verdict{Reason: local.ReasonNoLease, Retry: r.minGap}, SignalSync | SignalWait
}

// askEarly is the flag a bucket key short of tokens sets to ask for an
// exchange: flagUrgent, unless its share is too small for one to matter: its
// burst within the allowance (what an exchange adds is at most that), the
// last reply brought nothing (no growth of the share, no tokens: a key over
// its limit, its rate all held in shares), and the pool, by that reply, has
// not refilled the need tokens since. The share's renewal, at a regular
// round, then reports its demand: early, such a key would ask at every gap
// for nothing.
func (k *Lease) askEarly(r *Rule, rnow, need int64) uint32 {
	if k.flags&flagDry != 0 && k.burst <= r.allowance() && k.poolNow(r, rnow) < need {
		return 0
	}
	return flagUrgent
}

// poolNow estimates the pool's tokens at rnow (Redis time): as the last
// reply told, refilled since at the rate nobody held then, up to its
// capacity. A quiet key's pool, drained by shares since given back, has
// refilled long before its next request; read as of the reply, it would
// refuse what an exact limiter admits. Others' debt since is not seen:
// the allowance still bounds what the node admits unreported.
func (k *Lease) poolNow(r *Rule, rnow int64) int64 {
	if k.prate <= 0 || rnow <= k.pat || k.others >= k.pcap {
		return k.others
	}
	elapsed := min(rnow-k.pat, usec.CeilDiv((k.pcap-k.others)*r.w, k.prate))
	return min(k.others+elapsed*k.prate/r.w, k.pcap)
}

// refill brings the local tokens up to rnow (Redis time).
func (k *Lease) refill(r *Rule, rnow int64) {
	if rnow <= k.last {
		return
	}
	if k.rate > 0 && k.tokens < k.burst {
		elapsed := min(rnow-k.last, usec.CeilDiv((k.burst-k.tokens)*r.w-k.rem, k.rate))
		num := k.rem + elapsed*k.rate
		k.tokens += num / r.w
		k.rem = num % r.w
		if k.tokens >= k.burst {
			k.tokens, k.rem = k.burst, 0
		}
	}
	k.last = rnow
}

// fullIn is how long the local bucket takes to fill up: its share of the
// reset-after.
func (k *Lease) fullIn(r *Rule) int64 {
	if k.rate == 0 || k.tokens >= k.burst {
		return 0
	}
	return usec.CeilDiv((k.burst-k.tokens)*r.w-k.rem, k.rate)
}

// rescale turns a bucket share granted under o into the same fraction of
// r's rate and burst where r lowered them, at Redis time rnow, until the
// exchange under r replaces it: the nodes' fractions sum to at most one, so
// their shares stay within r's, and a lowered limit holds at once rather
// than a round trip later. The tokens held keep their fraction of the
// share's burst. A raised rate or burst waits for the exchange: tokens
// Redis did not grant would be charged to the bucket's later refills.
func (k *Lease) rescale(o, r *Rule, rnow int64) {
	k.flags |= flagScaled
	if k.expiry-o.safety <= rnow || o.limit <= 0 || o.burst <= 0 {
		return // no share in force: nothing granted under o to carry
	}
	k.refill(o, rnow)
	if r.limit < o.limit {
		k.rate, k.rem = mulDiv(k.rate, r.limit, o.limit), 0
	}
	if r.burst < o.burst {
		k.tokens = mulDiv(k.tokens, r.burst, o.burst)
		k.burst = mulDiv(k.burst, r.burst, o.burst)
	}
}

// mulDiv returns ⌊min(a, c) × b ÷ c⌋ for a, b ≥ 0 and c > 0: the product
// may pass 2^63, the quotient, at most b, does not.
func mulDiv(a, b, c int64) int64 {
	hi, lo := bits.Mul64(uint64(min(a, c)), uint64(b))
	q, _ := bits.Div64(hi, lo, uint64(c))
	return int64(q)
}
