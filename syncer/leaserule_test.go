package syncer

import (
	"runtime"
	"testing"
	"time"
	"weak"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/local"
)

// TestLeaseRuleNotRetained: a lease rule holds its Redis form, which its
// exchanges are named by, and the syncer keeps no record of the lease rules
// it returns: one its caller drops (a limit replaced, a hybrid rule that
// failed to build) is collected. The log is refused with errNotLeasable.
func TestLeaseRuleNotRetained(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", ContextTimeoutEnabled: true}) // never dialled
	t.Cleanup(func() { c.Close() })
	s, err := newSyncer(syncConfig{Client: c})
	require.NoError(t, err)
	t.Cleanup(func() { s.Close() })
	r, err := NewRule("api", local.Limit{Algorithm: local.FixedWindow, Quota: 1000, Window: time.Second})
	require.NoError(t, err)
	lr, err := s.LeaseRule(r)
	require.NoError(t, err)
	assert.Same(t, r, redisRule(lr))
	w := weak.Make(lr)
	lr = nil
	runtime.GC()
	assert.Nil(t, w.Value(), "the syncer keeps a lease rule its caller dropped")

	log, err := NewRule("log", local.Limit{Algorithm: local.SlidingWindowLog, Quota: 10, Window: time.Second})
	require.NoError(t, err)
	_, err = s.LeaseRule(log)
	assert.ErrorIs(t, err, errNotLeasable)
	assert.ErrorContains(t, err, `rule "log": the sliding window log has no exact lease`)
}
