package lease

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestMeasure: the Cluster keeps the most certain measure of Redis's clock
// and gives it to the keys whose own measure agrees with it, less certain
// (a reply late in a long pipeline); a measure that disagrees is the key's
// own (another master's clock); a measure grows less certain as it ages.
func TestMeasure(t *testing.T) {
	c := NewCluster(1)
	const now = int64(1_900_000_000_000_000)
	assert.Equal(t, int64(5000), c.Measure(5000, 100, now), "the first measure")
	assert.Equal(t, int64(5000), c.Offset())
	assert.Equal(t, int64(5000), c.Measure(6200, 1500, now+1000), "a late reply of a long pipeline: the best measure, which it agrees with")
	assert.Equal(t, int64(5000), c.Offset())
	assert.Equal(t, int64(9000), c.Measure(9000, 1500, now+2000), "another clock: the key's own")
	assert.Equal(t, int64(5000), c.Offset(), "a less certain measure does not replace the best")
	assert.Equal(t, int64(5040), c.Measure(5040, 80, now+3000), "a more certain one does")
	assert.Equal(t, int64(5040), c.Offset())
	// An hour on, the best is 360ms less certain: a measure within 1.5ms
	// replaces it.
	assert.Equal(t, int64(5400), c.Measure(5400, 1500, now+3600_000_000))
	assert.Equal(t, int64(5400), c.Offset())
}
