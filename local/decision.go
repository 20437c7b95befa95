package local

import (
	"fmt"
	"time"
)

// Reason tells why a request was decided the way it was, beyond Allowed. The
// zero value, ReasonOK, is an ordinary admission.
type Reason uint8

const (
	// ReasonOK: admitted within the limit.
	ReasonOK Reason = iota
	// ReasonLimited: the limit is reached. The same request is admitted
	// after RetryAfter if nothing else consumes in between.
	ReasonLimited
	// ReasonCostTooHigh: the cost is above what the limit can ever admit
	// (Decision.Capacity). Retrying will not help; RetryAfter is zero. Such a
	// request is refused without looking at the key (as the Redis twin
	// refuses it without running a script), so Remaining and ResetAfter are
	// zero too, whatever the key's state.
	ReasonCostTooHigh
	// ReasonInvalidCost: the cost is negative.
	ReasonInvalidCost
	// ReasonOverflow: the key is new and the key table is at its cap.
	// Whether the request is admitted depends on Config.Overflow.
	ReasonOverflow
	// ReasonNoLease is used by the hybrid limiter: the request waited for
	// its key's lease from Redis, and its context ended first (or, for a
	// rule that waits for a key's first lease, the node holds none yet);
	// RetryAfter is about one round trip to Redis.
	ReasonNoLease
	// ReasonUnavailable is used by the distributed modes: the shared store
	// could not decide, and the failure policy decided without a limit
	// (the Decision is Degraded): admitting everything (FailOpen), or
	// refusing everything (FailClosed). A policy that decides on a part of
	// the limit refuses with ReasonLimited, Degraded.
	ReasonUnavailable
)

var reasonNames = [...]string{
	ReasonOK:          "ok",
	ReasonLimited:     "limited",
	ReasonCostTooHigh: "cost_too_high",
	ReasonInvalidCost: "invalid_cost",
	ReasonOverflow:    "overflow",
	ReasonNoLease:     "no_lease",
	ReasonUnavailable: "unavailable",
}

// String returns the reason in snake case.
func (r Reason) String() string {
	if int(r) < len(reasonNames) {
		return reasonNames[r]
	}
	return "unknown"
}

// Decision is the outcome of one request, read through its methods. It is
// four words, so that Go returns it and keeps it in registers: a struct of
// more than four fields or 32 bytes is built in memory at every return and
// copied again by the caller, a large part of a decision's cost. The zero
// Decision is a rejection with every figure zero.
//
// Code that builds Decisions of its own (another limiter, a test) writes an
// Outcome and calls its Decision method, or calls NewDecision.
type Decision struct {
	meta       uint64 // allowed in bit 0, the Reason in bits 1-7, waited in bit 8, degraded in bit 9, Limit in bits 10-63 (signed)
	remaining  int64
	resetAfter time.Duration
	retryAfter time.Duration
}

// Allowed reports whether the request was admitted. A request that is not
// admitted consumes nothing.
func (d Decision) Allowed() bool { return d.meta&1 != 0 }

// Reason tells a rejection for "try later" (ReasonLimited) from one that
// retrying cannot fix, and marks admissions made by a policy rather than by
// the limit (ReasonOverflow, ReasonUnavailable).
func (d Decision) Reason() Reason { return Reason(d.meta>>1) & reasonMask }

// Capacity is the most Remaining can be: the limit per window for the window
// algorithms, the burst for the bucket algorithms. It is always the rule's
// figure.
func (d Decision) Capacity() int64 { return int64(d.meta) >> limitShift }

// Degraded reports whether the decision was made without the shared store
// (Redis unreachable, or the Limiter shut down): by a failure policy, or on
// this node's part of the limit. Such a decision is an ordinary one, with no
// error; Degraded is for metrics and logs.
func (d Decision) Degraded() bool { return d.meta&degradedBit != 0 }

// AsDegraded returns d marked as made without the shared store (Degraded),
// its figures unchanged.
func (d Decision) AsDegraded() Decision {
	d.meta |= degradedBit
	return d
}

// Waited reports whether the decision waited for the shared store: a
// hybrid request that only an exchange with Redis could decide (its key's
// lease used up or not there yet) and that waited for it, about one round
// trip. Such decisions are counted apart; a local decision never waits.
func (d Decision) Waited() bool { return d.meta&waitedBit != 0 }

// AsWaited returns d marked as having waited for the shared store
// (Waited), its figures unchanged.
func (d Decision) AsWaited() Decision {
	d.meta |= waitedBit
	return d
}

// The layout of Decision.meta above the allowed bit and the Reason.
const (
	reasonMask  = 1<<7 - 1
	waitedBit   = 1 << 8
	degradedBit = 1 << 9
	limitShift  = 10
)

// Remaining is how much more could be admitted now, after this request. For
// the sliding window counter it is rounded down from the weighted estimate.
// Never negative; zero for ReasonCostTooHigh, which does not look at the
// key.
func (d Decision) Remaining() int64 { return d.remaining }

// ResetAfter is the time until the key is back to its initial state, with
// all of Limit available again. Zero when it already is, and for
// ReasonCostTooHigh, which does not look at the key.
func (d Decision) ResetAfter() time.Duration { return d.resetAfter }

// RetryAfter is zero for admitted requests. For ReasonLimited it is the
// shortest wait after which the same request is admitted, if no other
// request consumes in between.
func (d Decision) RetryAfter() time.Duration { return d.retryAfter }

// Refused returns d with Allowed false and its other figures unchanged: in
// a multi-rule decision, the Decision of a request that its own rule would
// admit, refused because another rule did.
func (d Decision) Refused() Decision {
	d.meta &^= 1
	return d
}

// Outcome returns d's figures as an Outcome, a plain struct to print or
// compare field by field.
func (d Decision) Outcome() Outcome {
	return Outcome{
		Allowed: d.Allowed(), Reason: d.Reason(), Capacity: d.Capacity(),
		Remaining: d.remaining, ResetAfter: d.resetAfter, RetryAfter: d.retryAfter,
		Degraded: d.Degraded(), Waited: d.Waited(),
	}
}

// String describes d on one line, as in
// "allowed reason=ok capacity=10 remaining=7 reset=1s retry=0s", with
// " waited" and " degraded" at the end when Waited and Degraded.
func (d Decision) String() string {
	verb := "rejected"
	if d.Allowed() {
		verb = "allowed"
	}
	deg := ""
	if d.Waited() {
		deg = " waited"
	}
	if d.Degraded() {
		deg += " degraded"
	}
	return fmt.Sprintf("%s reason=%s capacity=%d remaining=%d reset=%s retry=%s%s",
		verb, d.Reason(), d.Capacity(), d.remaining, d.resetAfter, d.retryAfter, deg)
}

// Outcome is a Decision as plain fields, with the meanings of the Decision
// methods of the same names: to build a Decision (Outcome.Decision), or to
// read one whole (Decision.Outcome).
type Outcome struct {
	Allowed    bool
	Reason     Reason
	Capacity   int64 // within ±2^53, which every Limit's MaxCost is (below 2^53)
	Remaining  int64
	ResetAfter time.Duration
	RetryAfter time.Duration
	Degraded   bool
	Waited     bool
}

// Decision returns the Decision of o's figures. A Capacity beyond ±2^53 loses
// its top bits. On a hot path prefer NewDecision: an Outcome, seven fields,
// is built in memory.
func (o Outcome) Decision() Decision {
	d := makeDecision(o.Allowed, o.Reason, o.Capacity, o.Remaining, o.ResetAfter, o.RetryAfter)
	if o.Degraded {
		d = d.AsDegraded()
	}
	if o.Waited {
		d = d.AsWaited()
	}
	return d
}

// NewDecision returns the Decision of these figures, which mean what the
// Decision methods of the same names return: Outcome.Decision with the
// figures in order, for a hot path (another limiter's), not Degraded (see
// AsDegraded). A limit beyond ±2^53 loses its top bits.
func NewDecision(allowed bool, reason Reason, limit, remaining int64, resetAfter, retryAfter time.Duration) Decision {
	return makeDecision(allowed, reason, limit, remaining, resetAfter, retryAfter)
}

func makeDecision(allowed bool, r Reason, limit, remaining int64, reset, retry time.Duration) Decision {
	var a uint64
	if allowed {
		a = 1
	}
	return Decision{meta: uint64(limit)<<limitShift | uint64(r&reasonMask)<<1 | a, remaining: remaining, resetAfter: reset, retryAfter: retry}
}
