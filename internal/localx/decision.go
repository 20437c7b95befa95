// Package localx is what the module's own packages reach in package local
// beyond its API: building Decisions (for the distributed modes, whose
// Decisions are local's type), compiled limits with the constants the
// Redis scripts and the leases take, and multi-rule decisions at a given
// time with a commit step. Package local sets the functions it cannot
// export (internal/localhook) when it loads.
package localx

import (
	"time"

	"github.com/hybridlimit/hybridlimit/internal/decision"
	"github.com/hybridlimit/hybridlimit/local"
)

// NewDecision returns the Decision of these figures, which mean what the
// Decision methods of the same names return, neither degraded nor waited.
// A capacity beyond ±2^53 loses its top bits.
func NewDecision(allowed bool, reason local.Reason, capacity, remaining int64, resetAfter, retryAfter time.Duration) local.Decision {
	return local.Decision(decision.Make(allowed, uint8(reason), capacity, remaining, resetAfter, retryAfter))
}

// Degraded returns d marked as made without the shared store
// (Decision.Degraded), its figures unchanged.
func Degraded(d local.Decision) local.Decision {
	return local.Decision(decision.Decision(d).AsDegraded())
}

// MarkWaited returns d marked as having waited for the shared store
// (Decision.MarkWaited), its figures unchanged.
func MarkWaited(d local.Decision) local.Decision {
	return local.Decision(decision.Decision(d).AsWaited())
}

// Refused returns d with Allowed false and its other figures unchanged: in
// a multi-rule decision, the Decision of a request that its own rule would
// admit, refused because another rule did.
func Refused(d local.Decision) local.Decision {
	return local.Decision(decision.Decision(d).Refused())
}

// Outcome is a Decision as plain fields, with the meanings of the Decision
// methods of the same names: to build a Decision (Outcome.Decision), or to
// read one whole (OutcomeOf). On a hot path prefer NewDecision: an Outcome
// is built in memory.
type Outcome struct {
	Allowed    bool
	Reason     local.Reason
	Capacity   int64 // within ±2^53
	Remaining  int64
	ResetAfter time.Duration
	RetryAfter time.Duration
	Degraded   bool
	Waited     bool
}

// Decision returns the Decision of o's figures.
func (o Outcome) Decision() local.Decision {
	d := decision.Make(o.Allowed, uint8(o.Reason), o.Capacity, o.Remaining, o.ResetAfter, o.RetryAfter)
	if o.Degraded {
		d = d.AsDegraded()
	}
	if o.Waited {
		d = d.AsWaited()
	}
	return local.Decision(d)
}

// OutcomeOf returns d's figures as an Outcome.
func OutcomeOf(d local.Decision) Outcome {
	return Outcome{
		Allowed: d.Allowed(), Reason: d.Reason(), Capacity: d.Capacity(),
		Remaining: d.Remaining(), ResetAfter: d.ResetAfter(), RetryAfter: d.RetryAfter(),
		Degraded: d.Degraded(), Waited: Waited(d),
	}
}

// Waited reports whether d waited for the shared store: a hybrid request
// that only its key's exchange with Redis could decide (what the
// hybridlimit.lease.waits metric counts).
func Waited(d local.Decision) bool { return decision.Decision(d).Waited() }
