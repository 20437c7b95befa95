package lease

import "github.com/hybridlimit/hybridlimit/internal/usec"

// The part of a sync round that is about one key: whether it is due, what
// it asks Redis for, and what it makes of the reply. The syncer holds the
// entry's lock around each call.

// Report is a node's use in one window, as it reports it: absolute, so that
// a retried report changes nothing.
type Report struct {
	Window int64 // the window's start (Redis time); 0 for none
	Used   int64
}

// Request is one key's exchange with Redis, built by Lease.Request: what
// the lease scripts take, and what their reply is applied against.
type Request struct {
	Bucket  bool  // a bucket rule's exchange; a window rule's otherwise
	SentAt  int64 // node time it was sent at: built at, until the syncer sets it as it sends (the reply's clock is measured from it)
	Now     int64 // Redis time as the node estimates it
	Release bool  // the node gives back what it holds unused
	Demand  int64 // requests per window; DemandUnknown when not measured yet
	Nodes   int64 // the live nodes as the node counts them
	Horizon int64 // how long a lease is sized to last (µs)

	// Windows (fixed window, sliding window counter).
	WantCur  int64  // the total the node wants granted in the current window
	WantNext int64  // what it wants granted in the next one; 0 for none
	Prev     Report // its use in the previous window
	Cur      Report // its use in the current window
	GuessTTL int64  // how long an unknown demand counts (µs; 2 × MinGap)
	PaceSpan int64  // how long a paced grant lasts at the node's demand (µs; 3 × PaceGap)
	WaitCur  int64  // the total it needs granted at once for the requests waiting for this exchange; 0 for none

	// Buckets (token bucket, leaky bucket, GCRA).
	Seq       int64 // the request's sequence number: debt is applied once per number
	Tokens    int64 // the tokens the node holds now; on a release, those it hands back
	Debt      int64 // what it admitted without a share since the last report
	Rate      int64 // the share it holds: rate per window,
	Burst     int64 // ... burst,
	Expiry    int64 // ... and expiry (Redis time)
	Allowance int64 // its cold-start allowance: a demand within it over a horizon gets no share
	Want      int64 // the tokens requests waiting for this exchange need: a share's burst is at least that; without one, they are prepaid
	Return    int64 // the prepaid tokens the node hands back unused
}

// WindowReply is what the window lease script answers.
type WindowReply struct {
	Now           int64 // Redis time it ran at
	Window        int64 // Redis's current window
	Epoch         int64 // the epoch of the key's state
	Granted       int64 // the node's grant in the current window
	Used          int64 // the node's use there as stored
	Committed     int64 // the window's budget committed, all nodes
	NextGranted   int64 // the node's grant in the next window
	PrevCommitted int64 // the previous window's budget committed
	Revoked       bool  // the limit changed: the grants are void
	Exhausted     bool  // the node wanted more, and nothing is left until the window ends
	Live          int64 // the key's live nodes
	Room          int64 // the current budget less what is committed
	Paced         bool  // the node's grant, in this window or ahead in the next, was paced
}

// BucketReply is what the bucket lease script answers.
type BucketReply struct {
	Now      int64 // Redis time it ran at
	Epoch    int64 // the epoch of the key's state
	Rate     int64 // the node's share: rate per window,
	Burst    int64 // ... burst,
	Expiry   int64 // ... and expiry (Redis time)
	Grant    int64 // tokens granted
	Pool     int64 // the pool's tokens
	PoolRate int64 // the pool's rate
	PoolCap  int64 // the pool's capacity
	Revoked  bool  // the limit changed: the tokens held are void
	Live     int64 // the key's live nodes
	Rationed bool  // the live nodes' demand reaches the rate: the shares ration it
}

// DemandUnknown is the demand a key's first exchange reports when it came
// too soon after the key's first request to measure one (Request): the
// lease scripts then count the node at the average demand, and grant it a
// quarter of that claim or share until its next exchange measures it.
const DemandUnknown = -1

// TakeFirst clears the mark of a key on the list of the next first-lease
// round, which the caller took it from.
func (k *Lease) TakeFirst() { k.flags &^= flagFirst }

// Activate marks a key handed over as in the syncer's set of keys it looks
// after.
func (k *Lease) Activate() { k.flags = k.flags&^flagQueued | flagActive }

// Deactivate marks a key as out of the syncer's set: its next signal hands
// it over again.
func (k *Lease) Deactivate() { k.flags &^= flagActive | flagSoon | flagLeft }

// Seen records that the syncer looked at the key: it leaves the list of
// keys for an early round, and its next urgent signal puts it back.
func (k *Lease) Seen() { k.flags &^= flagSoon }

// SetLeft records whether the key is on the syncer's list of keys a
// round's budget left for the next: the rounds send them in turn, without
// looking at them again.
func (k *Lease) SetLeft(left bool) {
	if left {
		k.flags |= flagLeft
	} else {
		k.flags &^= flagLeft
	}
}

// Left reports whether the key is on the syncer's list of keys left for
// the next round (SetLeft).
func (k *Lease) Left() bool { return k.flags&flagLeft != 0 }

// InFlight reports whether a request is out for the key.
func (k *Lease) InFlight() bool { return k.flags&flagInFlight != 0 }

// Answered records that the key's request came back, answered or failed.
func (k *Lease) Answered() { k.flags &^= flagInFlight }

// Fault records that Redis answered the key's request with an error, not
// a lease (a key of another type under the keyspace's prefix, a script
// error): the requests waiting for it are answered, and until an exchange
// succeeds the failure policy decides what the key's lease does not
// cover (Faulted).
func (k *Lease) Fault() {
	k.flags |= flagFault
	k.got = k.sent
}

// Unreach records that the key's exchange found Redis out of reach: on a
// Cluster, its master may be down while the others answer.
func (k *Lease) Unreach() { k.flags |= flagUnreached }

// Unreached reports whether the key's last exchange found Redis out of
// reach (Unreach).
func (k *Lease) Unreached() bool { return k.flags&flagUnreached != 0 }

// Faulted reports whether Redis answered the key's last exchange with an
// error (Fault).
func (k *Lease) Faulted() bool { return k.flags&flagFault != 0 }

// Dormant reports whether the key holds no grant and no share and has
// nothing unreported: it needs no looking after until its next request.
func (k *Lease) Dormant() bool { return k.holdsNothing() && !k.unreported() }

// holdsNothing reports whether the lease holds no grant and no share.
func (k *Lease) holdsNothing() bool {
	return k.granted <= k.used && k.next == 0 && k.rate == 0 && k.burst == 0 && k.prepaid == 0 && k.lost < k.span
}

// unreported reports whether the node admitted what Redis does not know of.
func (k *Lease) unreported() bool {
	return k.used > k.acked || k.pused > k.packed || k.debt > k.debtSent
}

// Due reports whether k needs an exchange at node time now.
func (k *Lease) Due(r *Rule, now int64) bool {
	if k.wait > 0 {
		return true // requests wait for it
	}
	if r.Removed() {
		// The rule is gone: what the key holds goes back and what it used
		// is reported (Request), until it holds and owes nothing.
		return !k.Dormant()
	}
	gap := now - k.lastSync
	if k.flags&flagSynced == 0 { // a new key: fetch its first lease at once
		return gap >= r.minGap || k.flags&flagSent == 0
	}
	idle := now-k.lastUse > r.idleRelease
	urgent := k.flags&flagUrgent != 0 && elapsed(gap, r.minGap)
	regular := elapsed(gap, r.interval)
	rnow := now + k.offset
	if r.buckets {
		renew := !idle && k.expiry-rnow < 2*r.interval
		switch {
		// Debt to report, a shrunk share to confirm, or a hand-back that is
		// over (the whole share again).
		case k.debt > k.debtSent, k.prepaid > 0, k.lost >= r.w, k.flags&flagNext != 0, k.flags&flagCut != 0 && r.handingBack(rnow, true) == 0:
			return regular || urgent
		case idle:
			return regular && (k.rate > 0 || k.burst > 0)
		default:
			return urgent || (regular && renew)
		}
	}
	k.roll(r, rnow-rnow%r.w)
	// Use within a grant needs no report: Redis counts the grant. A sync
	// is for debt (use beyond the grant), a lease running low, or the next
	// window's grant when the key is busy enough to want one; a key that
	// is exhausted waits for the next window.
	debt := k.used > k.granted && k.used > k.acked || k.pused > k.packed
	busy := !idle && usec.CeilDiv(k.demand*r.horizon, r.w) >= 2
	preGrant := busy && k.next == 0 && rnow >= k.wid+r.w-r.horizon
	if k.flags&flagExhausted != 0 {
		return regular && (debt || preGrant)
	}
	return urgent || (regular && (debt || preGrant || idle && k.releases(r, rnow)))
}

// releases reports whether an idle window key gives its grant back (Due):
// in a window longer than a claim's span (5 horizons: shorter windows end
// soon enough), a sizable one, with time left. A small one ends with its
// window, and so does one within the allowance whose window's room, by the
// last reply, leaves no one short were every node to keep as much: the
// nodes then hold back at most the allowances, which the room kept for
// them anyway, and a key seen once takes one exchange, not two.
func (k *Lease) releases(r *Rule, rnow int64) bool {
	unused, nodes := k.granted-k.used, max(r.Nodes(), 1)
	return r.w > 5*r.horizon && unused >= max(r.limit/(100*nodes), 1) &&
		rnow < k.wid+r.w-2*r.interval && (k.room < 0 || k.room < unused*nodes || unused > r.allowance())
}

// elapsed reports whether gap, a key's time since its last sync by the
// node's clock, has reached want, less a tenth: the loop spaces its rounds
// by want on its timers, while the gap is read from a clock that may lag
// them by its resolution (a coarse clock's millisecond), and a key synced in
// one round must be due in the next rather than two rounds on.
func elapsed(gap, want int64) bool { return gap >= want-want/10 }

// Request builds k's exchange at node time now, final for the last one
// before the node leaves (every lease given back, as for a removed rule's
// keys: Rule.Remove), and marks k in flight: the caller sends it, then
// calls Answered, and applies the reply if one came.
func (k *Lease) Request(r *Rule, now int64, final bool) Request {
	unknown, guess := k.measureDemand(r, now)
	idle := now-k.lastUse > r.idleRelease
	release := final || idle || r.Removed()
	demand := k.demand
	k.flags &^= flagGuess
	if release {
		demand = 0
	} else if guess {
		if unknown {
			demand = DemandUnknown
		}
		k.flags |= flagGuess
	}
	k.lastSync = now
	k.sent++
	k.flags = k.flags&^(flagUrgent|flagNext) | flagSent | flagInFlight
	rnow := now + k.offset
	q := Request{SentAt: now, Now: rnow, Release: release, Demand: demand, Nodes: r.Nodes(), Horizon: r.horizon}
	if r.buckets {
		k.bucketRequest(r, &q)
	} else {
		k.windowRequest(r, &q)
	}
	return q
}

// measureDemand updates k's demand, requests per window, from those
// decided since its last sync, at node time now, and starts the count
// afresh. It reports whether the demand could not be measured (unknown: a
// new key's exchange too soon after its first request) and whether the
// lease to come is a guess (guess: any new key's first measure).
func (k *Lease) measureDemand(r *Rule, now int64) (unknown, guess bool) {
	if k.lastSync > 0 && (now > k.lastSync || k.flags&flagSynced == 0) {
		hits, elapsed := k.hits, now-k.lastSync
		if k.flags&flagSynced == 0 {
			// A new key: the count started at its first request, which
			// does not measure the rate; the ones after it do, over at
			// least MinGap, as a few requests in a few microseconds say
			// little. An exchange sooner than that says the demand is
			// unknown (DemandUnknown), and the next one measures it,
			// unless the key is taken as quiet (quietAtFirst). Either way
			// the lease is a guess, corrected in a first-lease round if it
			// runs low.
			hits = max(hits-1, 0)
			if gap := r.minGap; elapsed < gap {
				unknown, guess, elapsed = !k.quietAtFirst(r), true, gap
			}
		}
		if !unknown {
			if k.demand == 0 {
				k.demand = hits * r.w / elapsed
			} else {
				// A moving average over about one Interval, whatever the
				// syncs' spacing: syncs a MinGap apart measure a few
				// requests each, too few to size a share on; and for a key
				// a node sees seldom, over about its last four requests (up
				// to ten Intervals): one request just before a sync would
				// otherwise read as a rate many times the key's, and win it
				// a share of the bucket it then leaves unused while the
				// other nodes go short.
				span := min(max(4*r.w/max(k.demand, 1), r.interval), 10*r.interval)
				k.demand = (k.demand*span + hits*r.w + span/2) / (span + elapsed)
			}
		}
	} else if k.hits > 0 {
		k.demand = max(k.demand, k.hits)
	}
	k.hits = 0
	return unknown, guess
}

// bucketRequest fills in q, built by Request, with what a bucket rule's
// exchange reports: the debt, the tokens and share held (all handed back
// on a release), and what the requests waiting for it want.
func (k *Lease) bucketRequest(r *Rule, q *Request) {
	rnow := q.Now
	k.seq++
	q.Bucket, q.Seq = true, k.seq
	q.Debt = k.debt - k.debtSent
	if q.Release {
		// The node stops using its share now and hands back the tokens
		// it holds, which the pool takes: a quiet key's tokens would
		// otherwise be lost at its share's expiry, and the pool, drained
		// by the grants of nodes that each used a few, would leave the
		// key short of what it may admit. It sends no share as held:
		// nothing is to stay committed.
		k.refill(r, min(rnow, k.expiry-r.safety))
		q.Tokens = k.tokens
		k.lost += k.rem
		k.tokens, k.rem, k.rate, k.burst, k.expiry = 0, 0, 0, 0, 0
	} else {
		k.refill(r, rnow)
		q.Tokens = k.tokens
	}
	q.Rate, q.Burst, q.Expiry, q.Allowance, q.Want = k.rate, k.burst, k.expiry, r.allowance(), max(k.wait, k.short)
	k.short = 0
	// Prepaid tokens still unused go back to the pool: their requests
	// were decided (or gave up) since the reply that brought them; and
	// so do the whole tokens the share made that the node lost.
	q.Return, k.prepaid = k.prepaid+k.lost/r.w, 0
	k.lost %= r.w
}

// windowRequest fills in q, built by Request, with what a window rule's
// exchange asks and reports: the grants it wants in the current window and
// the next, sized on q.Demand, and its use in both.
func (k *Lease) windowRequest(r *Rule, q *Request) {
	rnow := q.Now
	k.roll(r, rnow-rnow%r.w)
	needFor := func(span int64) int64 { return max(usec.CeilDiv(max(q.Demand, 0)*span, r.w), 1) } // the demand over span
	need := needFor(r.horizon)
	needNext := need
	if left := k.wid + r.w - rnow; r.sub && left < r.horizon {
		// A sub-window's grant need last only until the sub-window ends
		// (and half an interval more, so that it does not run low at
		// once); the rest of the horizon is the next one's. A horizon in
		// each would hold twice what the key needs, out of the thin room
		// the earlier sub-windows leave under the limit.
		need = needFor(min(left+r.interval/2, r.horizon))
		needNext = needFor(min(r.horizon-left, r.w))
	}
	// What waits for this exchange (Await) is wanted at once, before
	// anything the script keeps for the others or paces, and so is the
	// largest request refused for want of a lease since the last exchange
	// (it comes again); the demand's need on top.
	if asap := max(k.wait, k.short); asap > 0 {
		q.WaitCur = k.used + asap
	}
	q.WantCur = k.used + max(k.wait, k.short) + need
	k.short = 0
	if q.Release {
		q.WantCur = 0
	} else if rnow >= k.wid+r.w-r.horizon {
		q.WantNext = needNext
	}
	q.Prev, q.Cur = Report{k.wid - r.w, k.pused}, Report{k.wid, k.used}
	q.GuessTTL, q.PaceSpan = 2*r.minGap, 3*r.paceGap
}

// sync takes the clock of a reply at Redis time redisNow to a request sent
// at q.SentAt and received at node time recv, and reports whether the
// key's exchange before it found Redis out of reach (Unreach).
func (k *Lease) sync(r *Rule, q *Request, redisNow, recv int64) (unreached bool) {
	unreached = k.flags&flagUnreached != 0
	k.rule = r
	if !r.virtual { // the scripts ran on the node's clock: nothing to learn
		k.offset = r.cluster.Measure(redisNow-(q.SentAt+recv)/2, max(recv-q.SentAt, 0)/2, recv)
	}
	// The exchange answered whatever made the key urgent while it was out;
	// the next decision asks again if the new lease runs low too. (A lease
	// granted on a guess would otherwise be corrected at once, on a handful
	// of requests, by a first-request flag set before the reply.)
	k.flags = k.flags&^(flagUrgent|flagFault|flagScaled|flagUnreached) | flagSynced
	k.got = k.sent
	return unreached
}

// ApplyWindow takes the reply v to the window request q, made under r, into
// k. recv is the node time it arrived.
func (k *Lease) ApplyWindow(r *Rule, q *Request, v *WindowReply, recv int64) {
	unreached := k.sync(r, q, v.Now, recv)
	held := max(k.granted, k.used)
	wt := v.Window
	k.epoch = v.Epoch
	k.roll(r, wt) // Redis may be a window ahead of what this node saw
	switch wt {
	case k.wid: // Redis's current window is the node's
		switch q.Cur.Window {
		case wt:
			// Used is the node's use there as Redis holds it: at least what
			// was sent, unless Redis lost it (restart, failover), in which
			// case the rest is reported again.
			k.acked = min(q.Cur.Used, v.Used)
			k.packed = max(k.packed, min(q.Prev.Used, k.pused))
		case wt - r.w:
			k.packed = max(k.packed, min(q.Cur.Used, k.pused))
		}
		k.granted, k.next = v.Granted, v.NextGranted
		k.others = v.Committed - max(v.Granted, v.Used)
		k.room = v.Room
		k.flags &^= flagExhausted | flagPaced | flagCarried
		if v.Exhausted {
			k.flags |= flagExhausted
		}
		if v.Paced {
			k.flags |= flagPaced
		}
	case k.wid - r.w:
		// The node's clock is ahead: Redis's current window is the node's
		// previous one, and its next the node's current.
		if q.Cur.Window == k.wid {
			// Its report of the window before moved the carried grant.
			k.acked = max(k.acked, q.Cur.Used)
			k.flags &^= flagCarried
		}
		k.packed = max(k.packed, min(v.Used, k.pused))
		k.granted = max(k.granted, v.NextGranted)
		k.others = 0
		// "Exhausted" speaks of Redis's current window, the node's
		// previous one: its refusal must not carry into the window the
		// node has begun.
		if v.Exhausted {
			k.flags |= flagExhaustedPrev
		}
	}
	if v.Revoked {
		k.granted, k.next = min(k.granted, k.used), 0
	}
	k.capAfterOutage(r, held, v.Now, unreached)
	k.prevR = v.PrevCommitted
}

// ApplyBucket takes the reply v to the bucket request q, made under r, into
// k. recv is the node time it arrived.
func (k *Lease) ApplyBucket(r *Rule, q *Request, v *BucketReply, recv int64) {
	unreached := k.sync(r, q, v.Now, recv)
	k.refill(r, v.Now)
	if v.Rate < k.rate || v.Burst < k.burst {
		// The share shrank: Redis keeps the old one committed, idle for
		// everyone, until this node's next request says it applied the new
		// one. Send it at the next regular round: shares move at most at
		// each renewal, and an early round for each move would double a
		// busy key's exchanges.
		k.flags |= flagNext
	}
	if (k.epoch != 0 && v.Epoch != k.epoch) || v.Revoked {
		k.tokens, k.rem, k.lost = 0, 0, 0 // what we held is gone with Redis's state, or revoked
	}
	k.epoch = v.Epoch
	k.flags &^= flagBegun // the next outage begins its part from this reply's
	k.debtSent += q.Debt
	rate, burst, grant := k.afterOutage(r, v, unreached)
	// A reply that neither grew the share nor granted tokens tells the key
	// its next early exchange would bring nothing more, unless the pool
	// refills (decideBucket).
	k.flags &^= flagDry | flagRationed
	if grant == 0 && rate <= k.rate && burst <= k.burst && k.rate > 0 {
		k.flags |= flagDry
	}
	if v.Rationed {
		k.flags |= flagRationed
	}
	k.rate, k.burst, k.expiry = rate, burst, v.Expiry
	if rate == 0 && burst == 0 {
		k.prepaid += grant // for the requests waiting for this reply
		grant = 0
		k.lost += k.rem // the share ended: its refill toward a token goes back
		k.rem = 0
	}
	k.tokens += grant
	if k.tokens > k.burst {
		k.lost += (k.tokens - k.burst) * r.w // above the smaller burst: back to the pool
		k.tokens = k.burst
	}
	if k.tokens >= k.burst {
		k.rem = 0
	}
	k.last = max(k.last, v.Now)
	k.others = v.Pool
	k.prate, k.pcap, k.pat = v.PoolRate, v.PoolCap, v.Now
}

// LastSync returns the node time of k's last exchange, or of its first
// request before any: the syncer serves the keys it cannot serve in one
// round in this order.
func (k *Lease) LastSync() int64 { return k.lastSync }
