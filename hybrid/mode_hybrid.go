package hybrid

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/hybridlimit/hybridlimit/fallback"
	"github.com/hybridlimit/hybridlimit/internal/keyed"
	"github.com/hybridlimit/hybridlimit/internal/lease"
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
	salt   fallback.Digest // names the rule's keys on the gossip (gossipSalt)
}

var _ modeRule = (*hybridRule)(nil)

// newHybridRule returns the hybrid form of sr, at any limit and any number
// of nodes. Its error wraps syncer.ErrNotLeasable when the limit has no
// lease (the sliding window log; a bucket past the scripts' exact range).
func newHybridRule(rs *ruleState, sr *syncer.Rule, lim local.Limit) (*hybridRule, error) {
	l := rs.l
	lr, err := l.sync.LeaseRule(sr)
	if err != nil {
		return nil, err
	}
	if rs.waitLease {
		lr.SetWaitFirst()
	}
	m := &hybridRule{rs: rs, l: rs.l, counts: rs.counts, salt: gossipSalt(rs.name)}
	if m.store, err = keyed.New(l.storeConfig(), m.idle, nil); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidConfig, err)
	}
	if m.fail, err = newFailover(rs, lim); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	m.setOutage(lr)
	m.lease.Store(lr)
	return m, nil
}

func (m *hybridRule) kind() Mode { return Hybrid }

// allow is the hybrid hot path: the key's entry, locked once for the whole
// decision, its lease, and a hand to the syncer when the lease asks for it.
// A key without a lease while Redis is out of reach is decided by the
// failure policy (degraded), under the same lock; one whose rule waits for
// its lease waits for the next round (waitLease). Both, and bad costs, are
// decided out of line (noLease, refuseCost), so that the usual case, a
// decision on the lease, admitted or refused, stays short.
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
	if signal {
		lr.Notify(e)
	}
	if v.Reason == local.ReasonNoLease {
		return m.noLease(ctx, e, lr, now, key, n, v)
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

// noLease decides a request that key's lease refused for want of one, v:
// by the failure policy while Redis is out of reach or the key recovers
// from an outage (degraded), after the next rounds for a rule that waits
// for its leases (waitLease), else as a refusal. e is key's entry, which
// the caller holds locked, and noLease unlocks.
func (m *hybridRule) noLease(ctx context.Context, e *keyed.Entry[lease.Lease], lr *lease.Rule, now int64, key string, n int64, v lease.Verdict) (local.Decision, error) {
	switch {
	case e.Value.Recovering(lr, now) || m.l.breakerOpen():
		d := m.degraded(e, lr, now, key, n)
		e.Unlock()
		return d, nil
	case lr.WaitsFirst():
		return m.waitLease(ctx, e, lr, key, n)
	}
	e.Unlock()
	v = refusal(lr, v)
	m.counts.count(v.Reason)
	return dress(v, lr.MaxCost()), nil
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

// waitLease decides a request for key, refused for want of a lease, again
// after each sync round until it is decided otherwise or ctx ends (then it
// is refused with ReasonNoLease). e is key's entry, which the caller holds
// locked, and waitLease unlocks. Off the hot path: only rules with
// WaitForLease come here.
func (m *hybridRule) waitLease(ctx context.Context, e *keyed.Entry[lease.Lease], lr *lease.Rule, key string, n int64) (local.Decision, error) {
	v := lease.Verdict{Reason: local.ReasonNoLease}
	for {
		round := lr.Cluster().NextRound() // taken under the lock: a reply applied after the decision wakes us
		e.Unlock()
		select {
		case <-ctx.Done():
			m.counts.count(v.Reason)
			return dress(v, lr.MaxCost()), nil
		case <-round:
		}
		now := m.l.nowMicro()
		lr = m.lease.Load() // SetLimit may have replaced it
		if e = m.lockedEntry(key, now); e == nil {
			m.counts.count(local.ReasonOverflow)
			return dress(lease.Verdict{Reason: local.ReasonOverflow}, lr.MaxCost()), nil
		}
		var signal bool
		v, signal = e.Value.Decide(lr, now, n)
		if signal {
			lr.Notify(e)
		}
		if v.Reason != local.ReasonNoLease {
			e.Unlock()
			m.counts.count(v.Reason)
			return dress(v, lr.MaxCost()), nil
		}
		if m.l.breakerOpen() {
			d := m.degraded(e, lr, now, key, n)
			e.Unlock()
			return d, nil
		}
	}
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
// Shutdown: by Fallback's gossip estimate (on a window rule's lease, or a
// bucket rule's demand share) or FailLocal's part on a window rule's lease,
// else by the rule's failure policy, recording in the lease what the policy
// admitted. e is key's entry, which the caller holds locked.
func (m *hybridRule) degraded(e *keyed.Entry[lease.Lease], lr *lease.Rule, now int64, key string, n int64) local.Decision {
	// The nodes: as the last lease exchange counted them, or as the Config
	// says until one did.
	nodes := m.l.expectedNodes()
	if c := lr.Nodes(); c > 0 {
		nodes = c
	}
	shut := m.l.shut.Load()
	gossip := m.fail.policy == Fallback && m.l.gossip != nil && !shut
	if gossip {
		if d, ok := m.gossipLease(e, lr, now, n); ok {
			return d
		}
	} else if m.fail.policy == FailLocal || m.fail.policy == Fallback || shut {
		part := max(m.rs.limit.Load().Params().Limit/nodes, 1)
		if v, ok := e.Value.Fallback(lr, now, n, part); ok {
			return m.fallbackLease(e, lr, v)
		}
	}
	var d local.Decision
	if gossip {
		d = m.gossipBucket(e, now, key, n)
	} else {
		d = m.fail.decide(nodes, now, key, n)
	}
	if d.Allowed() && e.Value.Charge(lr, now, n) && !shut {
		// Recorded in the lease: the next exchange reports it, and Redis
		// counts it once it answers again.
		lr.Notify(e)
	}
	return d
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
// handing an admission to the syncer. e is the key's entry, which the
// caller holds locked.
func (m *hybridRule) fallbackLease(e *keyed.Entry[lease.Lease], lr *lease.Rule, v lease.Verdict) local.Decision {
	if v.Reason == local.ReasonOK && !m.l.shut.Load() {
		lr.Notify(e)
	}
	m.counts.fallback.Add(1)
	m.counts.count(v.Reason)
	return dress(v, lr.MaxCost()).AsDegraded()
}

// idle is the store's eviction test: a key is forgotten once its lease is
// idle and its KeyTTL has passed.
func (m *hybridRule) idle(v *lease.Lease, now int64) bool {
	return v.Idle(now) && now-v.LastUse() >= m.rs.keyTTL
}

func (m *hybridRule) setLimit(lim local.Limit) error {
	sr, err := syncer.NewRule(m.rs.name, lim)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidRule, err)
	}
	lr, err := m.l.sync.LeaseRule(sr)
	if err != nil {
		return fmt.Errorf("%w: rule %q: the new limit cannot be leased; register a central rule instead: %w", ErrInvalidRule, m.rs.name, err)
	}
	if m.rs.waitLease {
		lr.SetWaitFirst()
	}
	m.setOutage(lr)
	m.lease.Swap(lr).Replace(lr)
	return nil
}

func (m *hybridRule) sweep(now time.Time) int {
	return m.store.Sweep(now.UnixMicro()) + m.fail.sweep(now)
}

func (m *hybridRule) stats() local.Stats { return local.Stats(m.store.Stats()) }

func (m *hybridRule) close() { m.fail.close() }

// setDigest names a new key's lease in Redis: the digest is computed once,
// on the key's first decision.
func (l *Limiter) setDigest(k *lease.Lease, key string) {
	if k.Digest == ([16]byte{}) {
		k.Digest = l.sync.Keyspace().DigestBytes(key)
	}
}

// dress turns a lease's verdict into a Decision; limit is the most one
// request may cost.
func dress(v lease.Verdict, limit int64) local.Decision {
	return local.NewDecision(v.Reason == local.ReasonOK, v.Reason, limit, v.Remaining, usec.Duration(v.Reset), usec.Duration(v.Retry))
}
