package hybrid_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/hybrid"
	"github.com/hybridlimit/hybridlimit/internal/clocktest"
	"github.com/hybridlimit/hybridlimit/internal/hybridsim"
	"github.com/hybridlimit/hybridlimit/internal/redistest"
	"github.com/hybridlimit/hybridlimit/local"
)

// TestFloodKeepsLimitsHeld: a key at its limit, then a flood of distinct
// keys ten times the table's MaxKeys (an attacker cycling API keys). The
// table never holds more than MaxKeys; new keys past it are refused with
// ReasonOverflow while the keys it holds are in their windows; the key at
// its limit stays refused, in hybrid and in central mode, through the
// flood and after keys are swept; and in the next window the flood's keys
// are admitted again as the table makes room.
func TestFloodKeepsLimitsHeld(t *testing.T) {
	for _, mode := range []hybrid.Mode{hybrid.Hybrid, hybrid.Central} {
		t.Run(mode.String(), func(t *testing.T) { floodKeepsLimits(t, mode) })
	}
}

func floodKeepsLimits(t *testing.T, mode hybrid.Mode) {
	ctx := context.Background()
	const maxKeys, L = 64, 100
	W := time.Minute
	clk := clocktest.New(epoch2030.Add(time.Second))
	cfg := nodeConfig(redistest.Client(t, redistest.Addr(t)), redistest.Prefix(t), clk, "a", 1)
	cfg.MaxKeys, cfg.Shards = maxKeys, 1
	l := newNode(t, cfg)
	r := mustRegister(t, l, hybrid.Rule{Name: "r", Mode: mode, Limit: fixed(L, W), Policy: hybrid.FailClosed}, mode)
	admitted := 0
	for range 2 * L {
		d, err := l.Allow(ctx, r, "victim")
		require.NoError(t, err)
		if d.Allowed() {
			admitted++
		}
		hybridsim.SyncAt(ctx, l, clk.Now())
		clk.Add(10 * time.Millisecond)
	}
	require.Equal(t, L, admitted, "the victim admitted up to its limit")
	var overflow, other int
	for i := range 10 * maxKeys {
		d, err := l.Allow(ctx, r, fmt.Sprintf("flood-%d", i))
		require.NoError(t, err)
		switch {
		case d.Reason() == local.ReasonOverflow:
			overflow++
		case !d.Allowed() && d.Reason() != local.ReasonNoLease: // NoLease: a new key's first lease, which the test's rounds bring later
			other++
		}
		if i%maxKeys == 0 {
			hybridsim.SyncAt(ctx, l, clk.Now())
			clk.Add(10 * time.Millisecond)
			d, err := l.Allow(ctx, r, "victim")
			require.NoError(t, err)
			assert.False(t, d.Allowed(), "flood key %d: the victim stays refused, got %v", i, d)
		}
	}
	st := l.Stats()
	t.Logf("%v: %d of %d flood keys refused for overflow, %d otherwise; table %d keys (MaxKeys %d)", mode, overflow, 10*maxKeys, other, st.Keys, maxKeys)
	assert.LessOrEqual(t, st.Keys, maxKeys, "the table holds at most MaxKeys")
	if mode == hybrid.Hybrid {
		assert.GreaterOrEqual(t, overflow, 10*maxKeys-maxKeys, "past MaxKeys, new keys are refused with ReasonOverflow")
	}
	assert.Zero(t, other, "a flood key is refused only for want of room (or of its first lease)")
	// The next window: the flood's keys and the victim's are swept, and a
	// new key finds room.
	clk.Add(W)
	hybridsim.SyncAt(ctx, l, clk.Now())
	d, err := l.Allow(ctx, r, "newcomer")
	require.NoError(t, err)
	assert.NotEqual(t, local.ReasonOverflow, d.Reason(), "next window: a new key finds room")
	if !d.Allowed() { // its first lease, on a round of its own
		hybridsim.SyncAt(ctx, l, clk.Now())
		d, err = l.Allow(ctx, r, "newcomer")
		require.NoError(t, err)
	}
	assert.True(t, d.Allowed(), "next window: a new key is admitted, got %v", d)
}
