// Package coarse is the clock a Limiter or a syncer starts when given none:
// a time refreshed by a goroutine, read with an atomic load instead of a
// system call. Package local reads it without an interface call.
package coarse

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/hybridlimit/hybridlimit/internal/config"
)

// Clock is a Clock that reads a time refreshed by a goroutine every
// resolution, so Now costs an atomic load instead of a system call. The time
// it reports is behind the true time by less than the resolution, and it is
// monotonic: it is derived from the monotonic clock, so it never runs
// backwards when the wall clock is stepped.
//
// A Clock is safe for concurrent use; share one among limiters. Close
// stops its goroutine; after Close, Now falls back to time.Now.
type Clock struct {
	us      atomic.Int64 // the time, µs since the Unix epoch
	stopped atomic.Bool
	base    time.Time
	stop    chan struct{}
	done    chan struct{}
	once    sync.Once
}

// New starts a Clock refreshed every resolution. A
// resolution of zero or less means 1ms.
func New(resolution time.Duration) *Clock {
	if resolution <= 0 {
		resolution = config.ClockResolution
	}
	c := &Clock{base: time.Now(), stop: make(chan struct{}), done: make(chan struct{})}
	c.us.Store(c.base.UnixMicro())
	go c.run(resolution)
	return c
}

func (c *Clock) run(resolution time.Duration) {
	defer close(c.done)
	t := time.NewTicker(resolution)
	defer t.Stop()
	for {
		select {
		case <-c.stop:
			return
		case <-t.C:
			c.us.Store(c.base.UnixMicro() + time.Since(c.base).Microseconds())
		}
	}
}

// Now returns the last refreshed time.
func (c *Clock) Now() time.Time { return time.UnixMicro(c.NowMicro()) }

func (c *Clock) NowMicro() int64 {
	if us, ok := c.Running(); ok {
		return us
	}
	return c.base.UnixMicro() + time.Since(c.base).Microseconds()
}

// Running returns the last refreshed time in µs, and false if c is nil or
// closed. It is small enough to inline where a Limiter reads its clock.
func (c *Clock) Running() (int64, bool) {
	if c == nil || c.stopped.Load() {
		return 0, false
	}
	return c.us.Load(), true
}

// Close stops the refreshing goroutine and waits for it to exit. It is
// idempotent and always returns nil.
func (c *Clock) Close() error {
	c.once.Do(func() {
		c.stopped.Store(true)
		close(c.stop)
		<-c.done
	})
	return nil
}
