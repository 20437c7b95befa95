package hybrid

import (
	"context"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// records is a slog.Handler keeping every record, at every level.
type records struct {
	mu   sync.Mutex
	msgs []string
	lvls []slog.Level
}

func (r *records) Enabled(context.Context, slog.Level) bool { return true }
func (r *records) Handle(_ context.Context, rec slog.Record) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.msgs, r.lvls = append(r.msgs, rec.Message), append(r.lvls, rec.Level)
	return nil
}
func (r *records) WithAttrs([]slog.Attr) slog.Handler { return r }
func (r *records) WithGroup(string) slog.Handler      { return r }

// TestGoRedisLogRouted: go-redis's own log lines (its pool's dial failures)
// reach the Limiter's Logger at Debug level, not stderr.
func TestGoRedisLogRouted(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now
	rec := &records{}
	c := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true, MaxRetries: -1})
	defer c.Close()
	l, err := New(Config{Redis: c, Mode: Central, manualSync: true, Logger: slog.New(rec)})
	require.NoError(t, err)
	defer l.Close()
	// go-redis's logger is the process's, set by the first Limiter: this
	// test's Logger takes it over for the test.
	prev := redisLogger.logger.Swap(slog.New(rec))
	defer redisLogger.logger.Store(prev)

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	assert.ErrorIs(t, l.Ping(ctx), ErrUnavailable)
	// The pool dials in the background, with retries: its line comes once
	// they are spent.
	routed := func() bool {
		rec.mu.Lock()
		defer rec.mu.Unlock()
		found := false
		for i, m := range rec.msgs {
			if strings.HasPrefix(m, "hybridlimit: go-redis: ") {
				found = true
				assert.Equal(t, slog.LevelDebug, rec.lvls[i], "go-redis line %q", m)
			}
		}
		return found
	}
	assert.Eventually(t, routed, 10*time.Second, 10*time.Millisecond, "no go-redis line reached the Logger")
}
