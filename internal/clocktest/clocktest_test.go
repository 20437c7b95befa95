package clocktest_test

import (
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/hybridlimit/hybridlimit/internal/clocktest"
)

func TestClock(t *testing.T) {
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	c := clocktest.New(t0)
	assert.True(t, c.Now().Equal(t0))
	assert.True(t, c.Add(1500*time.Microsecond).Equal(t0.Add(1500*time.Microsecond)))
	assert.Equal(t, t0.UnixMicro()+1500, c.Micros())
	c.Set(t0.Add(-time.Second))
	assert.True(t, c.Now().Equal(t0.Add(-time.Second)), "Set moves backwards too")
	var zero clocktest.Clock
	assert.True(t, zero.Now().Equal(time.UnixMicro(0)))

	// Concurrent Adds are all counted.
	c.Set(t0)
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 1000 {
				c.Add(time.Microsecond)
			}
		}()
	}
	wg.Wait()
	assert.True(t, c.Now().Equal(t0.Add(8000*time.Microsecond)))
}
