// Package decision holds the representation of package local's Decision,
// which local defines as this type (local.Decision(d) converts at no cost),
// and the plumbing the module's other limiters build Decisions with:
// marking one degraded, waited or refused. Users read Decisions through
// local's methods; these constructors are not part of the API.
package decision

import "time"

// Decision is the outcome of one request. It is four words, so that Go
// returns it and keeps it in registers: a struct of more than four fields
// or 32 bytes is built in memory at every return and copied again by the
// caller, a large part of a decision's cost.
type Decision struct {
	meta       uint64 // allowed in bit 0, the reason in bits 1-7, waited in bit 8, degraded in bit 9, the capacity in bits 10-63 (signed)
	remaining  int64
	resetAfter time.Duration
	retryAfter time.Duration
}

// The layout of Decision.meta above the allowed bit and the reason.
const (
	reasonMask  = 1<<7 - 1
	waitedBit   = 1 << 8
	degradedBit = 1 << 9
	capShift    = 10
)

// Make returns the Decision of these figures, which mean what local's
// Decision methods of the same names return. A capacity beyond ±2^53 loses
// its top bits.
func Make(allowed bool, reason uint8, capacity, remaining int64, resetAfter, retryAfter time.Duration) Decision {
	var a uint64
	if allowed {
		a = 1
	}
	return Decision{meta: uint64(capacity)<<capShift | uint64(reason&reasonMask)<<1 | a, remaining: remaining, resetAfter: resetAfter, retryAfter: retryAfter}
}

// Allowed reports whether the request was admitted.
func (d Decision) Allowed() bool { return d.meta&1 != 0 }

// Reason is the decision's reason, as local.Reason's value.
func (d Decision) Reason() uint8 { return uint8(d.meta>>1) & reasonMask }

// Capacity is the most Remaining can be.
func (d Decision) Capacity() int64 { return int64(d.meta) >> capShift }

// Degraded reports whether the decision was made without the shared store.
func (d Decision) Degraded() bool { return d.meta&degradedBit != 0 }

// Waited reports whether the decision waited for the shared store.
func (d Decision) Waited() bool { return d.meta&waitedBit != 0 }

// Remaining is how much more could be admitted now.
func (d Decision) Remaining() int64 { return d.remaining }

// ResetAfter is the time until the key is back to its initial state.
func (d Decision) ResetAfter() time.Duration { return d.resetAfter }

// RetryAfter is the shortest wait after which the request is admitted.
func (d Decision) RetryAfter() time.Duration { return d.retryAfter }

// AsDegraded returns d marked as made without the shared store, its
// figures unchanged.
func (d Decision) AsDegraded() Decision {
	d.meta |= degradedBit
	return d
}

// AsWaited returns d marked as having waited for the shared store, its
// figures unchanged.
func (d Decision) AsWaited() Decision {
	d.meta |= waitedBit
	return d
}

// Refused returns d with Allowed false and its other figures unchanged: in
// a multi-rule decision, the Decision of a request that its own rule would
// admit, refused because another rule did.
func (d Decision) Refused() Decision {
	d.meta &^= 1
	return d
}
