package hybrid_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/hybrid"
	"github.com/hybridlimit/hybridlimit/local"
)

// TestInvalidLimit checks that Register and SetLimit refuse an invalid
// Limit with an error that matches both ErrInvalidRule and
// local.ErrInvalidConfig and names the rule and the bad field.
func TestInvalidLimit(t *testing.T) {
	l, err := hybrid.New(hybrid.Config{})
	require.NoError(t, err)
	defer l.Close()
	bad := hybrid.Limit{Algorithm: hybrid.GCRA, Quota: 10, Window: time.Second, Burst: -1}
	_, err = l.Register(hybrid.Rule{Name: "api", Limit: bad})
	require.Error(t, err)
	assert.ErrorIs(t, err, hybrid.ErrInvalidRule)
	assert.ErrorIs(t, err, local.ErrInvalidConfig)
	assert.Contains(t, err.Error(), `rule "api"`)
	assert.Contains(t, err.Error(), "Burst -1")

	r, err := l.Register(hybrid.Rule{Name: "api", Limit: hybrid.Limit{Algorithm: hybrid.GCRA, Quota: 10, Window: time.Second}})
	require.NoError(t, err)
	err = l.SetLimit(r, bad)
	assert.ErrorIs(t, err, hybrid.ErrInvalidRule)
	assert.ErrorIs(t, err, local.ErrInvalidConfig)
	d, err := l.Allow(context.Background(), r, "k")
	require.NoError(t, err)
	assert.Equal(t, int64(10), d.Capacity(), "the rule keeps its limit")
}
