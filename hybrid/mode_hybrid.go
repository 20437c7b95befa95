package hybrid

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/hybridlimit/hybridlimit/internal/lease"
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
	store  *local.Store[lease.Lease]
	fail   failover
}

var _ modeRule = (*hybridRule)(nil)

// newHybridRule returns the hybrid form of sr, or nil when its limit cannot
// be split into leases (the sliding window log, or a limit too small to
// split among the nodes): such a rule runs Central.
func newHybridRule(rs *ruleState, sr *syncer.Rule, lim local.Limit) (*hybridRule, error) {
	l := rs.l
	lr, err := l.sync.LeaseRule(sr)
	if err != nil || !lease.Split(lim, l.sync.Interval(), int(l.expectedNodes())) {
		return nil, nil
	}
	m := &hybridRule{rs: rs, l: rs.l, counts: rs.counts}
	m.lease.Store(lr)
	if m.store, err = local.NewStore(l.cfg.Store, m.idle); err != nil {
		return nil, fmt.Errorf("%w: Store: %w", ErrInvalidConfig, err)
	}
	if m.fail, err = newFailover(rs, lim); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	return m, nil
}

func (m *hybridRule) kind() Mode { return Hybrid }

// allow is the hybrid hot path: the key's entry, its lease, and a hand to
// the syncer when the lease asks for it. A key without a lease while Redis
// is down goes to the failure policy.
func (m *hybridRule) allow(_ context.Context, now int64, key string, n int64) (local.Decision, error) {
	lr := m.lease.Load()
	limit := lr.MaxCost()
	var v lease.Verdict
	switch {
	case n < 0:
		v.Reason = local.ReasonInvalidCost
	case n > limit:
		v.Reason = local.ReasonCostTooHigh
	default:
		e := m.lockedEntry(key, now)
		if e == nil {
			v.Reason = local.ReasonOverflow
			break
		}
		var signal bool
		v, signal = e.Value.Decide(lr, now, n)
		if signal {
			lr.Notify(e)
		}
		e.Unlock()
		if v.Reason == local.ReasonNoLease && m.l.unavailable.Load() != 0 {
			return m.failed(now, key, n)
		}
	}
	m.counts.count(v.Reason)
	return dress(v, limit), nil
}

// failed decides a request for a key without a lease while Redis is out of
// reach: FailLocal on the key's lease for a window rule, the policy
// otherwise; what the policy admits is charged to the lease.
func (m *hybridRule) failed(now int64, key string, n int64) (local.Decision, error) {
	if m.fail.policy == FailLocal {
		if d, ok := m.fallbackLease(now, key, n); ok {
			return d, errUnavailable
		}
	}
	// The nodes: as the last lease exchange counted them, or as the Config
	// says until one did.
	nodes := m.l.expectedNodes()
	if c := m.lease.Load().Nodes(); c > 0 {
		nodes = c
	}
	d, err := m.fail.decide(nodes, now, key, n, errUnavailable)
	if d.Allowed() {
		m.chargeLease(now, key, n)
	}
	return d, err
}

// lockedEntry returns key's entry, locked and with its digest set; nil when
// the table has no room for the key.
func (m *hybridRule) lockedEntry(key string, now int64) *local.Entry[lease.Lease] {
	for {
		e := m.store.Get(key, now)
		if e == nil {
			return nil
		}
		e.Lock()
		if !e.Evicted() {
			m.l.setDigest(&e.Value, key)
			return e
		}
		e.Unlock() // evicted since Get: look it up again
	}
}

// chargeLease records in a key's lease what a failure policy admitted for
// it while Redis was out of reach: the next exchange reports it, and Redis
// counts it once it answers again.
func (m *hybridRule) chargeLease(now int64, key string, n int64) {
	lr := m.lease.Load()
	e := m.lockedEntry(key, now)
	if e == nil {
		return // the table is full: nothing to record it in
	}
	if e.Value.Charge(lr, now, n) {
		lr.Notify(e)
	}
	e.Unlock()
}

// fallbackLease decides by FailLocal on a window rule's lease (see
// lease.Lease.Fallback); ok is false for bucket rules, and for a key the
// table has no room for.
func (m *hybridRule) fallbackLease(now int64, key string, n int64) (d local.Decision, ok bool) {
	lr := m.lease.Load()
	part := max(m.rs.limit.Load().Params().Limit/max(lr.Nodes(), 1), 1)
	e := m.lockedEntry(key, now)
	if e == nil {
		return local.Decision{}, false
	}
	v, ok := e.Value.Fallback(lr, now, n, part)
	if ok && v.Reason == local.ReasonOK {
		lr.Notify(e)
	}
	e.Unlock()
	if !ok {
		return local.Decision{}, false
	}
	m.counts.fallback.Add(1)
	m.counts.count(v.Reason)
	return dress(v, lr.MaxCost()), true
}

// idle is the store's eviction test: a key is forgotten once its lease is
// idle and its KeyTTL has passed.
func (m *hybridRule) idle(v *lease.Lease, now int64) bool {
	return v.Idle(now) && now-v.LastUse() >= m.rs.keyTTL
}

func (m *hybridRule) join(b *multiBatch, i int, _ Request) {
	b.hybrid = append(b.hybrid, hybridRequest{m: m, i: i})
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
	return local.NewDecision(v.Reason == local.ReasonOK, v.Reason, limit, v.Remaining, micros(v.Reset), micros(v.Retry))
}
