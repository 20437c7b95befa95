package local_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/hybridlimit/hybridlimit/local"
)

// TestDecisionOutcome: a Decision keeps every figure an Outcome (or
// NewDecision) gives it, at the edges of their ranges, and the zero Decision
// is a rejection with every figure zero.
func TestDecisionOutcome(t *testing.T) {
	outcomes := []local.Outcome{
		{},
		{Allowed: true, Reason: local.ReasonOK, Limit: 10, Remaining: 7, ResetAfter: time.Second},
		{Reason: local.ReasonLimited, Limit: 1<<53 - 1, Remaining: 1 << 53, ResetAfter: time.Hour, RetryAfter: time.Minute},
		{Allowed: true, Reason: local.ReasonUnavailable, Limit: 1<<53 - 1, Degraded: true},
		{Reason: local.ReasonOverflow, Limit: -1 << 53, Remaining: -1, RetryAfter: -1},
		{Reason: 127, Limit: -1, Degraded: true, Waited: true},
		{Reason: 127, Limit: -1},
		{Allowed: true, Limit: 3, Waited: true},
	}
	for r := local.ReasonOK; r <= local.ReasonUnavailable; r++ {
		outcomes = append(outcomes, local.Outcome{Allowed: r%2 == 0, Reason: r, Limit: int64(r) + 1})
	}
	for _, o := range outcomes {
		d := o.Decision()
		if got := d.Outcome(); got != o {
			t.Errorf("Outcome %+v: the Decision gives back %+v", o, got)
		}
		nd := local.NewDecision(o.Allowed, o.Reason, o.Limit, o.Remaining, o.ResetAfter, o.RetryAfter)
		if o.Degraded {
			nd = nd.AsDegraded()
		}
		if o.Waited {
			nd = nd.AsWaited()
		}
		if nd != d {
			t.Errorf("Outcome %+v: NewDecision gives %v, Outcome.Decision %v", o, nd, d)
		}
		if d.Allowed() != o.Allowed || d.Reason() != o.Reason || d.Limit() != o.Limit || d.Remaining() != o.Remaining ||
			d.ResetAfter() != o.ResetAfter || d.RetryAfter() != o.RetryAfter || d.Degraded() != o.Degraded || d.Waited() != o.Waited {
			t.Errorf("Outcome %+v: the methods give %v", o, d)
		}
	}
	var zero local.Decision
	if zero.Degraded() {
		t.Errorf("zero Decision is degraded")
	}
	if zero.Outcome() != (local.Outcome{}) {
		t.Errorf("zero Decision: %+v", zero.Outcome())
	}
	d := local.Outcome{Allowed: true, Limit: 10, Remaining: 7, ResetAfter: time.Second}.Decision()
	if got, want := d.String(), "allowed reason=ok limit=10 remaining=7 reset=1s retry=0s"; got != want {
		t.Errorf("String: %q, want %q", got, want)
	}
	if got, want := d.AsDegraded().Refused().String(), "rejected reason=ok limit=10 remaining=7 reset=1s retry=0s degraded"; got != want {
		t.Errorf("String of a degraded Decision: %q, want %q", got, want)
	}
}

// A limiter of another kind builds its Decisions with NewDecision (or an
// Outcome); String shows one whole.
func ExampleNewDecision() {
	d := local.NewDecision(false, local.ReasonLimited, 10, 0, 30*time.Second, 2*time.Second)
	fmt.Println(d.Allowed(), d.RetryAfter())
	fmt.Println(d)
	// Output:
	// false 2s
	// rejected reason=limited limit=10 remaining=0 reset=30s retry=2s
}
