package hybrid

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
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
