package local

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/hybridlimit/hybridlimit/internal/config"
)

// Clock tells the time. Implementations must be safe for concurrent use and
// should be fast: a Limiter reads its clock once per decision.
type Clock interface {
	Now() time.Time
}

// SystemClock is the Clock that calls time.Now. On some virtual machines
// time.Now costs tens of nanoseconds, more than a decision; CoarseClock is the
// cheaper choice there.
type SystemClock struct{}

// Now returns time.Now().
func (SystemClock) Now() time.Time { return time.Now() }

// defaultResolution is the resolution of the CoarseClock a Limiter makes
// for itself when Config.Clock is nil, and of a CoarseClock given none.
const defaultResolution = config.ClockResolution

// CoarseClock is a Clock that reads a time refreshed by a goroutine every
// resolution, so Now costs an atomic load instead of a system call. The time
// it reports is behind the true time by less than the resolution, and it is
// monotonic: it is derived from the monotonic clock, so it never runs
// backwards when the wall clock is stepped.
//
// A CoarseClock is safe for concurrent use; share one among limiters. Close
// stops its goroutine; after Close, Now falls back to time.Now.
type CoarseClock struct {
	us      atomic.Int64 // the time, µs since the Unix epoch
	stopped atomic.Bool
	base    time.Time
	stop    chan struct{}
	done    chan struct{}
	once    sync.Once
}

// NewCoarseClock starts a CoarseClock refreshed every resolution. A
// resolution of zero or less means 1ms.
func NewCoarseClock(resolution time.Duration) *CoarseClock {
	if resolution <= 0 {
		resolution = defaultResolution
	}
	c := &CoarseClock{base: time.Now(), stop: make(chan struct{}), done: make(chan struct{})}
	c.us.Store(c.base.UnixMicro())
	go c.run(resolution)
	return c
}

func (c *CoarseClock) run(resolution time.Duration) {
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
func (c *CoarseClock) Now() time.Time { return time.UnixMicro(c.nowMicro()) }

func (c *CoarseClock) nowMicro() int64 {
	if us, ok := c.running(); ok {
		return us
	}
	return c.base.UnixMicro() + time.Since(c.base).Microseconds()
}

// running returns the last refreshed time in µs, and false if c is nil or
// closed. It is small enough to inline where a Limiter reads its clock.
func (c *CoarseClock) running() (int64, bool) {
	if c == nil || c.stopped.Load() {
		return 0, false
	}
	return c.us.Load(), true
}

// Close stops the refreshing goroutine and waits for it to exit. It is
// idempotent and always returns nil.
func (c *CoarseClock) Close() error {
	c.once.Do(func() {
		c.stopped.Store(true)
		close(c.stop)
		<-c.done
	})
	return nil
}
