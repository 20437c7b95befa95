package hybrid

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/hybridlimit/hybridlimit/internal/keyed"
	"github.com/hybridlimit/hybridlimit/internal/keyname"
	"github.com/hybridlimit/hybridlimit/internal/lease"
	"github.com/hybridlimit/hybridlimit/internal/localx"
	"github.com/hybridlimit/hybridlimit/internal/syncx"
	"github.com/hybridlimit/hybridlimit/internal/usec"
	"github.com/hybridlimit/hybridlimit/local"
	"github.com/hybridlimit/hybridlimit/syncer"
)

// hybridRule runs a rule in Hybrid mode: each key's lease in a store of
// this node's, decided locally and exchanged with Redis by the syncer, and
// the rule's failure policy for keys without a lease while Redis is down.
type hybridRule struct {
	rs     *ruleState
	l      *Limiter  // rs.l
	counts *counters // rs.counts
	lease  atomic.Pointer[lease.Rule]
	store  *keyed.Store[lease.Lease]
	fail   failover
	salt   [lease.DigestSize]byte // names the rule's keys on the gossip (gossipSalt)
}

var _ modeRule = (*hybridRule)(nil)

// newHybridRule returns the hybrid form of sr, at any limit and any number
// of nodes. Its error wraps syncx.ErrNotLeasable when the limit has no
// lease (the sliding window log; a bucket past the scripts' exact range).
func newHybridRule(rs *ruleState, sr *syncer.Rule) (*hybridRule, error) {
	l := rs.l
	lr, err := l.sync.LeaseRule(sr)
	if err != nil {
		return nil, err
	}
	rs.dress(lr)
	m := &hybridRule{rs: rs, l: rs.l, counts: rs.counts, salt: gossipSalt(rs.name)}
	if m.store, err = keyed.New(l.storeConfig(), m.idle, nil); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidConfig, err)
	}
	m.fail = newFailover(rs)
	m.setOutage(lr)
	m.lease.Store(lr)
	return m, nil
}

func (m *hybridRule) kind() Mode { return Hybrid }

// allow is the hybrid hot path: the key's entry, locked once for the whole
// decision, its lease, and a hand to the syncer when the lease asks for it.
// A request the lease cannot decide (no lease, or lease.SignalWait) is decided out of line
// (undecided): by the failure policy while Redis is out of reach, after
// the key's exchange for a rule that waits for it, else as a refusal; bad
// costs too (refuseCost), so that the usual case, a decision on the lease,
// admitted or refused, stays short.
func (m *hybridRule) allow(ctx context.Context, now int64, key string, n int64) (local.Decision, error) {
	lr := m.lease.Load()
	if uint64(n) > uint64(lr.MaxCost()) { // n < 0 as well
		return m.refuseCost(lr, n), nil
	}
	e := m.store.Lock(key, now) // lockedEntry, written out: one call fewer
	if e == nil {
		m.counts.count(local.ReasonOverflow)
		return dress(lease.Verdict{Reason: local.ReasonOverflow}, lr.MaxCost()), nil
	}
	m.l.setDigest(&e.Value, key)
	v, signal := e.Value.Decide(lr, now, n)
	if signal.Sync() {
		lr.Notify(e)
	}
	if v.Reason == local.ReasonNoLease || signal.Wait() {
		return m.undecided(ctx, e, lr, now, key, n, v, signal.Wait())
	}
	e.Unlock()
	m.counts.count(v.Reason)
	return dress(v, lr.MaxCost()), nil
}

// refuseCost refuses, charging nothing, a cost no lease of lr can admit.
func (m *hybridRule) refuseCost(lr *lease.Rule, n int64) local.Decision {
	v, _ := badCost(lr, n)
	m.counts.count(v.Reason)
	return dress(v, lr.MaxCost())
}

// undecided decides a request that key's lease could not, v: by the
// failure policy when the key holds no lease while Redis is out of reach or
// the key recovers from an outage (degraded); after the key's exchange
// with Redis, when an exchange may admit it (wait, lease.SignalWait) and
// the rule waits for it (waitLease); else as a refusal. e is key's entry,
// which the caller holds locked, and undecided unlocks.
func (m *hybridRule) undecided(ctx context.Context, e *keyed.Entry[lease.Lease], lr *lease.Rule, now int64, key string, n int64, v lease.Verdict, wait bool) (local.Decision, error) {
	switch {
	case m.byPolicy(e, lr, now, v) || v.Reason == local.ReasonNoLease && (m.unreachedIn(e, now) || m.masterDown(lr, key, now)):
		d := m.degraded(e, lr, now, key, n, true)
		e.Unlock()
		m.counts.decision(d)
		return d, nil
	case wait && m.rs.wait != WaitNever && !m.l.breakerOpen():
		return m.waitLease(ctx, e, lr, key, n)
	}
	e.Unlock()
	v = refusal(lr, v)
	m.counts.count(v.Reason)
	return dress(v, lr.MaxCost()), nil
}

// byPolicy reports whether v, a verdict of e's lease that Redis would have
// to settle, goes to the failure policy: the key holds no lease (a share
// held is used to its end), and Redis is out of reach, answered the key's
// last exchange with an error (a key of another type under the prefix),
// or the key recovers from an outage in its current window.
func (m *hybridRule) byPolicy(e *keyed.Entry[lease.Lease], lr *lease.Rule, now int64, v lease.Verdict) bool {
	return v.Reason == local.ReasonNoLease && (m.l.breakerOpen() || e.Value.Faulted() || e.Value.Recovering(lr, now))
}

// masterDown reports whether key, without a lease, goes to the failure
// policy at now rather than waiting for its exchange: on a Cluster, a
// central call found its master out of reach (shards.waiting). It costs
// nothing while every master answers.
func (m *hybridRule) masterDown(lr *lease.Rule, key string, now int64) bool {
	s := m.l.shards
	if s == nil || s.open.Load() == 0 {
		return false
	}
	if !s.waiting(s.master(lr.Ref().(*syncer.Rule), key), now) {
		return false
	}
	m.l.sync.NotePartial(now) // the policy decides: the key recovers once its master is back
	return true
}

// unreachedIn reports whether e's key, on a Cluster, found its master out
// of reach at its last exchange: it goes to the failure policy without
// waiting until an exchange succeeds (the syncer goes on trying), and the
// window recovers as from an outage once the master is back.
func (m *hybridRule) unreachedIn(e *keyed.Entry[lease.Lease], now int64) bool {
	if !e.Value.Unreached() || m.l.shards == nil || m.l.shards.cc == nil {
		return false
	}
	m.l.sync.NotePartial(now) // the policy decides: the key recovers once its master is back
	return true
}

// noAnswer reports whether a request that waited for e's exchange goes to
// the failure policy: the wait ended late (no answer within
// Config.Timeout), or, on a Cluster whose other masters answer (the
// Limiter's breaker closed), the exchange found Redis out of reach. The
// key recovers once its master is back (NotePartial). Its master's breaker
// stays as it was: go-redis fails some exchanges of the live masters' keys
// in a pipeline that reaches a dead one, so the failure says nothing sure
// of which master is down.
func (m *hybridRule) noAnswer(e *keyed.Entry[lease.Lease], lr *lease.Rule, now int64, late bool) bool {
	s := m.l.shards
	unreached := s != nil && s.cc != nil && e.Value.Unreached()
	if unreached && !m.l.breakerOpen() {
		m.l.sync.NotePartial(now)
	}
	return late || unreached
}

// refusal names a refusal for want of a lease: ReasonNoLease only for a
// rule that waits for its leases; for the others, whose allowance is spent,
// ReasonLimited, retried after about one round trip, when the lease is due.
func refusal(lr *lease.Rule, v lease.Verdict) lease.Verdict {
	if v.Reason == local.ReasonNoLease && !lr.WaitsFirst() {
		v.Reason = local.ReasonLimited
	}
	return v
}

// waitLease decides a request of cost n for key, which its lease could not
// decide, again after each sync round, until it is decided otherwise, the
// key's exchange sent after it began to wait is answered (then it is
// refused), or the wait ends: ctx (refused with ReasonNoLease), or
// Config.Timeout, or the breaker opening (then the failure policy decides
// a key without a lease; one with a share is refused). e is key's entry,
// which the caller holds locked, and waitLease unlocks. The request's cost
// is on the key's next exchange (Await), so that the lease it brings
// covers it. Off the hot path: only requests a lease cannot decide come
// here.
func (m *hybridRule) waitLease(ctx context.Context, e *keyed.Entry[lease.Lease], lr *lease.Rule, key string, n int64) (local.Decision, error) {
	start := time.Now()
	timer := time.NewTimer(m.l.cfg.Timeout)
	defer timer.Stop()
	ticket := e.Value.Ticket(lr)
	for {
		e.Value.Await(n)
		lr.Notify(e)
		round := lr.Cluster().NextRound() // taken under the lock: a reply applied after the decision wakes us
		e.Unlock()
		late, gone := false, false
		select {
		case <-ctx.Done():
			gone = true
		case <-timer.C:
			late = true
		case <-round:
		}
		now := m.l.nowMicro()
		if e = m.lockedEntry(key, now); e == nil { // a key waited for is not idle: never evicted
			return m.waited(start, lease.Verdict{Reason: local.ReasonOverflow}, lr), nil
		}
		e.Value.Unawait(n)
		lr = m.lease.Load() // SetLimit may have replaced it
		v, signal := e.Value.Redecide(lr, now, n, !gone)
		if signal.Sync() {
			lr.Notify(e)
		}
		switch wait := signal.Wait(); {
		case gone:
			// The caller gave up: nothing is charged.
			e.Unlock()
			if v.Reason == local.ReasonOK || wait {
				v = lease.Verdict{Reason: local.ReasonNoLease, Remaining: v.Remaining, Reset: v.Reset, Retry: lr.MinGap()}
			}
			return m.waited(start, v, lr), nil
		case m.byPolicy(e, lr, now, v) || wait && v.Reason == local.ReasonNoLease && m.noAnswer(e, lr, now, late):
			// Redis is out of reach, or did not answer in time, or the
			// key's Cluster master did not.
			d := m.degraded(e, lr, now, key, n, true)
			e.Unlock()
			m.countWait(start, d)
			return localx.MarkWaited(d), nil
		case !wait:
			e.Unlock()
			return m.waited(start, v, lr), nil
		case late || m.l.breakerOpen() || e.Value.Exchanged(ticket):
			e.Unlock()
			return m.waited(start, refusal(lr, v), lr), nil
		}
	}
}

// waited dresses v, the verdict of a request that waited since start for
// its key's exchange, counts it, and marks it Waited.
func (m *hybridRule) waited(start time.Time, v lease.Verdict, lr *lease.Rule) local.Decision {
	v = refusal(lr, v)
	d := dress(v, lr.MaxCost())
	m.countWait(start, d)
	return localx.MarkWaited(d)
}

// countWait counts d, a decision that waited since start for its key's
// exchange.
func (m *hybridRule) countWait(start time.Time, d local.Decision) {
	m.counts.decision(d)
	m.l.metrics.waited(m.rs, time.Since(start), d)
}

// badCost refuses, charging nothing, a cost no lease of lr can admit.
func badCost(lr *lease.Rule, n int64) (lease.Verdict, bool) {
	switch {
	case n < 0:
		return lease.Verdict{Reason: local.ReasonInvalidCost}, true
	case n > lr.MaxCost():
		return lease.Verdict{Reason: local.ReasonCostTooHigh}, true
	}
	return lease.Verdict{}, false
}

// degraded decides for a key without a lease while Redis is out of reach,
// back in a window the outage touched (lease.Lease.Recovering), or after
// Shutdown: by the Gossip policy's estimate (on a window rule's lease, or a
// bucket rule's demand share) or FailLocal's part on a window rule's lease
// (every policy's, back from an outage), else by the rule's failure
// policy, recording in the lease what the policy admitted. charge false decides without charging (a multi-rule
// decision's check). e is key's entry, which the caller holds locked. The
// decision is not counted: the caller counts it.
func (m *hybridRule) degraded(e *keyed.Entry[lease.Lease], lr *lease.Rule, now int64, key string, n int64, charge bool) local.Decision {
	nodes := m.nodes(lr)
	shut := m.l.shut.Load()
	gossip := m.fail.policy == Gossip && m.l.gossip != nil && !shut
	// Back from an outage in a window it touched, every policy decides on
	// the key's part: FailOpen's admissions are already counted there, and
	// FailClosed's refusals would refuse what the window has room for.
	back := !m.l.breakerOpen() && e.Value.Recovering(lr, now)
	if gossip {
		if d, ok := m.gossipLease(e, lr, now, n, charge); ok {
			return d
		}
	} else if m.fail.policy == FailLocal || m.fail.policy == Gossip || shut || back {
		part := max(m.rs.limit.Load().Params().Quota/nodes, 1)
		if v, ok := e.Value.Fallback(lr, now, n, part, charge); ok {
			return m.fallbackLease(e, lr, v, charge)
		}
	}
	if held, pool, ok := e.Value.PolicyStart(lr, now); ok {
		m.beginPart(e, gossip, nodes, now, key, held, pool)
	}
	var d local.Decision
	if gossip {
		d = m.gossipBucket(e, now, key, n, charge)
	} else {
		d = m.fail.decide(nodes, now, key, n, charge)
	}
	if charge && d.Allowed() && e.Value.Charge(lr, now, n) && !shut {
		// Recorded in the lease: the next exchange reports it, and Redis
		// counts it once it answers again.
		lr.Notify(e)
	}
	return d
}

// nodes is how many nodes share lr's limit: as the last lease exchange
// counted them, or as the Config says until one did. A rule of global
// reach is shared by every region's nodes: the failure policy of a region
// whose Redis is down decides on its even part of L, L ÷ regions, not on
// the whole of it.
func (m *hybridRule) nodes(lr *lease.Rule) int64 {
	c := lr.Nodes()
	if c <= 0 {
		c = m.l.expectedNodes()
	}
	if m.rs.global {
		c *= m.regions(lr)
	}
	return c
}

// regions is how many regions share a rule of global reach, as the global
// store last counted them: at least 1.
func (m *hybridRule) regions(lr *lease.Rule) int64 {
	return max(lr.Cluster().Regions(), 1)
}

// lockedEntry returns key's entry, locked and with its digest set; nil when
// the table has no room for the key.
func (m *hybridRule) lockedEntry(key string, now int64) *keyed.Entry[lease.Lease] {
	e := m.store.Lock(key, now)
	if e != nil {
		m.l.setDigest(&e.Value, key)
	}
	return e
}

// fallbackLease turns v, a window rule's lease decision on the node's part
// of the window's limit (lease.Lease.Fallback), into a degraded Decision,
// handing an admission to the syncer when it charged. e is the key's entry,
// which the caller holds locked.
func (m *hybridRule) fallbackLease(e *keyed.Entry[lease.Lease], lr *lease.Rule, v lease.Verdict, charge bool) local.Decision {
	if charge && v.Reason == local.ReasonOK && !m.l.shut.Load() {
		lr.Notify(e)
	}
	return localx.Degraded(dress(v, lr.MaxCost()))
}

// idle is the store's eviction test: a key is forgotten once its lease is
// idle and its KeyTTL has passed.
func (m *hybridRule) idle(v *lease.Lease, now int64) bool {
	return v.Idle(now) && now-v.LastUse() >= m.rs.keyTTL
}

func (m *hybridRule) setLimit(lim localx.Limit) error {
	sr, err := syncx.NewRule(m.rs.name, lim)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidRule, err)
	}
	if m.rs.global && lim.Algorithm() != local.FixedWindow {
		return fmt.Errorf("%w: rule %q: Global needs the fixed window, not %s", ErrInvalidRule, m.rs.name, lim.Algorithm())
	}
	lr, err := m.l.sync.LeaseRule(sr)
	if err != nil {
		return fmt.Errorf("%w: rule %q: the new limit cannot be leased; register a central rule instead: %w", ErrInvalidRule, m.rs.name, err)
	}
	m.rs.dress(lr)
	m.setOutage(lr)
	m.lease.Swap(lr).Replace(lr)
	return nil
}

// dress sets what rs asks of its lease rule lr, at Register and at each
// SetLimit: no allowance (nothing admitted that Redis did not grant) for
// WaitFirst and FailClosed, and for a rule of global reach, whose leases
// come from its region's part of the limit.
func (rs *ruleState) dress(lr *lease.Rule) {
	if rs.wait == WaitFirst || rs.policy == FailClosed || rs.global {
		lr.SetWaitFirst()
	}
	if rs.global {
		lr.SetGlobal()
	}
}

func (m *hybridRule) sweep(now time.Time) int {
	return m.store.Sweep(now.UnixMicro()) + m.fail.sweep(now)
}

func (m *hybridRule) stats() local.Stats { return local.Stats(m.store.Stats()) }

func (m *hybridRule) close() { m.fail.close() }

// remove hands the rule's keys to the syncer for good, on its unregistering:
// their next exchange reports what they used and gives their leases back,
// then the syncer forgets them (lease.Rule.Remove). The caller holds the
// Limiter's mu, which SetLimit takes too, so the rule marked is the one in
// force.
func (m *hybridRule) remove() { m.lease.Load().Remove() }

// setDigest names a new key's lease in Redis: the digest is computed once,
// on the key's first decision, under the Keyspace's Secret, as the syncer's
// Keyspace names the key (keyname.Digest).
func (l *Limiter) setDigest(k *lease.Lease, key string) {
	if k.Digest == ([lease.DigestSize]byte{}) {
		k.Digest = keyname.Digest(l.cfg.Keyspace.Secret, key)
	}
}

// dress turns a lease's verdict into a Decision; limit is the most one
// request may cost.
func dress(v lease.Verdict, limit int64) local.Decision {
	return localx.NewDecision(v.Reason == local.ReasonOK, v.Reason, limit, v.Remaining, usec.Duration(v.Reset), usec.Duration(v.Retry))
}
