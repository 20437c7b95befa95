package lease

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/internal/localx"
	"github.com/hybridlimit/hybridlimit/local"
)

// TestNewRule: every algorithm but the sliding window log is leased, and
// keeps the caller's ref; the log is refused with ErrNotLeasable.
func TestNewRule(t *testing.T) {
	for _, alg := range []local.Algorithm{local.FixedWindow, local.SlidingWindowCounter, local.TokenBucket, local.LeakyBucket, local.GCRA} {
		ref := new(int)
		r, err := NewRule(localx.MustLimit(local.Limit{Algorithm: alg, Quota: 1000, Window: time.Second}), testParams, NewCluster(1), ref)
		require.NoError(t, err, alg)
		assert.Same(t, ref, r.Ref(), alg)
		assert.Equal(t, alg != local.FixedWindow && alg != local.SlidingWindowCounter, r.buckets, alg)
	}
	r, err := NewRule(localx.MustLimit(local.Limit{Algorithm: local.SlidingWindowLog, Quota: 1000, Window: time.Second}), testParams, NewCluster(1), nil)
	assert.ErrorIs(t, err, ErrNotLeasable)
	assert.Nil(t, r)
}

// TestNewRuleWindowVariants: the sub-window counter is leased per
// sub-window; anchored windows are refused with ErrAnchored.
func TestNewRuleWindowVariants(t *testing.T) {
	r, err := NewRule(localx.MustLimit(local.Limit{Algorithm: local.SubWindowCounter, Quota: 600, Window: time.Minute, SubWindows: 60}), testParams, NewCluster(1), nil)
	require.NoError(t, err)
	assert.True(t, r.sub)
	assert.False(t, r.buckets || r.counter)
	assert.Equal(t, int64(1e6), r.w, "a lease's window is a sub-window")
	assert.Equal(t, int64(60), r.ws)
	for _, alg := range []local.Algorithm{local.FixedWindow, local.SubWindowCounter} {
		r, err := NewRule(localx.MustLimit(local.Limit{Algorithm: alg, Quota: 600, Window: time.Minute, Anchored: true}), testParams, NewCluster(1), nil)
		assert.ErrorIs(t, err, ErrAnchored, alg)
		assert.Nil(t, r)
	}
}
