package lease

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/internal/keyed"
	"github.com/hybridlimit/hybridlimit/internal/localx"
	"github.com/hybridlimit/hybridlimit/local"
)

// TestNotifySignalsOncePerTake: an urgent key already in the syncer's hands
// signals an early round once until the signal is taken (Wanted, or the
// loop's WakeTaken), not at every decision of a flood; once it is taken,
// its next decision signals again.
func TestNotifySignalsOncePerTake(t *testing.T) {
	lim := localx.MustLimit(local.Limit{Algorithm: local.GCRA, Quota: 100, Window: 10 * time.Second, Burst: 10})
	c := NewCluster(1)
	r, err := NewRule(lim, testParams, c, nil)
	require.NoError(t, err)
	var e keyed.Entry[Lease]
	e.Value.flags = flagActive | flagSent | flagSynced | flagUrgent

	r.Notify(&e)
	require.True(t, c.Wanted(), "the first decision signals")
	r.Notify(&e)
	r.Notify(&e)
	assert.True(t, c.Wanted(), "a decision after the signal was taken signals again")
	assert.False(t, c.Wanted(), "one signal, however many decisions")

	// Taken from the channel without WakeTaken (as the loop receives it,
	// before it records the taking): the key does not signal again yet.
	r.Notify(&e)
	<-c.Wake()
	r.Notify(&e)
	assert.False(t, c.Wanted(), "signalled again before the signal was taken")
	c.WakeTaken()
	r.Notify(&e)
	assert.True(t, c.Wanted(), "no signal after WakeTaken")

	// A key that is not urgent does not signal.
	e.Value.flags &^= flagUrgent
	c.WakeTaken()
	r.Notify(&e)
	assert.False(t, c.Wanted(), "a key that is not urgent signalled")
}
