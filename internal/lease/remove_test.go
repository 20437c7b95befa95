package lease

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/local"
)

// TestRemoved: a removed rule's key is due until it holds and owes nothing:
// its next exchange gives its grant back and reports its use, as a final
// one does, and a request decided after it, racing with the removal, makes
// it due again.
func TestRemoved(t *testing.T) {
	lr := windowRule(local.FixedWindow)
	wid := t0 - t0%1e6
	var k Lease
	k.Decide(lr, t0, 1)
	q := k.Request(lr, t0, false)
	k.Answered()
	k.ApplyWindow(lr, &q, &WindowReply{Now: t0, Window: wid, Epoch: 1, Granted: 100, Used: 1, Committed: 100, Live: 1, Room: 900}, t0)
	now := t0 + 1000
	for range 5 {
		v, _ := k.Decide(lr, now, 1)
		require.Equal(t, local.ReasonOK, v.Reason)
	}
	require.False(t, k.Due(lr, now), "a grant in use, no report due")

	lr.Remove()
	assert.True(t, lr.Latest().Removed())
	require.True(t, k.Due(lr, now), "removed: the grant goes back")
	q = k.Request(lr, now, false)
	k.Answered()
	assert.True(t, q.Release, "the exchange gives back what the key holds")
	assert.Zero(t, q.WantCur, "and wants nothing")
	assert.Equal(t, Report{Window: wid, Used: 6}, q.Cur, "its use is reported")
	k.ApplyWindow(lr, &q, &WindowReply{Now: now, Window: wid, Epoch: 1, Granted: 6, Used: 6, Committed: 6, Live: 1, Room: 994}, now)
	assert.True(t, k.Dormant())
	assert.False(t, k.Due(lr, now), "nothing held, nothing owed: forgotten")

	// A decision that raced with the removal: reported at the next round.
	v, _ := k.Decide(lr, now, 1)
	require.Equal(t, local.ReasonOK, v.Reason, "within the cold-start allowance")
	assert.True(t, k.Due(lr, now+1), "its use is owed to Redis")
	q = k.Request(lr, now+1, false)
	assert.True(t, q.Release)
	assert.Equal(t, int64(7), q.Cur.Used)
}
