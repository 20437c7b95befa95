package syncer

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"

	"github.com/redis/go-redis/v9"
)

// Sentinel errors. Match them with errors.Is.
var (
	// ErrInvalidConfig reports an invalid Config, naming the field.
	ErrInvalidConfig = errors.New("syncer: invalid config")
	// ErrInvalidRule reports an invalid rule name or limit.
	ErrInvalidRule = errors.New("syncer: invalid rule")
	// ErrUnavailable reports that Redis could not decide: unreachable,
	// refusing, too slow for the call's deadline, loading, or without a
	// master. The error also wraps the cause (a context error when the
	// deadline passed), so errors.Is(err, context.DeadlineExceeded) works.
	// Failure policies (fail open, fail closed, fall back) act on it.
	ErrUnavailable = errors.New("syncer: redis unavailable")
	// ErrRedis reports an error answer from Redis that is not about its
	// availability: a script error, a key of the wrong type (another
	// application's key under the same prefix), a misconfigured server. It
	// wraps the server's message.
	ErrRedis = errors.New("syncer: redis error")
)

// transient are the error prefixes Redis answers with while it cannot serve
// for a while: they mean unavailable, not wrong.
var transient = []string{"LOADING", "CLUSTERDOWN", "TRYAGAIN", "MASTERDOWN", "BUSY", "READONLY", "NOREPLICAS"}

// wrap classifies err from operation op as ErrUnavailable or ErrRedis.
func wrap(op string, err error) error {
	if err == nil {
		return nil
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

func isNetErr(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled)
}
