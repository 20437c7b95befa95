package syncer

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Sentinel errors. Match them with errors.Is.
var (
	// ErrInvalidConfig reports an invalid Config, naming the field.
	ErrInvalidConfig = errors.New("syncer: invalid config")
	// ErrInvalidRule reports an invalid rule name or limit.
	ErrInvalidRule = errors.New("syncer: invalid rule")
	// ErrUnavailable reports that Redis could not decide: unreachable,
	// refusing, too slow for the call's deadline, loading, without a
	// master, read-only (a replica), or refusing writes (out of memory
	// under noeviction, a failed save). The error also wraps the cause (a
	// context error when the deadline passed), so errors.Is(err,
	// context.DeadlineExceeded) works. Failure policies (fail open, fail
	// closed, fall back) act on it.
	ErrUnavailable = errors.New("syncer: redis unavailable")
	// ErrRedis reports an error answer from Redis that is not about its
	// availability: a script error, a key of the wrong type (another
	// application's key under the same prefix). It wraps the server's
	// message.
	ErrRedis = errors.New("syncer: redis error")
)

// transient are the error prefixes Redis answers with while it cannot serve,
// or cannot write, for a while: they mean unavailable, not wrong. OOM and
// MISCONF are the operator's to fix (maxmemory, a disk); until then Redis
// decides nothing, and the failure policies do.
var transient = []string{"LOADING", "CLUSTERDOWN", "TRYAGAIN", "MASTERDOWN", "BUSY", "READONLY", "NOREPLICAS", "OOM", "MISCONF"}

// wrap classifies err from operation op as ErrUnavailable or ErrRedis. When
// ctx ended (the deadline passed, or it was cancelled), the error wraps
// ctx.Err() too, whatever form the client gave the failure (go-redis turns
// a deadline into a socket timeout).
func wrap(ctx context.Context, op string, err error) error {
	if err == nil {
		return nil
	}
	if cerr := ctx.Err(); cerr != nil && !errors.Is(err, cerr) {
		err = fmt.Errorf("%w: %w", cerr, err)
	} else if dl, ok := ctx.Deadline(); ok && cerr == nil && isTimeout(err) && !time.Now().Add(time.Millisecond).Before(dl) {
		// The socket timed out at the context's deadline, an instant
		// before the context noticed.
		err = fmt.Errorf("%w: %w", context.DeadlineExceeded, err)
	}
	var rerr redis.Error
	if errors.As(err, &rerr) && !isNetErr(err) {
		msg := rerr.Error()
		for _, p := range transient {
			if strings.HasPrefix(msg, p) {
				return fmt.Errorf("syncer: %s: %w: %w", op, ErrUnavailable, err)
			}
		}
		return fmt.Errorf("syncer: %s: %w: %w", op, ErrRedis, err)
	}
	return fmt.Errorf("syncer: %s: %w: %w", op, ErrUnavailable, err)
}

// reloadSlots has a Cluster client reload its map of slots after err, a
// failure to reach Redis: go-redis reloads it on a redirect, or once a
// minute, but not when a master stops answering, so after a failover it
// would go on sending the dead master's slots to it. The reload runs in
// the background, at most one at a time.
func reloadSlots(c redis.UniversalClient, err error) {
	if cc, ok := c.(*redis.ClusterClient); ok && errors.Is(err, ErrUnavailable) {
		cc.ReloadState(context.Background())
	}
}

// outOfMemory reports whether err is Redis's OOM answer: a write refused at
// maxmemory under noeviction (or with nothing left to evict).
func outOfMemory(err error) bool {
	var rerr redis.Error
	return errors.As(err, &rerr) && strings.HasPrefix(rerr.Error(), "OOM")
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

func isNetErr(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled)
}

// run runs f, which talks to Redis, unless ctx has already ended. The call
// is bounded by ctx's deadline, which go-redis applies to its socket
// (ContextTimeoutEnabled, which New requires) and which every caller caps
// at its Timeout. go-redis does not watch ctx.Done while it waits for an
// answer: a call cancelled in flight returns at that deadline, with ctx's
// error. Watching it would take a goroutine and a hand-off per call, which
// cost more client CPU than the rest of a decision, to return at most a
// Timeout sooner.
func run(ctx context.Context, f func(context.Context) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return f(ctx)
}
