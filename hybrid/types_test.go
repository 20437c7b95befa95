package hybrid_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/hybrid"
	"github.com/hybridlimit/hybridlimit/internal/paramerr"
	"github.com/hybridlimit/hybridlimit/local"
)

// TestNewLimitError checks that NewLimit's error tells the bad parameter
// both ways: as local's *LimitError, and as the *paramerr.Error of the
// packages that see local only through hybrid.
func TestNewLimitError(t *testing.T) {
	_, err := hybrid.NewLimit(hybrid.Params{Algorithm: hybrid.GCRA, Limit: 10, Window: time.Second, Burst: -1})
	require.Error(t, err)
	var le *local.LimitError
	require.ErrorAs(t, err, &le)
	var pe *paramerr.Error
	require.ErrorAs(t, err, &pe)
	assert.Equal(t, le.Field, pe.Field)
	assert.Equal(t, "Burst", pe.Field)
	assert.Equal(t, "-1", pe.Value)
	assert.Equal(t, le.Reason, pe.Reason)
	assert.Equal(t, le.Error(), err.Error(), "the text stays local's")
	assert.ErrorIs(t, err, local.ErrInvalidLimit)
}
