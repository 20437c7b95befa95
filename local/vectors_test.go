package local_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/internal/clocktest"
	"github.com/hybridlimit/hybridlimit/internal/localx"
	"github.com/hybridlimit/hybridlimit/internal/vectors"
	"github.com/hybridlimit/hybridlimit/local"
)

// TestVectors runs the shared decision vectors, which the Redis scripts must
// reproduce too.
func TestVectors(t *testing.T) {
	for _, c := range vectors.Cases {
		t.Run(c.Name, func(t *testing.T) {
			lim := c.Params
			l := newLimiter(t, lim, local.Config{})
			for i, s := range c.Steps {
				got := l.AllowNAt(time.UnixMicro(vectors.Base+s.At), "key", s.N)
				assert.Equal(t, s.Want.String(), got.String(), "step %d (at %v, n=%d)", i, time.Duration(s.At)*time.Microsecond, s.N)
			}
		})
	}
}

// newLimiter returns a Limiter with no background goroutines, closed when
// the test ends.
func newLimiter(t testing.TB, lim local.Limit, cfg local.Config) *local.Limiter {
	t.Helper()
	cfg.NoBackgroundSweep = true
	if cfg.Clock == nil {
		cfg.Clock = clocktest.Wall{}
	}
	l, err := local.New(lim, cfg)
	require.NoError(t, err)
	t.Cleanup(func() { l.Close() })
	return l
}

// maxCost is the most a single request may cost under lim.
func maxCost(lim local.Limit) int64 { return localx.MustLimit(lim).MaxCost() }
