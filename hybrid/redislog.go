package hybrid

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hybridlimit/hybridlimit/syncer"
)

// redisLog takes go-redis's log lines, which it otherwise prints to stderr
// (a dial failure several times a second while Redis is down), to a Limiter's
// Logger at Debug level. go-redis has one logger per process: the first
// Limiter with Redis sets it, once (routeRedisLog).
type redisLog struct{ logger atomic.Pointer[slog.Logger] }

var (
	redisLogger    redisLog
	redisLoggerSet sync.Once
)

// routeRedisLog sends go-redis's log lines to logger, if no Limiter did
// before.
func routeRedisLog(logger *slog.Logger) {
	redisLoggerSet.Do(func() {
		redisLogger.logger.Store(logger)
		redis.SetLogger(&redisLogger)
	})
}

// Printf implements go-redis's logger interface.
func (r *redisLog) Printf(ctx context.Context, format string, v ...any) {
	l := r.logger.Load()
	if l == nil || !l.Enabled(ctx, slog.LevelDebug) {
		return
	}
	l.DebugContext(ctx, "hybridlimit: go-redis: "+fmt.Sprintf(format, v...))
}

// redisErrors tells the operator of Redis's failures: each counted by
// kind (hybridlimit.redis.errors), and an error answer that is not about
// availability (a key of another type under the prefix, a script error)
// logged once per kind and minute, not per request. Availability changes
// log themselves (markUnavailable, markAvailable).
type redisErrors struct {
	mu     sync.Mutex
	logged map[string]time.Time // kind → when it was last logged
}

// redisErrorLogEvery is how often one kind of error answer is logged.
const redisErrorLogEvery = time.Minute

// failed takes err, a failure of a call or a round of l's.
func (r *redisErrors) failed(l *Limiter, err error) {
	kind := errorKind(err)
	l.metrics.redisError(kind)
	if !errors.Is(err, syncer.ErrRedis) {
		return
	}
	now := time.Now()
	r.mu.Lock()
	last, seen := r.logged[kind]
	log := !seen || now.Sub(last) >= redisErrorLogEvery
	if log {
		if r.logged == nil {
			r.logged = map[string]time.Time{}
		}
		r.logged[kind] = now
	}
	r.mu.Unlock()
	if log {
		l.logger.Warn("hybridlimit: redis answered with an error; the failure policies decide what it does not (logged once a minute)", "kind", kind, "err", err)
	}
}

// errorKind names err for the metric's attribute: the first word of a
// Redis error answer (OOM, MISCONF, READONLY, WRONGTYPE, ERR, …), timeout
// for a deadline passed, else unreachable.
func errorKind(err error) string {
	var rerr redis.Error
	switch {
	case errors.As(err, &rerr):
		msg := rerr.Error()
		if i := strings.IndexByte(msg, ' '); i > 0 {
			msg = msg[:i]
		}
		if len(msg) > 16 {
			msg = msg[:16]
		}
		return msg
	case errors.Is(err, context.DeadlineExceeded):
		return "timeout"
	}
	return "unreachable"
}
