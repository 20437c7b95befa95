package hybrid

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/hybridlimit/hybridlimit/internal/localx"
	"github.com/hybridlimit/hybridlimit/internal/syncx"
	"github.com/hybridlimit/hybridlimit/local"
	"github.com/hybridlimit/hybridlimit/syncer"
)

// centralRule runs a rule in Central mode: one script in Redis per
// decision, and the rule's failure policy when Redis cannot decide.
type centralRule struct {
	rs    *ruleState
	redis atomic.Pointer[syncer.Rule]
	fail  failover
}

var _ modeRule = (*centralRule)(nil)

func newCentralRule(rs *ruleState, sr *syncer.Rule) (*centralRule, error) {
	m := &centralRule{rs: rs, fail: newFailover(rs)}
	m.redis.Store(sr)
	return m, nil
}

func (m *centralRule) kind() Mode { return Central }

func (m *centralRule) allow(ctx context.Context, now int64, key string, n int64) (local.Decision, error) {
	l := m.rs.l
	if l.breakerOpen() {
		// Redis is known down (or the Limiter shut): no call, no wait.
		if d, bad := m.badCost(n); bad {
			m.rs.counts.count(d.Reason())
			return d, nil
		}
		d := m.failed(now, key, n)
		m.rs.counts.decision(d)
		return d, nil
	}
	sr := m.redis.Load()
	// On a Cluster, the master of the key's slot: its breaker alone sends
	// the key to the policy.
	addr := l.shards.master(sr, key)
	if l.shards.skip(addr, now) {
		if d, bad := m.badCost(n); bad {
			m.rs.counts.count(d.Reason())
			return d, nil
		}
		d := m.failed(now, key, n)
		m.rs.counts.decision(d)
		return d, nil
	}
	var d local.Decision
	var err error
	if l.cfg.virtualTime {
		d, err = syncx.AllowNAt(ctx, l.central, time.UnixMicro(now), sr, key, n)
	} else {
		d, err = l.central.AllowN(ctx, sr, key, n)
	}
	if err != nil {
		d := m.failed(now, key, n)
		m.rs.counts.decision(d)
		return d, l.centralFailed(ctx, now, addr, err)
	}
	l.shards.ok(addr)
	m.rs.counts.count(d.Reason())
	return d, nil
}

// centralFailed takes the error of a central call for a key of the Cluster
// master at addr ("" outside a Cluster): it opens the breaker when Redis
// is unavailable (not when the caller cancelled ctx), that master's alone
// on a Cluster, and returns the error the decision comes with: nil, or one
// wrapping ErrRedis.
func (l *Limiter) centralFailed(ctx context.Context, now int64, addr string, err error) error {
	if !errors.Is(ctx.Err(), context.Canceled) {
		l.redisErrs.failed(l, err)
	}
	switch {
	case errors.Is(err, syncer.ErrRedis):
		l.shards.ok(addr) // it answered
		return fmt.Errorf("hybrid: redis answered with an error; the failure policy decided: %w", err)
	case errors.Is(ctx.Err(), context.Canceled):
		// The caller gave up: that says nothing of Redis.
		l.shards.released(addr)
	case addr != "":
		l.shards.failed(addr, now, err)
	default:
		l.markUnavailable(now, err)
	}
	return nil
}

// badCost refuses, as Redis would without running a script, a cost the rule
// can never admit.
func (m *centralRule) badCost(n int64) (local.Decision, bool) {
	lim := m.rs.limit.Load().MaxCost()
	switch {
	case n < 0:
		return localx.Outcome{Reason: local.ReasonInvalidCost, Capacity: lim}.Decision(), true
	case n > lim:
		return localx.Outcome{Reason: local.ReasonCostTooHigh, Capacity: lim}.Decision(), true
	}
	return local.Decision{}, false
}

// failed decides by the failure policy, FailLocal splitting the limit
// among the nodes the Config expects (Sync.Nodes): a central rule holds no
// lease that counts them.
func (m *centralRule) failed(now int64, key string, n int64) local.Decision {
	return m.fail.decide(m.rs.l.expectedNodes(), now, key, n, true)
}

func (m *centralRule) setLimit(lim localx.Limit) error {
	sr, err := syncx.NewRule(m.rs.name, lim)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidRule, err)
	}
	m.redis.Store(sr)
	return nil
}

func (m *centralRule) sweep(now time.Time) int { return m.fail.sweep(now) }

func (m *centralRule) stats() local.Stats { return local.Stats{} }

func (m *centralRule) close() { m.fail.close() }
