package lease

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/local"
)

// TestGlobalWaitsOnlyWithRoom: a rule of global reach has no allowance; a
// request its node holds no lease for waits for the exchange with the
// region's Redis while the region's part may have room for it (no reply
// yet in the window, or room left), and not once the last reply said the
// part is spent: more comes across regions.
func TestGlobalWaitsOnlyWithRoom(t *testing.T) {
	r, start, now := smallWindow(t)
	r.SetWaitFirst()
	r.SetGlobal()
	require.Zero(t, r.allowance())
	for _, tc := range []struct {
		name string
		room int64
		wait bool
	}{
		{"no reply in the window", -1, true},
		{"room left", 5, true},
		{"the part spent", 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k := Lease{flags: flagSynced | flagSent, epoch: 1, wid: start, granted: 3, used: 3, acked: 3, room: tc.room,
				lastSync: now, lastUse: now, span: r.w}
			v, signal := k.Decide(r, now, 1)
			assert.Equal(t, local.ReasonNoLease, v.Reason, "refused for want of a lease")
			assert.True(t, signal.Sync(), "asks for an exchange")
			assert.Equal(t, tc.wait, signal.Wait(), "the request waits for it")
		})
	}
}
