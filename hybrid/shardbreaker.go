package hybrid

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hybridlimit/hybridlimit/internal/syncx"
	"github.com/hybridlimit/hybridlimit/syncer"
)

// shards are a Redis Cluster's circuit breakers, one per master, for
// central rules: a master that fails a call has the keys of its slots
// decided by the failure policy for a while, and the keys of the other
// masters go on being decided by Redis. Outside a Cluster the Limiter's
// own breaker does this for the one server. Each master's breaker lets one
// decision through to try it again after a backoff (probeMin, doubling to
// probeMax): the first to succeed closes it. The zero value, for a client
// that is not a Cluster's, does nothing.
type shards struct {
	cc     *redis.ClusterClient
	ks     *syncer.Keyspace
	logger *slog.Logger
	open   atomic.Int32 // masters whose breaker is open: none, the common case, takes no lock
	mu     sync.Mutex
	down   map[string]*shardDown // by the master's address
	// answered is when someAnswer last found a master answering (unix
	// µs): it asks again at most every probeMax.
	answered, asked atomic.Int64
}

// shardDown is an open breaker of a master.
type shardDown struct {
	retry   int64 // node time (µs) from which one decision tries the master again
	backoff time.Duration
	trying  bool // a decision is trying it
}

func newShards(c redis.UniversalClient, ks *syncer.Keyspace, logger *slog.Logger) *shards {
	cc, _ := c.(*redis.ClusterClient)
	return &shards{cc: cc, ks: ks, logger: logger}
}

// master returns the address of the master that serves rule's key, as the
// client's map of slots has it: "" outside a Cluster.
func (s *shards) master(rule *syncer.Rule, key string) string {
	if s == nil || s.cc == nil {
		return ""
	}
	state, _ := syncx.Keys(s.ks, rule, key)
	c, err := s.cc.MasterForKey(context.Background(), state)
	if err != nil {
		return ""
	}
	return c.Options().Addr
}

// skip reports whether a decision at node time now for a key of addr goes
// to the failure policy without calling Redis: addr's breaker is open and
// it is not yet time to try it again, or another decision is trying it.
// The decision it lets through is the one trying it: it must end in ok,
// failed or released.
func (s *shards) skip(addr string, now int64) bool {
	if addr == "" || s.open.Load() == 0 {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	d := s.down[addr]
	if d == nil {
		return false
	}
	if d.trying || now < d.retry {
		return true
	}
	d.trying = true
	return false
}

// failed opens addr's breaker after a call to it found Redis out of reach
// at now, or keeps it open a longer while.
func (s *shards) failed(addr string, now int64, err error) {
	s.mu.Lock()
	d := s.down[addr]
	opened := d == nil
	if opened {
		if s.down == nil {
			s.down = map[string]*shardDown{}
		}
		d = &shardDown{backoff: probeMin}
		s.down[addr] = d
		s.open.Add(1)
	} else {
		d.backoff = min(2*d.backoff, probeMax)
	}
	d.retry, d.trying = now+d.backoff.Microseconds(), false
	s.mu.Unlock()
	if opened {
		s.logger.Warn("hybridlimit: redis cluster node unavailable; failure policies apply to the keys of its slots", "node", addr, "err", err)
	}
}

// ok closes addr's breaker after a call to it succeeded.
func (s *shards) ok(addr string) {
	if addr == "" || s.open.Load() == 0 {
		return
	}
	s.mu.Lock()
	_, was := s.down[addr]
	if was {
		delete(s.down, addr)
		s.open.Add(-1)
	}
	s.mu.Unlock()
	if was {
		s.logger.Info("hybridlimit: redis cluster node available again", "node", addr)
	}
}

// waiting reports whether a key of addr without a lease goes to the failure
// policy at now rather than waiting for its exchange: addr's breaker is
// open, and its backoff has not run out. The exchanges of its keys try it
// again meanwhile; a request waiting in vain closes it again (failed), one
// that got its lease opens it (ok).
func (s *shards) waiting(addr string, now int64) bool {
	if addr == "" {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	d := s.down[addr]
	return d != nil && now < d.retry
}

// someAnswer reports whether, on a Cluster, some master answers a PING
// within timeout, asking at most every probeMax (the sync loop waits for
// it): false outside a Cluster. The client first reloads its
// map of slots, within timeout too (a dead master's dials may take it
// all: the map it had is used then).
func (s *shards) someAnswer(timeout time.Duration) bool {
	if s == nil || s.cc == nil {
		return false
	}
	now := time.Now().UnixMicro()
	if now-s.asked.Load() < probeMax.Microseconds() {
		return s.answered.Load() == s.asked.Load()
	}
	s.asked.Store(now)
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var any atomic.Bool
	// ctx bounds the reload; each PING has a timeout of its own, the
	// reload having perhaps spent ctx.
	s.cc.ForEachMaster(ctx, func(_ context.Context, c *redis.Client) error {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		if c.Ping(ctx).Err() == nil {
			any.Store(true)
		}
		return nil
	})
	if any.Load() {
		s.answered.Store(now)
	}
	return any.Load()
}

// released lets another decision try addr: the one trying it ended
// without an answer about its availability (the caller cancelled).
func (s *shards) released(addr string) {
	if addr == "" || s.open.Load() == 0 {
		return
	}
	s.mu.Lock()
	if d := s.down[addr]; d != nil {
		d.trying = false
	}
	s.mu.Unlock()
}
