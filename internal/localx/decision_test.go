package localx_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/hybridlimit/hybridlimit/internal/localx"
	"github.com/hybridlimit/hybridlimit/local"
)

// TestDecisionOutcome: a Decision keeps every figure an Outcome (or
// NewDecision) gives it, at the edges of their ranges, and the zero Decision
// is a rejection with every figure zero.
func TestDecisionOutcome(t *testing.T) {
	outcomes := []localx.Outcome{
		{},
		{Allowed: true, Reason: local.ReasonOK, Capacity: 10, Remaining: 7, ResetAfter: time.Second},
		{Reason: local.ReasonLimited, Capacity: 1<<53 - 1, Remaining: 1 << 53, ResetAfter: time.Hour, RetryAfter: time.Minute},
		{Allowed: true, Reason: local.ReasonUnavailable, Capacity: 1<<53 - 1, Degraded: true},
		{Reason: local.ReasonOverflow, Capacity: -1 << 53, Remaining: -1, RetryAfter: -1},
		{Reason: 127, Capacity: -1, Degraded: true, Waited: true},
		{Reason: 127, Capacity: -1},
		{Allowed: true, Capacity: 3, Waited: true},
	}
	for r := local.ReasonOK; r <= local.ReasonUnavailable; r++ {
		outcomes = append(outcomes, localx.Outcome{Allowed: r%2 == 0, Reason: r, Capacity: int64(r) + 1})
	}
	for _, o := range outcomes {
		d := o.Decision()
		assert.Equal(t, o, localx.OutcomeOf(d), "Outcome %+v: what the Decision gives back", o)
		nd := localx.NewDecision(o.Allowed, o.Reason, o.Capacity, o.Remaining, o.ResetAfter, o.RetryAfter)
		if o.Degraded {
			nd = localx.Degraded(nd)
		}
		if o.Waited {
			nd = localx.MarkWaited(nd)
		}
		assert.Equal(t, d, nd, "Outcome %+v: NewDecision, want what Outcome.Decision gives", o)
		methods := localx.Outcome{
			Allowed: d.Allowed(), Reason: d.Reason(), Capacity: d.Capacity(), Remaining: d.Remaining(),
			ResetAfter: d.ResetAfter(), RetryAfter: d.RetryAfter(), Degraded: d.Degraded(), Waited: localx.Waited(d),
		}
		assert.Equal(t, o, methods, "Outcome %+v: what the methods give", o)
	}
	var zero local.Decision
	assert.False(t, zero.Degraded(), "zero Decision is degraded")
	assert.Zero(t, localx.OutcomeOf(zero), "zero Decision's Outcome")
	d := localx.Outcome{Allowed: true, Capacity: 10, Remaining: 7, ResetAfter: time.Second}.Decision()
	assert.Equal(t, "allowed reason=ok capacity=10 remaining=7 reset=1s retry=0s", d.String(), "String")
	assert.Equal(t, "rejected reason=ok capacity=10 remaining=7 reset=1s retry=0s degraded", localx.Refused(localx.Degraded(d)).String(), "String of a degraded Decision")
}

// The distributed modes build their Decisions with NewDecision (or an
// Outcome); String shows one whole.
func Example_newDecision() {
	d := localx.NewDecision(false, local.ReasonLimited, 10, 0, 30*time.Second, 2*time.Second)
	fmt.Println(d.Allowed(), d.RetryAfter())
	fmt.Println(d)
	// Output:
	// false 2s
	// rejected reason=limited capacity=10 remaining=0 reset=30s retry=2s
}
