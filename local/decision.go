package local

import (
	"fmt"
	"time"

	"github.com/hybridlimit/hybridlimit/internal/decision"
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
// four words, returned by value in registers. The zero Decision is a
// rejection with every figure zero.
type Decision decision.Decision

// Allowed reports whether the request was admitted. A request that is not
// admitted consumes nothing.
func (d Decision) Allowed() bool { return decision.Decision(d).Allowed() }

// Reason tells a rejection for "try later" (ReasonLimited) from one that
// retrying cannot fix, and marks admissions made by a policy rather than by
// the limit (ReasonOverflow, ReasonUnavailable).
func (d Decision) Reason() Reason { return Reason(decision.Decision(d).Reason()) }

// Capacity is the most Remaining can be: the quota per window for the
// window algorithms, the burst for the bucket algorithms. It is always the
// rule's figure.
func (d Decision) Capacity() int64 { return decision.Decision(d).Capacity() }

// Degraded reports whether the decision was made without the shared store
// (Redis unreachable, or the Limiter shut down): by a failure policy, or on
// this node's part of the limit. Such a decision is an ordinary one, with no
// error; Degraded is for metrics and logs.
func (d Decision) Degraded() bool { return decision.Decision(d).Degraded() }

// waited reports whether the decision waited for the shared store: a
// hybrid request that only an exchange with Redis could decide (its key's
// lease used up or not there yet) and that waited for it, about one round
// trip. Such decisions are counted apart; a local decision never waits.
func (d Decision) waited() bool { return decision.Decision(d).Waited() }

// Remaining is how much more could be admitted now, after this request. For
// the sliding window counter it is rounded down from the weighted estimate.
// Never negative; zero for ReasonCostTooHigh, which does not look at the
// key.
func (d Decision) Remaining() int64 { return decision.Decision(d).Remaining() }

// ResetAfter is the time until the key is back to its initial state, with
// all of its quota available again. Zero when it already is, and for
// ReasonCostTooHigh, which does not look at the key.
func (d Decision) ResetAfter() time.Duration { return decision.Decision(d).ResetAfter() }

// RetryAfter is zero for admitted requests. For ReasonLimited it is the
// shortest wait after which the same request is admitted, if no other
// request consumes in between.
func (d Decision) RetryAfter() time.Duration { return decision.Decision(d).RetryAfter() }

// String describes d on one line, as in
// "allowed reason=ok capacity=10 remaining=7 reset=1s retry=0s", with
// " waited" and " degraded" at the end when Waited and Degraded.
func (d Decision) String() string {
	verb := "rejected"
	if d.Allowed() {
		verb = "allowed"
	}
	deg := ""
	if d.waited() {
		deg = " waited"
	}
	if d.Degraded() {
		deg += " degraded"
	}
	return fmt.Sprintf("%s reason=%s capacity=%d remaining=%d reset=%s retry=%s%s",
		verb, d.Reason(), d.Capacity(), d.Remaining(), d.ResetAfter(), d.RetryAfter(), deg)
}

func makeDecision(allowed bool, r Reason, capacity, remaining int64, reset, retry time.Duration) Decision {
	return Decision(decision.Make(allowed, uint8(r), capacity, remaining, reset, retry))
}
