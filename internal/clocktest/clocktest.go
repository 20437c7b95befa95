// Package clocktest is the module's one fake clock for tests and
// simulations: a time that moves only when told, to the microsecond, safe
// for concurrent use. It satisfies local.Clock.
package clocktest

import (
	"sync/atomic"
	"time"
)

// Clock is a settable clock. Its zero value tells the Unix epoch; New
// starts one elsewhere. Times are kept in microseconds, the limiters'
// resolution.
type Clock struct{ us atomic.Int64 }

// New returns a Clock that tells t.
func New(t time.Time) *Clock {
	c := &Clock{}
	c.Set(t)
	return c
}

// Now returns the clock's time.
func (c *Clock) Now() time.Time { return time.UnixMicro(c.us.Load()) }

// Set moves the clock to t, backwards too.
func (c *Clock) Set(t time.Time) { c.us.Store(t.UnixMicro()) }

// Add moves the clock on by d and returns the new time.
func (c *Clock) Add(d time.Duration) time.Time { return time.UnixMicro(c.us.Add(d.Microseconds())) }

// Micros returns the clock's time in microseconds since the Unix epoch.
func (c *Clock) Micros() int64 { return c.us.Load() }

// Wall is the clock that calls time.Now: for a Limiter driven by the times
// passed to its At methods, which needs a Clock that starts no goroutine.
type Wall struct{}

// Now returns time.Now().
func (Wall) Now() time.Time { return time.Now() }
