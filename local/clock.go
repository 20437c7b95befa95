package local

import (
	"time"

	"github.com/hybridlimit/hybridlimit/internal/config"
)

// Clock tells the time. Implementations must be safe for concurrent use and
// should be fast: a Limiter reads its clock once per decision. A Limiter
// given none starts a coarse clock of its own, a goroutine refreshing the
// time every millisecond while decisions read it, and asleep after a
// millisecond without one (the next read wakes it); one given a Clock that
// calls time.Now runs no goroutine but its sweeper (see
// Config.NoBackgroundSweep).
type Clock interface {
	Now() time.Time
}

// defaultResolution is the resolution of the coarse clock a Limiter makes
// for itself when Config.Clock is nil.
const defaultResolution = config.ClockResolution
