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
// The goroutine stops ticking after a resolution in which nothing read the
// clock, and the next read wakes it, with the exact time: an idle Limiter
// costs no CPU, where a tick every millisecond costs a few percent of a
// core.
//
// A Clock is safe for concurrent use; share one among limiters. Close
// stops its goroutine; after Close, Now falls back to time.Now.
type Clock struct {
	us    atomic.Int64 // the time, µs since the Unix epoch
	state atomic.Int32 // read, unread, asleep or stopped
	base  time.Time
	wake  chan struct{} // a reader found the goroutine asleep
	stop  chan struct{}
	done  chan struct{}
	once  sync.Once
	ticks atomic.Int64 // the goroutine's ticks, for tests
}

// The states of a Clock: read since the goroutine's last tick, not read
// since (it sleeps at the next tick unless a reader comes first), asleep
// (the next reader tells the time itself and wakes it), or closed.
const (
	read int32 = iota
	unread
	asleep
	stopped
)

// New starts a Clock refreshed every resolution. A
// resolution of zero or less means 1ms.
func New(resolution time.Duration) *Clock {
	if resolution <= 0 {
		resolution = config.ClockResolution
	}
	c := &Clock{base: time.Now(), wake: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
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
		}
		c.ticks.Add(1)
		c.refresh()
		if c.state.CompareAndSwap(unread, asleep) {
			// Nothing read the clock since the last tick: sleep until a
			// reader wakes us.
			t.Stop()
			select {
			case <-c.stop:
				return
			case <-c.wake:
			}
			c.refresh()
			t.Reset(resolution)
			continue
		}
		c.state.CompareAndSwap(read, unread)
	}
}

// refresh stores the time, unless a reader stored a later one.
func (c *Clock) refresh() int64 {
	now := c.base.UnixMicro() + time.Since(c.base).Microseconds()
	for {
		old := c.us.Load()
		if now <= old {
			return old
		}
		if c.us.CompareAndSwap(old, now) {
			return now
		}
	}
}

// Now returns the last refreshed time.
func (c *Clock) Now() time.Time { return time.UnixMicro(c.NowMicro()) }

// NowMicro returns the last refreshed time in µs since the Unix epoch, or
// the time itself once c is closed.
func (c *Clock) NowMicro() int64 {
	if us, ok := c.Running(); ok {
		return us
	}
	return c.slow()
}

// Running returns the last refreshed time in µs, and false if c is nil or
// closed, or not read since its last tick (then NowMicro tells the time,
// and marks it read). It is small enough to inline where a Limiter reads
// its clock.
func (c *Clock) Running() (int64, bool) {
	if c == nil || c.state.Load() != read {
		return 0, false
	}
	return c.us.Load(), true
}

// slow is NowMicro for a clock not read since its last tick: it marks it
// read, and, if its goroutine sleeps, tells the time itself and wakes it.
// A closed clock tells the time itself.
func (c *Clock) slow() int64 {
	switch c.state.Load() {
	case stopped:
		return c.base.UnixMicro() + time.Since(c.base).Microseconds()
	case unread:
		c.state.CompareAndSwap(unread, read)
	case asleep:
		us := c.refresh()
		if c.state.CompareAndSwap(asleep, read) {
			c.wake <- struct{}{} // buffered: the one reader that woke it sends
		}
		return us
	}
	return c.us.Load()
}

// Close stops the refreshing goroutine and waits for it to exit. It is
// idempotent and always returns nil.
func (c *Clock) Close() error {
	c.once.Do(func() {
		c.state.Store(stopped)
		close(c.stop)
		<-c.done
	})
	return nil
}
