package local

import "time"

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
	// (Decision.Limit). Retrying will not help; RetryAfter is zero.
	ReasonCostTooHigh
	// ReasonInvalidCost: the cost is negative.
	ReasonInvalidCost
	// ReasonOverflow: the key is new and the key table is at its cap.
	// Whether the request is admitted depends on Config.Overflow.
	ReasonOverflow
	// ReasonNoLease is used by the hybrid limiter: the node holds no lease
	// for the key yet; RetryAfter is about one round trip to Redis.
	ReasonNoLease
	// ReasonUnavailable is used by the distributed modes: the shared store
	// could not be reached and the failure policy decided.
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

// Decision is the outcome of one request. It is a small value, returned
// without allocation.
type Decision struct {
	// Allowed reports whether the request was admitted. A request that is
	// not admitted consumes nothing.
	Allowed bool
	// Reason tells a rejection for "try later" (ReasonLimited) from one that
	// retrying cannot fix.
	Reason Reason
	// Limit is the most Remaining can be: the limit per window for the window
	// algorithms, the burst for the bucket algorithms. It is always the
	// rule's figure.
	Limit int64
	// Remaining is how much more could be admitted now, after this request.
	// For the sliding window counter it is rounded down from the weighted
	// estimate. Never negative.
	Remaining int64
	// ResetAfter is the time until the key is back to its initial state,
	// with all of Limit available again. Zero when it already is.
	ResetAfter time.Duration
	// RetryAfter is zero for admitted requests. For ReasonLimited it is the
	// shortest wait after which the same request is admitted, if no other
	// request consumes in between.
	RetryAfter time.Duration
}
