package coarse

import (
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestSleepsWhenIdle: a clock nothing reads stops ticking after one
// resolution; the next read tells the exact time and wakes it, and it
// ticks again while it is read.
func TestSleepsWhenIdle(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := New(time.Millisecond)
		defer c.Close()
		time.Sleep(10 * time.Millisecond)
		synctest.Wait()
		require.Equal(t, asleep, c.state.Load(), "asleep after a resolution without reads")
		ticks := c.ticks.Load()
		assert.LessOrEqual(t, ticks, int64(3), "ticks before it slept")
		time.Sleep(time.Second)
		synctest.Wait()
		assert.Equal(t, ticks, c.ticks.Load(), "no tick while nothing reads")

		assert.Equal(t, time.Now().UnixMicro(), c.NowMicro(), "the read that wakes it tells the exact time")
		synctest.Wait()
		for range 100 {
			time.Sleep(time.Millisecond / 2)
			us := c.NowMicro()
			assert.InDelta(t, time.Now().UnixMicro(), us, float64(time.Millisecond.Microseconds()), "at most a resolution behind")
		}
		assert.InDelta(t, ticks+50, c.ticks.Load(), 3, "a tick per resolution while read")
		_, ok := c.Running()
		assert.True(t, ok, "read since its last tick: Running, with no call")
	})
}

// TestMonotonic: readers that wake the clock and its ticks never take the
// time backwards.
func TestMonotonic(t *testing.T) {
	c := New(50 * time.Microsecond)
	defer c.Close()
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			last := c.NowMicro()
			for i := range 20000 {
				if i%1000 == 0 {
					time.Sleep(200 * time.Microsecond) // long enough to let it sleep
				}
				now := c.NowMicro()
				assert.GreaterOrEqual(t, now, last, "the time went backwards")
				last = now
			}
		})
	}
	wg.Wait()
}

// TestClosed: a closed clock is not Running, and Now is the time itself.
func TestClosed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := New(time.Millisecond)
		time.Sleep(5 * time.Millisecond)
		synctest.Wait() // asleep: Close wakes it
		require.NoError(t, c.Close())
		require.NoError(t, c.Close(), "idempotent")
		_, ok := c.Running()
		assert.False(t, ok, "a closed clock is not Running")
		time.Sleep(time.Second)
		assert.Equal(t, time.Now().UnixMicro(), c.NowMicro())
		var nilClock *Clock
		_, ok = nilClock.Running()
		assert.False(t, ok, "a nil clock is not Running")
	})
}
