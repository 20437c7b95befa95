package local

import (
	"math/bits"

	"github.com/hybridlimit/hybridlimit/internal/usec"
)

// Packed states.
//
// A Limiter decides for a key already held with no lock when its Limit's
// state fits in one 64-bit word: it loads the word, runs the algorithm on
// the state it unpacks, and installs the packed result with one
// compare-and-swap, retrying if another decision got in first. A mutex costs
// two locked instructions, a lock and an unlock; a compare-and-swap is one,
// and a rejection, which changes nothing, none. The fixed window, the sliding
// window counter and the three bucket algorithms pack whenever their
// parameters let every state they can reach fit (Limit.packed); the sliding
// window log never does.
//
// The words, for times up to maxMicros:
//
//	fixed window:            window index (start / window) << cb | count
//	sliding window counter:  window index << 2cb | count << cb | previous count
//	token/leaky bucket, GCRA: TAT·rl + fraction, the state's two numbers in
//	                         units of 1/rl µs
//
// with cb = bits.Len(Limit), since a count never passes Limit. The zero word
// is the zero state, every algorithm's initial state. The two top bits are
// never part of a state: wordLocked marks a word that a holder of the entry's
// lock is working on (multi-rule decisions, the shaper, eviction and
// conversions take the lock and then the word), and wordDead one whose entry
// is gone (evicted, or replaced by an entry under another limit). A dead
// word never changes again, and an entry's limit never changes while its
// word is read lock-free: a compare-and-swap that succeeds therefore always
// applies a transition computed under the limit the state is in.
const (
	// maxMicros is the latest time a Limiter decides at, in µs since the
	// epoch (2^53 − 1: in the year 2255); later times count as it. It bounds
	// what a packed state must hold.
	maxMicros  = 1<<53 - 1
	wordMax    = 1<<62 - 1 // the largest packed state
	wordLocked = 1 << 62
	wordDead   = 1 << 63
)

// clampTime brings a time in µs into the range a Limiter decides in.
func clampTime(us int64) int64 { return min(max(us, 0), maxMicros) }

// setPacking decides whether every state l can reach packs into a word
// below wordLocked, and sets l.packed and the field widths.
func (l *compiled) setPacking() {
	windows := bits.Len64(uint64(maxMicros / l.w)) // bits of a window index
	cb := bits.Len64(uint64(l.p.Quota))
	switch l.p.Algorithm {
	case FixedWindow:
		// An anchored window's start is any µs, which a word has no room for.
		l.packed = windows+cb <= 62 && !l.p.Anchored
		l.cb, l.cmask = uint8(cb), 1<<cb-1
	case SlidingWindowCounter:
		l.packed = windows+2*cb <= 62
		l.cb, l.cb2, l.cmask, l.hmask, l.cbw, l.w2 = uint8(cb), uint8(2*cb), 1<<cb-1, 1<<(2*cb)-1, uint64(cb), 2*l.w
	case TokenBucket, LeakyBucket, GCRA:
		// A TAT is at most ⌈τ/rl⌉ past the time of the decision that stored
		// it; the shaper, which queues past that, caps its delays at maxTAT.
		hi, lo := bits.Mul64(uint64(maxMicros+usec.CeilDiv(l.tau, l.rl)+1), uint64(l.rl))
		l.packed = hi == 0 && lo <= wordMax
		l.maxTAT = wordMax/l.rl - 1
	}
}

// unpack returns the state that the packed word w holds.
func (l *compiled) unpack(w uint64) state {
	switch l.p.Algorithm {
	case FixedWindow:
		return state{at: int64(w>>l.cb) * l.w, count: int64(w & (1<<l.cb - 1))}
	case SlidingWindowCounter:
		m := uint64(1)<<l.cb - 1
		return state{at: int64(w>>(2*l.cb)) * l.w, count: int64(w >> l.cb & m), prev: int64(w & m)}
	}
	if l.rl == 1 {
		return state{at: int64(w)}
	}
	return state{at: int64(w / uint64(l.rl)), count: int64(w % uint64(l.rl))}
}

// pack returns the word of s. from is a word s may have been unpacked
// from, or 0: a window start that did not move keeps from's index, which
// saves a division.
func (l *compiled) pack(s *state, from uint64) uint64 {
	switch l.p.Algorithm {
	case FixedWindow:
		return l.windowIndex(s.at, from>>l.cb)<<l.cb | uint64(s.count)
	case SlidingWindowCounter:
		return l.windowIndex(s.at, from>>(2*l.cb))<<(2*l.cb) | uint64(s.count)<<l.cb | uint64(s.prev)
	}
	return uint64(s.at)*uint64(l.rl) + uint64(s.count)
}

// windowIndex returns start / l.w, which is idx when idx is start's index.
func (l *compiled) windowIndex(start int64, idx uint64) uint64 {
	if int64(idx)*l.w == start {
		return idx
	}
	return uint64(start / l.w)
}

// Deciding on a word (Limiter.allow): the common case, an admission, is
// decided on the word itself by fixedAt, counterAt and bucketWord, which
// report false for anything else (a rejection, time run back), and then
// slowWord decides. A key among many is a cache miss away, and the fewer
// instructions a decision takes, the more of the next decisions' misses
// the processor overlaps with it, so the three are small enough to inline
// into allow (TestHotPathInlined holds them to it). The windows decide an
// admission in the word's window and one in a later window with the same
// instructions, without a branch: which of the two it is depends on the
// word, and is as good as random among many keys, so a branch there would
// often be mispredicted.
// FuzzDecideWord holds allow's words and verdicts to the general path.

// rejectWord decides on w a rejection of n at now, without unpacking it,
// or reports false. Rejections are what a flooded key sees, and allow
// leaves them to allowSlow, where this is cheaper than slowWord's unpack,
// decide and pack. Like fixedAt, counterAt and
// bucketWord, whose first lines it repeats (they must stay within the
// inliner's budget), it takes the word's window or a later one, and a
// bucket whose TAT is at most τ ahead of now; the rest (time run back, a
// queue the shaper made) it leaves to slowWord. The verdicts are the
// general path's own (fixedLimited, counterLimited, bucketLimited), and
// FuzzDecideWord holds them to it.
func (l *compiled) rejectWord(w uint64, now, n int64) (v verdict, ok bool) {
	switch l.p.Algorithm {
	case FixedWindow:
		idx := uint64(now) / uint64(l.w) // now ≥ 0 (clampTime)
		count := int64(w & l.cmask)
		if idx != w>>l.cb || count+n <= l.p.Quota {
			return
		}
		return l.fixedLimited(count, l.w-(now-int64(idx)*l.w)), true
	case SlidingWindowCounter:
		idx, _, left := l.counterNow(now)
		moved := idx - w>>l.cb2
		counts := w & l.hmask >> (l.cbw * moved)
		cur, prev := int64(counts>>l.cb), int64(counts&l.cmask)
		if int64(moved) < 0 || (l.max-cur-n)*l.ws-prev*left >= 0 {
			return
		}
		return l.counterLimited(int64(idx)*l.w, cur, prev, left, now, n), true
	case TokenBucket, LeakyBucket, GCRA:
		nowS := uint64(now) * uint64(l.rl)
		dl, need := int64(max(w, nowS)-nowS), n*l.el // dl: (TAT − now)·rl
		if dl > l.tau || dl+need <= l.tau {
			return
		}
		return l.bucketLimited(dl, need), true
	}
	return
}

// slowWord is the general path on a word: unpack, decide (committing), and
// pack. It returns the verdict and the resulting word, w itself when
// nothing changed (a rejection, or a cost of 0).
func (l *compiled) slowWord(w uint64, now, n int64) (verdict, uint64) {
	s := l.unpack(w)
	v := l.decide(&s, now, n, true)
	return v, l.pack(&s, w)
}

// fixedAt decides on a fixed window's word an admission of n > 0 at now,
// in the word's window or a later one, or reports false. It picks the
// count, the word's or none, without a branch; the division depends on now
// alone, and runs while the word is fetched.
func (l *compiled) fixedAt(w uint64, now, n int64) (v verdict, nw uint64, ok bool) {
	idx := uint64(now) / uint64(l.w) // now ≥ 0 (clampTime)
	count := w & l.cmask
	if idx != w>>l.cb {
		count = 0 // a later window (an earlier one is refused below)
	}
	if idx < w>>l.cb || int64(count)+n > l.p.Quota {
		return
	}
	return verdict{remaining: l.p.Quota - int64(count) - n, reset: l.w - (now - int64(idx)*l.w)}, idx<<l.cb | (count + uint64(n)), true
}

// counterNow returns what a sliding window counter's decision at now
// needs that does not depend on the key's word: now's window index, the
// reset of an admission (when the window after now's ends), and the weight
// left to the previous window, in steps.
func (l *compiled) counterNow(now int64) (idx uint64, reset, left int64) {
	idx = uint64(now) / uint64(l.w) // now ≥ 0 (clampTime)
	into := now - int64(idx)*l.w
	return idx, l.w2 - into, l.ws - int64(uint64(into)/uint64(l.step))
}

// counterAt decides on a sliding window counter's word an admission of
// n > 0 at now (as counterNow describes it), in the word's current window
// or a later one, or reports false. Like fixedAt, it moves the word to now's
// window without a branch: its two counts, current above previous, shift
// down by a count's width per window passed (a shift of 64 or more leaves
// 0), so that the current window becomes the previous one if it is the one
// just before, and nothing is carried over otherwise. Then, with cur
// counting n, the room left under the estimate, (limit − cur)·ws −
// prev·left, must not be negative (which also means cur ≤ limit, as
// prev·left is not). l.max is the limit.
func (l *compiled) counterAt(w, idx uint64, reset, left, n int64) (v verdict, nw uint64, ok bool) {
	moved := idx - w>>l.cb2
	counts := w & l.hmask >> (l.cbw * moved)
	room := (l.max-int64(counts>>l.cb)-n)*l.ws - int64(counts&l.cmask)*left
	if int64(moved) < 0 || room < 0 {
		return
	}
	return verdict{remaining: room / l.ws, reset: reset}, idx<<l.cb2 | counts + uint64(n)<<l.cb, true
}

// bucketWord decides on a bucket's word (TAT·rl + fraction) an admission of
// n > 0, or reports false. Its results are named for the bare return, which
// keeps it within the inliner's budget.
func (l *compiled) bucketWord(w uint64, now, n int64) (v verdict, nw uint64, ok bool) {
	nowS := uint64(now) * uint64(l.rl)
	tat := max(w, nowS)
	dl := int64(tat-nowS) + n*l.el // (TAT − now)·rl, after the request
	if dl > l.tau {
		return
	}
	return verdict{remaining: (l.tau - dl) / l.el, reset: usec.CeilDiv(dl, l.rl)}, tat + uint64(n*l.el), true
}
