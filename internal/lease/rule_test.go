package lease

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/local"
)

// TestNewRule: every algorithm but the sliding window log is leased, and
// keeps the caller's ref; the log is refused with ErrNotLeasable.
func TestNewRule(t *testing.T) {
	for _, alg := range []local.Algorithm{local.FixedWindow, local.SlidingWindowCounter, local.TokenBucket, local.LeakyBucket, local.GCRA} {
		ref := new(int)
		r, err := NewRule(local.MustLimit(local.Params{Algorithm: alg, Limit: 1000, Window: time.Second}), testParams, NewCluster(1), ref)
		require.NoError(t, err, alg)
		assert.Same(t, ref, r.Ref(), alg)
		assert.Equal(t, alg != local.FixedWindow && alg != local.SlidingWindowCounter, r.buckets, alg)
	}
	r, err := NewRule(local.MustLimit(local.Params{Algorithm: local.SlidingWindowLog, Limit: 1000, Window: time.Second}), testParams, NewCluster(1), nil)
	assert.ErrorIs(t, err, ErrNotLeasable)
	assert.Nil(t, r)
}
