package lease

// What a lease does around a Redis outage: it feeds the gossip fallback
// with the key's figures at each sync round, and, once Redis answers again,
// takes no new grant for a while (in a window the outage touched, or one
// begun since), nor a bucket's burst, since Redis does not yet know what
// every node admitted without it.

// Tap receives a key's figures at each sync round that looks after it:
// window is the id of the key's current window (its start ÷ the window; 0
// for bucket rules), asked the requests decided since the last call,
// refused ones included, and used what the node holds committed in window:
// its grant or its use, by any means, whichever is more (a grant not used
// yet is not the others' to take). It runs under the key's lock and must not block.
type Tap func(k *Lease, window, asked, used int64)

// SetOutage sets what r's leases do around an outage: tap, if not nil,
// receives each key's figures at every round; handBack makes a window
// rule's keys take no new grant for recoverSpan intervals once Redis
// answers again (Recovering): the failure policy goes on deciding them
// meanwhile; and a bucket rule's keys take no tokens out of the pool for as
// long (afterOutage). Call it before r is used.
func (r *Rule) SetOutage(tap Tap, handBack bool) { r.tap, r.handBack = tap, handBack }

// Tapped hands k's figures at node time now to r's Tap, if r has one. The
// syncer calls it at each round for each key it looks after, under the
// key's lock.
func (k *Lease) Tapped(r *Rule, now int64) {
	if r.tap == nil {
		return
	}
	var window, used int64
	if !r.buckets {
		k.windowNow(r, now)
		window, used = k.wid/r.w, max(k.used, k.granted)
	}
	asked := k.asked
	k.asked = 0
	r.tap(k, window, asked, used)
}

// Window returns the id of the key's current window at node time now (its
// start in Redis time ÷ the window), with the window state rolled forward
// to it; ok is false for bucket rules.
func (k *Lease) Window(r *Rule, now int64) (id int64, ok bool) {
	if r.buckets {
		return 0, false
	}
	k.windowNow(r, now)
	return k.wid / r.w, true
}

// Recovering reports whether Redis answered again, at most recoverSpan
// ago, after an outage: the key takes no new grant in its current window
// meanwhile, and the failure policy decides what its lease does not cover.
func (k *Lease) Recovering(r *Rule, now int64) bool {
	return k.flags&flagRecover != 0 && now+k.offset < max(r.cluster.Outage(), r.cluster.partial.Load())+recoverSpan*r.interval
}

// recoverSpan is how long, in sync intervals after the last round that
// found Redis unreachable, replies grant nothing on top of use: long enough
// for every live node to report what it admitted without Redis (its next
// regular round once its client dials again, after its breaker's probe
// backoff, up to a second, or a Cluster master's, up to two: nodes come
// back up to that far apart), short enough that a long window does not stay
// with the policy.
const recoverSpan = 30

// capAfterOutage keeps a reply at Redis time rnow, within recoverSpan
// intervals of an outage, from granting on top of what the key held before
// it (held: its grant or its use, whichever was larger), in the window the
// outage touched and in one that began since. Redis, restarted empty or
// not, knows only the use reported so far; the other nodes report theirs at
// their next rounds, and a grant made before they do would come on top of
// it. A node whose connection comes back later (a Cluster slot map
// reloaded after the others', a backoff running out) goes on admitting its
// part by the policy in the next window too, unknown to Redis. unreached
// is whether the key's exchange before this one failed: only such keys
// recover from a Cluster master's outage (NotePartial).
func (k *Lease) capAfterOutage(r *Rule, held, rnow int64, unreached bool) {
	// A key already recovering goes on until the hand-back ends, its
	// later replies included.
	unreached = unreached || k.flags&flagRecover != 0
	if k.wid == 0 || r.handingBack(rnow, unreached) == 0 {
		return
	}
	k.granted = min(k.granted, held)
	k.flags |= flagRecover
}

// NoteOutage records that a round found Redis unreachable at Redis time
// rnow (estimated).
func (c *Cluster) NoteOutage(rnow int64) { c.outage.Store(max(rnow, 1)) }

// NotePartial records that an exchange found a Cluster master unreachable
// at Redis time rnow (estimated) while the others answered: the keys whose
// exchanges failed recover as from an outage, the others go on as before.
func (c *Cluster) NotePartial(rnow int64) { c.partial.Store(max(rnow, 1)) }

// Outage returns the Redis time of the last round that found Redis
// unreachable, 0 before any.
func (c *Cluster) Outage() int64 { return c.outage.Load() }

// Share returns the part, in [0, 1], of a bucket rule's rate and burst
// that the failure policy gives this node for k's key. It runs under the
// key's lock and must not block.
type Share func(k *Lease) float64

// SetShare sets share, the failure policy's part of a bucket rule for
// this node: within an outage's hand-back (SetOutage), a share Redis
// grants is cut to it. Redis splits the rate by the demand of the nodes
// that reached it again, as if the others wanted none, while those (their
// connection back later, or joined during the outage and never known to
// Redis) go on admitting their part by the policy. Call it before r is
// used.
func (r *Rule) SetShare(share Share) { r.share = share }

// afterOutage is what a bucket key holds of reply v: its share's rate per
// window and burst, and the tokens v adds out of the pool. Within an
// outage's hand-back (Fallback), the share is no more than the policy's
// part (SetShare), as the nodes not yet back go on admitting theirs, and
// the key asks for the whole share once the hand-back ends (Due); and the
// pool adds nothing, since Redis, restarted full or not yet told of every
// node's debt, would hand out a burst the nodes already spent without it
// (the share's rate still refills the key).
func (k *Lease) afterOutage(r *Rule, v *BucketReply, unreached bool) (rate, burst, grant int64) {
	unreached = unreached || k.flags&flagCut != 0 // a key already cut goes on until the hand-back ends
	k.flags &^= flagCut
	rate, burst = v.Rate, v.Burst
	if r.handingBack(v.Now, unreached) == 0 {
		return rate, burst, v.Grant
	}
	if r.share != nil {
		s := r.share(k)
		rate = min(rate, max(int64(s*float64(r.limit)), 1))
		burst = min(burst, max(int64(s*float64(r.burst)), 1))
		if rate < v.Rate || burst < v.Burst {
			k.flags |= flagCut
		}
	}
	return rate, burst, 0
}

// handingBack returns the Redis time of the outage whose hand-back a reply
// at Redis time rnow falls in (handBack set, within recoverSpan intervals
// of the last round that found Redis unreachable, or, for a key whose last
// exchange failed, of a Cluster master's outage), or 0.
func (r *Rule) handingBack(rnow int64, unreached bool) int64 {
	if !r.handBack {
		return 0
	}
	out := r.cluster.Outage()
	if unreached {
		out = max(out, r.cluster.partial.Load())
	}
	if out != 0 && rnow < out+recoverSpan*r.interval {
		return out
	}
	return 0
}

// PolicyStart returns, at the failure policy's first decision on a bucket
// key since its last reply, what the node holds to start the policy's part
// from rather than a full burst: held, its share's tokens, and pool, the
// pool's tokens as the last reply left them (refilled since at the rate
// nobody held then), of which the node may count its part. A part begun
// full would hand each node its part of the burst on top of the burst the
// cluster had just spent through Redis. ok is false after the first, for
// window rules, and for a key Redis never answered (its part starts full:
// nothing is known of it). It runs under the key's lock.
func (k *Lease) PolicyStart(r *Rule, now int64) (held, pool int64, ok bool) {
	if !r.buckets || k.flags&(flagBegun|flagSynced) != flagSynced {
		return 0, 0, false
	}
	k.flags |= flagBegun
	rnow := now + k.offset
	if k.rate > 0 && rnow < k.expiry-r.safety {
		k.refill(r, rnow)
		held = k.tokens
	}
	return held, max(k.poolNow(r, rnow), 0), true
}
