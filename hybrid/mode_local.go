package hybrid

import (
	"context"
	"fmt"
	"time"

	"github.com/hybridlimit/hybridlimit/internal/localx"
	"github.com/hybridlimit/hybridlimit/local"
)

// localRule runs a rule in Local mode: a local.Limiter of this node's own.
type localRule struct {
	lim    *local.Limiter
	counts *counters // the rule's
}

var _ modeRule = (*localRule)(nil)

func newLocalRule(rs *ruleState, lim localx.Limit) (*localRule, error) {
	ll, err := local.New(lim.Params(), rs.l.localConfig())
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	return &localRule{lim: ll, counts: rs.counts}, nil
}

func (m *localRule) kind() Mode { return Local }

func (m *localRule) allow(_ context.Context, now int64, key string, n int64) (local.Decision, error) {
	d := m.lim.AllowNAt(time.UnixMicro(now), key, n)
	m.counts.count(d.Reason())
	return d, nil
}

func (m *localRule) setLimit(lim localx.Limit) error { return m.lim.SetLimit(lim.Params()) }

func (m *localRule) sweep(now time.Time) int { return m.lim.SweepAt(now) }

func (m *localRule) stats() local.Stats { return m.lim.Stats() }

func (m *localRule) close() { m.lim.Close() }
