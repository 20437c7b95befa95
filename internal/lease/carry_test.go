package lease

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/local"
)

// TestRollCarry: as its window ends, a sliding window counter's key
// carries what it holds unused into the next window (Redis weighs it in
// full there until the key's next exchange moves it), and no further; a
// fixed window's key starts the next window with its grant ahead only. A
// grant only carried, no reply in its window, carries no further: Redis
// holds it in the window before, which the one after no longer weighs.
func TestRollCarry(t *testing.T) {
	const w = int64(1e6)
	start := int64(1_900_000_000) * w
	for _, tc := range []struct {
		alg        local.Algorithm
		next, skip int64 // granted in the next window; in the one after it
	}{
		{local.SlidingWindowCounter, 60, 0},
		{local.FixedWindow, 0, 0},
	} {
		t.Run(tc.alg.String(), func(t *testing.T) {
			lr := windowRule(tc.alg)
			var k Lease
			k.flags = flagSynced
			k.Decide(lr, start+100, 1)
			require.Equal(t, start, k.wid)
			k.granted, k.room = 100, 0 // as a reply in the window tells
			for range 39 {
				k.Decide(lr, start+200, 1)
			}
			require.Equal(t, int64(40), k.used)
			k.roll(lr, start+w)
			assert.Equal(t, tc.next, k.granted, "granted in the next window")
			assert.Zero(t, k.used)
			assert.Equal(t, int64(40), k.pused, "the window over's use, to report")
			k.roll(lr, start+2*w)
			assert.Equal(t, tc.skip, k.granted, "granted in the window after")
		})
	}
}

// TestCarryReported: a sliding window counter's key admitting on a grant
// carried into a window asks for an exchange at once, though far from low:
// until that exchange moves the carry, Redis holds it in the window before,
// which the window after no longer weighs, and the use would be counted
// nowhere there. The reply in the window ends it.
func TestCarryReported(t *testing.T) {
	const w = int64(1e6)
	start := int64(1_900_000_000) * w
	lr := windowRule(local.SlidingWindowCounter)
	minGap := testParams.MinGap.Microseconds()
	var k Lease
	k.flags = flagSynced
	k.Decide(lr, start+100, 1)
	k.granted, k.room = 100, 0 // as a reply in the window tells
	for range 39 {
		k.Decide(lr, start+200, 1)
	}
	k.acked, k.lastSync = 40, start+200 // all of it reported
	now := start + w + 1000
	v, signal := k.Decide(lr, now, 1)
	require.Equal(t, local.ReasonOK, v.Reason, "admitted on the carried grant")
	require.Equal(t, int64(60), k.granted)
	assert.True(t, signal.Sync(), "the use of a carried grant signals an early round")
	assert.True(t, k.Due(lr, now+minGap), "due a MinGap after the carried grant's first use")

	q := k.Request(lr, now+minGap, false)
	k.Answered()
	assert.Equal(t, Report{start, 40}, q.Prev, "the report of the window before, which moves the carry")
	k.ApplyWindow(lr, &q, &WindowReply{Now: now + minGap, Window: start + w, Granted: 160, Used: 1, Committed: 160, Room: 500}, now+minGap)
	_, signal = k.Decide(lr, now+2*minGap, 1)
	assert.False(t, signal.Sync(), "the carry moved: no early round")
	assert.False(t, k.Due(lr, now+2*minGap+testParams.Interval.Microseconds()), "nothing due")
}
