package lease

import (
	"github.com/hybridlimit/hybridlimit/internal/keyname"
	"github.com/hybridlimit/hybridlimit/local"
)

// DigestSize is the size of a key's digest (Lease.Digest, keyname.Digest),
// which names it in Redis.
const DigestSize = keyname.DigestSize

// Lease is one key's state on a node in hybrid mode: the lease Redis granted
// it and what the node admitted against it. A hybrid limiter keeps one per
// (rule, key) in a keyed.Store, and holds the entry's lock around every
// method. The zero Lease is a key the node has never seen.
//
// Times are µs since the epoch. The node's own clock says now; the lease
// lives in Redis's time, now + offset, where offset is learned from the
// key's replies.
//
// Window algorithms (fixed window, sliding window counter) hold a count per
// window: granted, of which used; the sub-window counter holds one per
// sub-window, within what the window's earlier sub-windows left. Bucket algorithms hold a share of the rate
// and of the burst, refilled locally, until an expiry. A node admits only
// within its lease, and Redis never grants past the limit, so the nodes
// together never admit past it, save the cold-start allowance (a new key
// may admit ε × limit ÷ nodes while its first lease is fetched), which is
// reported as debt and charged.
type Lease struct {
	// Window algorithms: the current window (start, Redis time), what the
	// node was granted and used there and what Redis last acknowledged of
	// its use; the grant of the next window; the previous window's use.
	wid, granted, used, acked int64
	next                      int64
	pused, packed             int64
	// Buckets: local tokens, with remainder in 1/W token, refilled at rate
	// per W up to burst until expiry (Redis time); debt not yet reported.
	tokens, rem, last, rate, burst, expiry int64
	debt, debtSent                         int64
	prepaid                                int64 // tokens a reply took out of the pool for requests waiting without a share
	// lost is what the node's share made that the node could not keep,
	// in 1/W token: tokens above a smaller burst, and the refill toward a
	// token when the share ended. It goes back to the pool, in whole
	// tokens, at the next exchange: shares of a few tokens a second,
	// given and taken as demand moves, otherwise lose much of their rate.
	lost int64

	// What the last reply said of the others, for the estimate of what
	// remains: windows: committed by other nodes in the current window,
	// and committed in the previous one (the sub-window counter: in the
	// window's earlier sub-windows); buckets: the pool's tokens.
	others, prevR int64
	// Buckets: the pool's rate per W and capacity, and the Redis time of
	// the reply that told them, to age others (the pool) since (poolNow).
	prate, pcap, pat int64
	// room is the current window's budget less what is committed in it,
	// by the last reply in it; -1 when no reply came in this window yet.
	room int64

	offset   int64 // Redis time − node time, from this key's last reply (before it: the Cluster's last measured)
	epoch    int64 // Redis's epoch of the key's state
	seq      int64 // sequence number of the last request sent (buckets)
	lastSync int64 // node time the last request was sent, or of a new key's first request
	lastUse  int64 // node time of the last request decided
	hits     int64 // requests decided since the last sync
	wait     int64 // the cost of the requests waiting for the key's next exchange (Await)
	short    int64 // the largest cost refused for want of a lease since the last exchange: the next asks for at least that
	asked    int64 // requests decided since the last Tapped (refused ones too)
	demand   int64 // requests per window, averaged over about one Interval (0: not measured yet)
	span     int64 // the rule's window: how long after its last request a key is remembered

	rule *Rule // the rule of the last exchange: another one means the limit changed

	Digest [DigestSize]byte // the user key's digest, which names it in Redis

	flags uint32
	// sent and got count the key's requests sent and replies applied
	// (mod 2^16): a request that waits for an exchange sent after it began
	// to wait knows when its reply came (Exchanged).
	sent, got uint16
	woke      uint32 // Cluster.woken + 1 when the key last signalled an early round
}

const (
	flagQueued        = 1 << iota // handed to the syncer, not yet taken
	flagActive                    // in the syncer's set of keys to look after
	flagInFlight                  // a request is out
	flagExhausted                 // Redis said the window's budget is spent
	flagSynced                    // has had a reply: no cold-start allowance any more
	flagUrgent                    // wants a sync as soon as the minimum gap allows
	flagExhaustedPrev             // ... and was in the previous window
	flagSent                      // a request was sent: lastSync is its time, not the first request's
	flagGuess                     // the last request was sent before the key's demand could be measured
	flagFirst                     // on the syncer's list for the next first-lease round
	flagPaced                     // the last reply paced the current window's grant, or the next's ahead (SyncConfig.PaceGap)
	flagRecover                   // Redis answered again in a window an outage touched: no grant on top of use (capAfterOutage)
	flagCut                       // a bucket share cut to the policy's part in an outage's hand-back (afterOutage)
	flagCarried                   // the counter's grant is carried from the window before, not yet moved in Redis (roll)
	flagNext                      // wants a sync at the next regular round: a bucket share shrank (ApplyBucket)
	flagDry                       // the last bucket reply neither grew the share nor granted tokens (ApplyBucket)
	flagRationed                  // the last bucket reply said the nodes' demand reaches the rate (ApplyBucket)
	flagFault                     // Redis answered the last exchange with an error, not a lease (Faulted)
	flagScaled                    // a bucket share rescaled to a changed limit, until the exchange under it (rescale)
	flagUnreached                 // the last exchange found Redis out of reach (Unreached)
	flagSoon                      // on the syncer's list of keys for an early round (Rule.Notify, TakeSoon)
	flagLeft                      // due, but left by a round's budget for the next (Left)
	flagBegun                     // the failure policy's part of a bucket key began from what it held (PolicyStart)
)

// WantsFirst reports whether k's next exchange belongs in a first-lease
// round (synchook.Syncer.SyncFirstAt): requests wait for it (Await); it has
// had none yet; or its lease was granted
// on a guess, before its demand could be measured, and runs low; or its
// grant was paced and lasts less than two PaceGaps at its demand (a paced
// grant lasts three: the key asks as its arrivals use it, a burst sooner,
// and the round and its reply have a PaceGap to come).
// A bucket key seen only once waits for an ordinary round: its first
// exchange would take it as quiet (Request), and a node that said so
// of a busy key would leave the first node to measure its demand the whole
// rate, held for a lease's life.
func (k *Lease) WantsFirst(r *Rule) bool {
	switch {
	case k.wait > 0:
		return true // requests wait for its exchange
	case k.flags&flagSent == 0:
		return !k.quietAtFirst(r)
	case k.flags&(flagGuess|flagUrgent) == flagGuess|flagUrgent:
		return true
	}
	return k.flags&(flagPaced|flagUrgent|flagExhausted) == flagPaced|flagUrgent &&
		k.granted-k.used < 2*k.demand*r.paceGap/r.w+1
}

// quietAtFirst reports whether a key's first exchange, sent now and before
// its demand can be measured, takes it as quiet (no share) rather than of
// unknown demand: a bucket key seen only once. Under a Zipf law most keys
// are seen once, and a share for each would cost a lease's exchanges for
// nothing.
func (k *Lease) quietAtFirst(r *Rule) bool { return r.buckets && k.hits <= 1 }

// Verdict is a hybrid decision before the limiter dresses it as a
// local.Decision; times are µs. Its four words stay in registers: what the
// decision asks of its caller comes apart, as a Signal.
type Verdict struct {
	Reason    local.Reason
	Remaining int64
	Reset     int64
	Retry     int64
}

// Idle reports whether the key may be forgotten at now (node time): it
// holds no grant and no share, has nothing unreported, is not in the
// syncer's hands, and the window it last acted in is over. Its next request
// then starts afresh, as a new key's, cold-start allowance included: a key
// refused for the rest of its window holds nothing, but forgetting it before
// the window ends would hand it the allowance again, uncharged.
func (k *Lease) Idle(now int64) bool {
	if k.flags&(flagQueued|flagActive|flagInFlight) != 0 || k.wait > 0 {
		return false
	}
	if k.lastUse+k.span > now {
		return false
	}
	return k.granted <= k.used && k.used == k.acked && k.pused == k.packed && k.next == 0 &&
		k.rate == 0 && k.burst == 0 && k.debt == k.debtSent && k.prepaid == 0 && k.lost < k.span
}

// Signal is what a decision asks of its caller beside its Verdict.
type Signal uint8

const (
	// SignalSync: the key needs the syncer (a sync is due soon: lease
	// running low, first request): the caller hands it over with
	// Rule.Notify.
	SignalSync Signal = 1 << iota
	// SignalWait: the refusal is one an exchange of the key may turn into
	// an admission: the key holds no lease (ReasonNoLease) and Redis may
	// have room, or its bucket share is short and Redis may have more, or
	// the limit changed. The caller may wait for the key's next exchange
	// (Await) rather than refuse. (ReasonNoLease without it: no lease, and
	// by the last reply no room either.)
	SignalWait
)

// Sync reports SignalSync.
func (s Signal) Sync() bool { return s&SignalSync != 0 }

// Wait reports SignalWait.
func (s Signal) Wait() bool { return s&SignalWait != 0 }

// syncIf is SignalSync when b is set.
func syncIf(b bool) Signal {
	if b {
		return SignalSync
	}
	return 0
}

// Decide decides a request of cost n (0 ≤ n ≤ the rule's MaxCost) at node
// time now, charging it if admitted, and says what it asks of the caller
// (Signal).
func (k *Lease) Decide(r *Rule, now, n int64) (v Verdict, signal Signal) {
	k.note(r, now, n)
	switch {
	case k.rule != nil && k.rule != r:
		return k.Redecide(r, now, n, true) // the limit changed
	case r.buckets:
		return k.decideBucket(r, now, n, true)
	}
	return k.decideWindow(r, now, n, true)
}

// Check decides a request of cost n at node time now as Decide would, and
// counts it as demand, without charging it: for multi-rule decisions, which
// charge only when every rule admits (Redecide). Its signal is Decide's: a
// key short of a lease asks for one whether or not the other rules admit.
func (k *Lease) Check(r *Rule, now, n int64) (v Verdict, signal Signal) {
	k.note(r, now, n)
	return k.Redecide(r, now, n, false)
}

// Redecide decides again a request of cost n at node time now that Decide
// or Check counted as demand before (a multi-rule decision's charge, a
// request that waited for an exchange), and charges it if admitted and
// charge is set.
func (k *Lease) Redecide(r *Rule, now, n int64, charge bool) (v Verdict, signal Signal) {
	changed := k.rule != nil && k.rule != r
	if changed {
		// The limit changed: the lease was granted under the old one, and
		// the next exchange revokes it. Ask for it now. What the last reply
		// said of the window's budget spoke of the old limit.
		k.flags |= flagUrgent
		k.flags &^= flagExhausted | flagExhaustedPrev | flagDry
		if r.buckets && k.rule.buckets && k.flags&flagScaled == 0 {
			k.rescale(k.rule, r, now+k.offset)
		}
	}
	if r.buckets {
		v, signal = k.decideBucket(r, now, n, charge)
	} else {
		v, signal = k.decideWindow(r, now, n, charge)
	}
	if changed {
		signal |= SignalSync
		if v.Reason != local.ReasonOK {
			signal |= SignalWait // the exchange under the new limit may admit it
		}
	}
	return v, signal
}

// note records a request of cost n at node time now as the key's demand.
func (k *Lease) note(r *Rule, now, n int64) {
	k.lastUse, k.span = now, r.w
	k.hits += n
	k.asked += n
	if k.lastSync == 0 {
		k.lastSync = now // a new key: its demand is counted from now
		if k.flags&flagSynced == 0 {
			k.offset = r.cluster.Offset() // until its own first reply
		}
	}
}

// Await records that a request of cost n waits for the key's next
// exchange: the key asks for it at once (a first-lease round), and asks
// for enough to admit the waiting requests. The waiter calls Unawait when
// it decides again.
func (k *Lease) Await(n int64) {
	k.wait += n
	k.flags |= flagUrgent
}

// Unawait takes back a request of cost n that Await recorded.
func (k *Lease) Unawait(n int64) { k.wait = max(k.wait-n, 0) }

// Ticket returns what Exchanged compares with: a request of r that begins
// to wait takes one, and its wait is over once the exchanges it waits for
// were answered. A window rule's request waits for two: an exchange sent
// while others wait too may grant less than they all asked (the script
// paces a window's budget among the nodes), and the next one grants the
// rest; a third would be waiting on a budget others hold. A bucket's waits
// for one: its share's tokens come at the share's rate, not in grants.
func (k *Lease) Ticket(r *Rule) uint16 {
	if r.buckets {
		return k.sent + 1
	}
	return k.sent + 2
}

// Exchanged reports whether an exchange of the key sent at or after ticket
// (Ticket) was answered.
func (k *Lease) Exchanged(ticket uint16) bool { return int16(k.got-ticket) >= 0 }

// LastUse returns the node time of the key's last request.
func (k *Lease) LastUse() int64 { return k.lastUse }

// Charge records n admitted for the key at node time now by other means
// than its lease (a failure policy, while Redis could not be reached): as
// debt, reported at the next exchange, so that Redis counts it once Redis
// answers again. It returns whether the key needs the syncer (Notify).
func (k *Lease) Charge(r *Rule, now, n int64) bool {
	k.lastUse, k.span = now, r.w
	if r.buckets {
		k.debt += n
	} else {
		k.windowNow(r, now)
		k.used += n
	}
	return true
}

// Fallback decides a request of cost n at node time now for a window rule
// (fixed window, sliding window counter) while Redis is out of reach, by
// the failure policy that gives each node a part of the limit: the node may
// admit up to part in the key's current window, counting what it admitted
// there from its lease, so that a node cut off after using a large grant
// does not admit part more on top of it. An admission is charged as use,
// reported once Redis answers; charge false decides without charging (a
// multi-rule decision's check). It returns ok false for bucket rules, which
// the caller decides otherwise.
func (k *Lease) Fallback(r *Rule, now, n, part int64, charge bool) (v Verdict, ok bool) {
	if r.buckets {
		return Verdict{}, false
	}
	k.windowNow(r, now)
	return k.FallbackIn(r, now, n, part, charge), true
}

// FallbackIn is Fallback for a window rule's key whose window state Window
// has just rolled forward to now (the gossip's part depends on the
// window): it does not roll it again.
func (k *Lease) FallbackIn(r *Rule, now, n, part int64, charge bool) Verdict {
	k.lastUse, k.span = now, r.w
	rnow := max(now+k.offset, k.wid) // windowNow, rolled
	end := k.wid + r.w - rnow
	budget := max(k.granted, part)
	used := k.used + n
	if used > budget {
		return Verdict{Reason: local.ReasonLimited, Remaining: max(budget-k.used, 0), Reset: end, Retry: end}
	}
	if charge {
		k.used = used
	}
	return Verdict{Remaining: budget - used, Reset: end}
}
