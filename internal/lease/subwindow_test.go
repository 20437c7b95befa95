package lease

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/internal/localx"
	"github.com/hybridlimit/hybridlimit/local"
)

// TestSubWindowAsks: a sub-window counter's key asks for what lasts its
// sub-window, with half an interval to spare, and for the rest of the
// horizon in the next one, not for a whole horizon in each; and its
// lease runs low by what it needs until the sub-window ends. A fixed
// window of the same length still asks for a horizon in each.
func TestSubWindowAsks(t *testing.T) {
	const s = int64(100_000) // the sub-window, µs
	start := int64(1_900_000_000) * 10 * s
	sub := testRule(localx.MustLimit(local.Limit{Algorithm: local.SubWindowCounter, Quota: 1000, Window: time.Second, SubWindows: 10}))
	fixed := testRule(localx.MustLimit(local.Limit{Algorithm: local.FixedWindow, Quota: 100, Window: 100 * time.Millisecond}))
	for _, tc := range []struct {
		name      string
		r         *Rule
		at        int64 // into the sub-window
		cur, next int64 // asked beyond use; ahead
	}{
		{"sub-window, early", sub, 10_000, 56, 40},     // 40 × 140/100; 40 × 110/100, at most a sub-window
		{"sub-window, late", sub, 90_000, 24, 40},      // 40 × 60/100; a sub-window
		{"fixed window, early", fixed, 10_000, 80, 80}, // 40 × 200/100 in each
	} {
		t.Run(tc.name, func(t *testing.T) {
			var k Lease
			k.flags = flagSynced
			k.demand = 40 // per sub-window, measured
			k.Decide(tc.r, start+tc.at, 1)
			k.lastSync = 0 // keep the demand as set: no rate to measure
			q := k.Request(tc.r, start+tc.at, false)
			require.Equal(t, int64(40), q.Demand)
			assert.Equal(t, k.used+tc.cur, q.WantCur, "target in the current sub-window")
			assert.Equal(t, tc.next, q.WantNext, "target ahead in the next")
		})
	}

	// Low: what is held lasts less than the sub-window's rest (or an
	// interval) at the key's demand.
	for _, tc := range []struct {
		at   int64
		held int64
		low  bool
	}{
		{10_000, 20, true}, // 90 ms left need 36
		{10_000, 40, false},
		{90_000, 20, false}, // 10 ms left need 4
		{90_000, 3, true},
	} {
		var k Lease
		k.flags = flagSynced
		k.demand = 40
		k.Decide(sub, start+tc.at, 0) // rolls to the sub-window
		k.granted = tc.held + 1
		k.flags &^= flagUrgent
		_, signal := k.Decide(sub, start+tc.at, 1)
		assert.Equal(t, tc.low, signal.Sync(), "%d held %d µs into the sub-window", tc.held, tc.at)
	}
}
