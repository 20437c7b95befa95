package hybrid

import (
	"context"
	"time"
)

// roundStrikes is how many sync rounds in a row must fail, Redis
// answering nothing in them, before the breaker opens. One round that
// timed out is as likely a busy machine (the node's own process not run in
// time) as a Redis gone, and opening the breaker hands every key without a
// lease to its failure policy, whose admissions come on top of what Redis
// counts. A central call that fails opens it at once: it cannot wait.
const roundStrikes = 3

// roundFailed takes the error of a sync round in which Redis answered
// nothing: the third in a row opens the breaker, unless, on a Cluster,
// some master answers (the round's keys were all a dead master's: the
// masters' own breakers see to them).
func (l *Limiter) roundFailed(now int64, err error) {
	if l.strikes.Add(1) >= roundStrikes && !l.shards.someAnswer(l.cfg.Timeout) {
		l.markUnavailable(now, err)
	}
}

// noteOutage tells the leases, while the breaker is open, that the failure
// policies decide at now: once Redis answers again, replies in a window
// this touched grant nothing on top of use until every node has reported
// what it admitted without Redis (lease.Rule.SetOutage). A round that
// merely timed out, the breaker closed, decided nothing by policy and
// notes nothing.
func (l *Limiter) noteOutage(now int64) {
	if l.sync != nil && l.breakerOpen() && !l.shut.Load() {
		l.sync.NoteOutage(now)
	}
}

// markUnavailable opens the circuit breaker: failure policies decide for
// central rules, and for hybrid keys without a lease, until a probe, a sync
// round or Ping finds Redis again.
func (l *Limiter) markUnavailable(now int64, err error) {
	if l.shut.Load() {
		return
	}
	if l.unavailable.Swap(max(now, 1)) == 0 {
		l.outageAt.Store(time.Now().UnixMicro())
		l.handBack.Store(true)
		l.logger.Warn("hybridlimit: redis unavailable; failure policies apply", "err", err)
		l.metrics.modeChanged(false)
		l.gossipOutage()
	}
	l.noteOutage(now)
	l.startProbe()
}

// markAvailable closes the circuit breaker.
func (l *Limiter) markAvailable() {
	l.strikes.Store(0)
	if l.shut.Load() {
		return
	}
	if l.unavailable.Swap(0) != 0 {
		l.logger.Info("hybridlimit: redis available again; what was admitted without it is reported")
		l.metrics.modeChanged(true)
		l.gossipOutage()
	}
}

// breakerOpen reports whether central calls go to the failure policy
// without asking Redis: Redis is known unavailable, or the Limiter is shut
// down.
func (l *Limiter) breakerOpen() bool { return l.unavailable.Load() != 0 }

// startProbe starts the probe unless one runs, the Limiter is shut down,
// or the caller runs the rounds (manualSync: syncAt probes).
func (l *Limiter) startProbe() {
	if l.cfg.manualSync || !l.probing.CompareAndSwap(false, true) {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		l.probing.Store(false)
		return
	}
	l.probeWG.Add(1)
	go l.probeLoop()
}

// probeLoop PINGs Redis, with backoff from probeMin to probeMax, until it
// answers (or a sync round found it again), then closes the breaker. Shutdown
// stops it.
func (l *Limiter) probeLoop() {
	defer l.probeWG.Done()
	wait := probeMin
	t := time.NewTimer(wait)
	defer t.Stop()
	for {
		select {
		case <-l.probeStop:
			return
		case <-t.C:
		}
		if l.unavailable.Load() != 0 && l.central.Ping(context.Background()) != nil {
			wait = min(2*wait, probeMax)
			t.Reset(wait)
			continue
		}
		l.markAvailable()
		l.probing.Store(false)
		// Unavailable again since the PING: probe on, unless another
		// probe started.
		if l.unavailable.Load() == 0 || !l.probing.CompareAndSwap(false, true) {
			return
		}
		wait = probeMin
		t.Reset(wait)
	}
}

// Ping PINGs Redis (every master of a Cluster), bounded by ctx and
// Config.Timeout, for a health endpoint: nil when it answers, or without
// Redis; an error wrapping ErrUnavailable when it does not; ErrClosed after
// Shutdown. An answer closes the circuit breaker at once.
func (l *Limiter) Ping(ctx context.Context) error {
	if l.shut.Load() {
		return ErrClosed
	}
	if l.central == nil {
		return nil
	}
	if err := l.central.Ping(ctx); err != nil {
		return err
	}
	l.markAvailable()
	return nil
}
