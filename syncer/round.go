package syncer

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"strconv"
	"time"

	"github.com/hybridlimit/hybridlimit/internal/keyed"
	"github.com/hybridlimit/hybridlimit/internal/lease"
	"github.com/hybridlimit/hybridlimit/internal/synchook"
	"github.com/redis/go-redis/v9"
)

// SyncAt runs one round at node time now (µs): it takes the keys handed
// over since the last round, and exchanges with Redis those that need it,
// in pipelines of Batch scripts, each within Timeout and ctx.
func (s *syncer) SyncAt(ctx context.Context, now int64) (synchook.RoundStats, error) {
	return s.round(ctx, now, false, true, 0)
}

// pending is a request out for one key, or the registration (entry nil).
type pending struct {
	entry *keyed.Entry[lease.Lease]
	rule  *lease.Rule
	req   lease.Request
}

// SyncFirstAt runs a first-lease round at node time now: it exchanges only
// the keys that asked, since the last such round, for their first lease or
// for the correction of a lease granted on a guess (before their demand
// could be measured). Such a key need not wait MinGap after the node's
// last round: a busy new key spends its cold-start allowance in far less.
func (s *syncer) SyncFirstAt(ctx context.Context, now int64) (synchook.RoundStats, error) {
	return s.firstRound(ctx, now, 0)
}

// firstRound is SyncFirstAt, within budget (see batch).
func (s *syncer) firstRound(ctx context.Context, now int64, budget time.Duration) (synchook.RoundStats, error) {
	start := time.Now()
	s.firstMu.Lock()
	defer s.firstMu.Unlock()
	b := batch{budget: budget}
	for _, it := range s.cluster.TakeFirst() {
		e, r := it.Entry, it.Rule.Latest()
		e.Lock()
		k := &e.Value
		k.TakeFirst()
		if !e.Evicted() && !k.InFlight() && k.WantsFirst(r) {
			b.due(e, r)
		}
		e.Unlock()
	}
	if len(b.keys) > 0 {
		s.learnRegions(ctx, now)
	}
	return s.exchange(ctx, &b, now, synchook.RoundStats{Keys: int(s.nactive.Load()), First: true}, start)
}

// regionsFresh is how long the regions' count read holds before a first
// lease reads it again.
const regionsFresh = time.Second

// learnRegions reads the regions' count that the region's exchanger wrote,
// at node time now, unless read within regionsFresh: before a new key of
// global reach's first exchange, which it sizes the opening of. The
// registry's rounds read it too, but an idle node's seldom, and a first
// lease may come before the first of them.
func (s *syncer) learnRegions(ctx context.Context, now int64) {
	if s.region == nil || (s.cluster.Regions() != 0 && now-s.regionsAt.Load() < regionsFresh.Microseconds()) {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
	defer cancel()
	if n, err := s.cfg.Client.Get(ctx, s.ks.regionsKey()).Int64(); err == nil {
		s.cluster.SetRegions(n)
		s.regionsAt.Store(now)
	}
}

// batch is a round's work: the registration, if due, and the keys due,
// whose requests are built pipeline by pipeline as they are sent, so that a
// key the round does not reach is left as it was. A round starts no
// pipeline once it has run budget (0: no bound but ctx): the keys left are
// the next round's (RoundStats.Carried). calls and outs are the pipeline
// being sent, and for each what was sent.
type batch struct {
	reg   *call
	keys  []dueKey
	fresh int // keys[:fresh] were found due by this round, the rest left by the last (carries)
	// carries is set for the rounds that keep the keys a budget leaves
	// (not the first-lease rounds, whose keys ask again at their next
	// decision): they are marked Left.
	carries bool
	left    []dueKey // the keys a budget left for the next round
	final   bool
	budget  time.Duration
	calls   []call
	outs    []pending
	// listed are the keys of global reach the current pipeline exchanged,
	// for the region's set (listGlobal).
	listed []redis.Z
}

// dueKey is a key due for an exchange, and the node time of its last one
// (or of its first request), which orders the keys of a round.
type dueKey struct {
	entry *keyed.Entry[lease.Lease]
	rule  *lease.Rule
	since int64
}

// due adds e to b's keys. The caller holds e's lock.
func (b *batch) due(e *keyed.Entry[lease.Lease], r *lease.Rule) {
	b.keys = append(b.keys, dueKey{e, r, e.Value.LastSync()})
}

func (b *batch) add(c call, p pending) {
	b.calls, b.outs = append(b.calls, c), append(b.outs, p)
}

// send adds e's exchange at node time now to b; the lease marks itself in
// flight. The caller holds e's lock.
func (s *syncer) send(b *batch, e *keyed.Entry[lease.Lease], r *lease.Rule, now int64, final bool) {
	q := e.Value.Request(r, now, final)
	b.add(s.leaseCall(r, e.Value.Digest, &q), pending{entry: e, rule: r, req: q})
}

// round runs a round (SyncAt), the last one if final, within budget (see
// batch). A regular round (all) looks at every key of the set; an early
// one only at the keys handed over or urgent since the last round: a key
// comes due by time alone at the interval, which the regular rounds keep,
// so an early round's cost grows with the keys that asked for it, not with
// the keys held. Either sends, after the keys it found due, those a budget
// left before (carry), in turn, without looking at them again.
func (s *syncer) round(ctx context.Context, now int64, final, all bool, budget time.Duration) (synchook.RoundStats, error) {
	start := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	// The keys waiting for a first-lease round are looked after in this
	// one, if due: a round asks for them again at their next decision. (While
	// Redis is out, the loop runs no first-lease round, and its list would
	// otherwise grow with every new key.)
	for _, it := range s.cluster.TakeFirst() {
		it.Entry.Lock()
		it.Entry.Value.TakeFirst()
		it.Entry.Unlock()
	}
	all = all || final
	look := s.look[:0]
	s.cluster.TakeHanded(func(it lease.Handed) {
		it.Entry.Lock()
		if !it.Entry.Evicted() {
			it.Entry.Value.Activate()
			s.active[it.Entry] = it.Rule
			if !all {
				look = append(look, it)
			}
		}
		it.Entry.Unlock()
	})
	soon := s.cluster.TakeSoon()
	b := batch{final: final, budget: budget}
	s.learnRegions(ctx, now)
	if c, ok := s.register(now, final, s.idle()); ok {
		b.reg = &c
	}
	if all {
		for _, it := range soon {
			it.Entry.Lock()
			it.Entry.Value.Seen() // the regular round looks at it below
			it.Entry.Unlock()
		}
		for e, r := range s.active {
			s.lookAt(&b, e, r, now, final)
		}
	} else {
		look = append(look, soon...)
		for _, it := range look {
			if r, ok := s.active[it.Entry]; ok {
				s.lookAt(&b, it.Entry, r, now, final)
			}
		}
	}
	clear(look)
	s.look = look[:0]
	b.fresh, b.carries = len(b.keys), true
	b.keys = append(b.keys, s.carry...)
	s.nactive.Store(int64(len(s.active)))
	st, err := s.exchange(ctx, &b, now, synchook.RoundStats{Keys: len(s.active)}, start)
	s.carry = b.left
	return st, err
}

// lookAt adds e to b if its key is due, and drops it from the set once it
// holds and owes nothing. A key left by a budget is sent from the carry,
// not looked at again, but in the last round. The caller holds mu.
func (s *syncer) lookAt(b *batch, e *keyed.Entry[lease.Lease], r *lease.Rule, now int64, final bool) {
	if l := r.Latest(); l != r { // the limit changed: exchange under the new one
		r = l
		s.active[e] = r
	}
	e.Lock()
	defer e.Unlock()
	k := &e.Value
	k.Seen()
	if e.Evicted() {
		delete(s.active, e)
		return
	}
	if k.Left() && !final {
		return
	}
	k.Tapped(r, now)
	switch {
	case k.InFlight():
	case final || k.Due(r, now):
		b.due(e, r)
	case k.Dormant():
		// Nothing held, nothing to report: the key needs no looking
		// after until its next request hands it over again.
		k.Deactivate()
		delete(s.active, e)
	}
}

// exchange sends a round's work (b) in pipelines of Batch, the registration
// first, each pipeline within Timeout (and ctx): a failed pipeline fails its
// own keys only. Within a budget, it serves the keys longest unsynced
// first, starts no pipeline once the round has run b.budget, and counts the
// keys left as carried. It applies the replies and reports the round (st)
// to the Observer. A reply that does not decode counts as a failed
// exchange. now is the round's node time. The caller holds mu (a
// first-lease round, firstMu).
func (s *syncer) exchange(ctx context.Context, b *batch, now int64, st synchook.RoundStats, start time.Time) (synchook.RoundStats, error) {
	var roundErr error
	fail := func(err error) {
		if roundErr == nil {
			roundErr = err
		}
	}
	fresh := b.keys // a first-lease round's: every key is its own, none carried
	if b.carries {
		fresh = b.keys[:b.fresh]
	}
	if len(fresh) > s.cfg.Batch && b.budget > 0 {
		slices.SortFunc(fresh, func(x, y dueKey) int { return cmp.Compare(x.since, y.since) })
	}
	next := 0 // b.keys[next:] are yet to be sent
	// A later pipeline's requests are built at now plus the time since.
	// The budget runs from the first: looking over the keys is not sending.
	now0, clk0, sending := now, s.cfg.Clock.Now().UnixMicro(), time.Now()
	for first := true; first || next < len(b.keys); first = false {
		if !first {
			if b.budget > 0 && time.Since(sending) >= b.budget {
				st.Carried = len(b.keys) - next
				b.left = b.keys[next:]
				for i := next; b.carries && i < b.fresh; i++ { // the carried keys are marked already
					d := &b.keys[i]
					d.entry.Lock()
					d.entry.Value.SetLeft(true)
					d.entry.Unlock()
				}
				break
			}
			now = now0 + max(s.cfg.Clock.Now().UnixMicro()-clk0, 0)
		}
		b.calls, b.outs = b.calls[:0], b.outs[:0]
		if first && b.reg != nil {
			b.add(*b.reg, pending{req: lease.Request{SentAt: now}}) // no entry: the registry's
		}
		for ; next < len(b.keys) && len(b.calls) < s.cfg.Batch; next++ {
			d := &b.keys[next]
			d.entry.Lock()
			d.entry.Value.SetLeft(false)
			if !d.entry.Evicted() && !d.entry.Value.InFlight() {
				s.send(b, d.entry, d.rule, now, b.final)
			}
			d.entry.Unlock()
		}
		if len(b.calls) == 0 {
			continue
		}
		err := s.pipeline(ctx, b, &st, fail)
		if err != nil {
			fail(err)
		}
	}
	st.Took, st.Err = time.Since(start), roundErr
	reloadSlots(s.cfg.Client, roundErr)
	if s.cfg.Observer != nil {
		s.obsMu.Lock()
		s.cfg.Observer.Round(st)
		s.obsMu.Unlock()
	}
	s.cluster.RoundDone() // after the Observer: a waiter wakes to what it learned
	return st, roundErr
}

// pipeline sends b's current pipeline within Timeout (and ctx), applies its
// replies, counts them in st and reports each failure to fail; it returns
// the pipeline's own error, wrapped. The caller holds mu.
func (s *syncer) pipeline(ctx context.Context, b *batch, st *synchook.RoundStats, fail func(error)) error {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
	defer cancel()
	// Each reply's Redis clock is read against the midpoint of send and
	// receipt: the send is now, not when the round began (a round that
	// looked over many keys first would put every node's clock ahead).
	sent := s.cfg.Clock.Now().UnixMicro()
	for i := range b.outs {
		b.outs[i].req.SentAt = sent
	}
	err := s.runByMaster(ctx, b.calls, func(idx []int, cmds []*redis.Cmd, last bool) {
		s.replies(ctx, b, idx, cmds, st, fail)
		if !last {
			// A master's replies are in: wake the requests waiting for
			// them rather than hold them for a slower master (dead, and
			// being dialled again until the deadline).
			s.cluster.RoundDone()
		}
	})
	st.Pipeline++
	s.listGlobal(ctx, b)
	return wrap(ctx, "sync", err)
}

// listGlobal adds the keys of global reach b's pipeline exchanged to the
// region's set, where its exchanger finds them (region.go), scored by the
// node's estimate of Redis's time: one command, apart from the scripts, so
// that the set may live in another slot of a Cluster; bounded by MinGap, so
// that the set's master out of reach does not hold the round.
func (s *syncer) listGlobal(ctx context.Context, b *batch) {
	if len(b.listed) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, s.cfg.MinGap)
	defer cancel()
	s.cfg.Client.ZAdd(ctx, s.ks.regionKey(regionActive), b.listed...)
	b.listed = b.listed[:0]
}

// replies applies the replies cmds to b's calls idx (nil: all, in order), counts them in st and
// reports each failure to fail.
func (s *syncer) replies(ctx context.Context, b *batch, idx []int, cmds []*redis.Cmd, st *synchook.RoundStats, fail func(error)) {
	recv := s.cfg.Clock.Now().UnixMicro()
	for j, cmd := range cmds {
		i := j
		if idx != nil {
			i = idx[j]
		}
		p := &b.outs[i]
		vals, cerr := cmd.Int64Slice()
		if p.entry == nil { // the registration
			var v registryReply
			if cerr == nil {
				v, cerr = decodeRegistry(vals, s.region != nil)
				if cerr != nil {
					fail(cerr)
				}
			} else {
				fail(wrap(ctx, "register", cerr))
			}
			if cerr == nil {
				s.cluster.SetNodes(v.Live)
				s.cluster.SetRegions(v.Regions)
				s.regionsAt.Store(recv)
				if !s.cfg.PassTime {
					s.cluster.Measure(v.Now-(p.req.SentAt+recv)/2, max(recv-p.req.SentAt, 0)/2, recv)
				}
				st.Registered = true
			} else {
				s.registered = 0 // again at the next round
			}
			continue
		}
		applied := false
		if cerr != nil {
			cerr = wrap(ctx, "sync", cerr)
			s.answered(p, cerr)
		} else {
			applied, cerr = s.apply(p, vals, recv)
		}
		switch {
		case cerr != nil:
			st.Failed++
			fail(cerr)
		case applied:
			st.Synced++
			if p.rule.Global() {
				b.listed = append(b.listed, redis.Z{Score: float64(p.req.Now), Member: b.calls[i].keys[0]})
			}
		}
	}
}

// answered records that p's exchange failed with err: its lease is left
// as it was, but for its request no longer in flight, and for the fault
// when Redis answered it with an error (lease.Lease.Fault), or Redis out
// of reach (lease.Lease.Unreach). A write refused for want of memory is
// both: at maxmemory Redis refuses some writes and takes others as memory
// comes and goes, so the rounds it answers keep the breaker closed, and the
// key goes to its failure policy until an exchange succeeds.
func (s *syncer) answered(p *pending, err error) {
	p.entry.Lock()
	p.entry.Value.Answered()
	switch {
	case errors.Is(err, ErrRedis):
		p.entry.Value.Fault()
	case errors.Is(err, ErrUnavailable):
		if outOfMemory(err) {
			p.entry.Value.Fault()
		}
		p.entry.Value.Unreach()
	}
	p.entry.Unlock()
}

// apply decodes the reply vals to p and takes it into p's lease, under the
// entry's lock, and reports whether it did: an evicted entry's reply is
// dropped. recv is the node time it arrived. A reply that does not decode
// returns an error wrapping ErrRedis and leaves the lease as answered, with
// the fault.
func (s *syncer) apply(p *pending, vals []int64, recv int64) (bool, error) {
	e := p.entry
	e.Lock()
	defer e.Unlock()
	e.Value.Answered()
	if p.req.Bucket {
		v, err := decodeLeaseBucket(vals)
		if err != nil {
			e.Value.Fault()
		}
		if err != nil || e.Evicted() {
			return false, err
		}
		e.Value.ApplyBucket(p.rule, &p.req, &v, recv)
		return true, nil
	}
	v, err := decodeLeaseWindow(vals)
	if err != nil {
		e.Value.Fault()
	}
	if err != nil || e.Evicted() {
		return false, err
	}
	e.Value.ApplyWindow(p.rule, &p.req, &v, recv)
	return true, nil
}

// scriptNow is the time argument of a script: empty for Redis's clock, or
// the node's estimate of it under PassTime.
func (s *syncer) scriptNow(rnow int64) string {
	if !s.cfg.PassTime {
		return ""
	}
	return strconv.FormatInt(rnow, 10)
}

// leaseCall is the lease script call of request q for the key of digest d
// under lr.
func (s *syncer) leaseCall(lr *lease.Rule, d [lease.DigestSize]byte, q *lease.Request) call {
	r, digest := redisRule(lr), encodeDigest(d)
	c := leaseConsts{now: s.scriptNow(q.Now), node: s.node, leaseTTL: s.cfg.LeaseTTL.Microseconds(), demandTTL: s.cfg.DemandTTL.Microseconds()}
	if q.Bucket {
		return call{scriptLeaseBucket, []string{s.ks.name(r.name, digest, "s")}, encodeLeaseBucket(q, c, r)}
	}
	n := r.name
	keys := []string{s.ks.name(n, digest, "m"), s.ks.name(n, digest, "w0"), s.ks.name(n, digest, "w1"), s.ks.name(n, digest, "w2")}
	if lr.Global() {
		g := globalArgs{regions: s.cluster.Regions(), keep: keepFor(r.limit.Window().Microseconds()).Microseconds()}
		return call{scriptLeaseWindow, append(keys, s.ks.name(n, digest, globalSide)), encodeLeaseWindow(q, c, r, &g)}
	}
	return call{scriptLeaseWindow, keys, encodeLeaseWindow(q, c, r, nil)}
}
