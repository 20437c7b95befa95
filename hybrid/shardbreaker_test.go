package hybrid

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/internal/redisproc"
	"github.com/hybridlimit/hybridlimit/syncer"
)

// TestClusterMasterDown: a Cluster of three masters without replicas, one
// of them killed (the others keep serving their slots: full coverage not
// required). The keys of a central FailClosed rule and of a hybrid
// FailLocal rule on the two live masters are decided as if nothing
// happened, and the Limiter's breaker stays closed; those of the dead one
// by the policy (the hybrid rule's once their shares run out), without
// error, and without waiting on it past Timeout; the node's loss and
// return are logged once each; once it is back, its keys are decided by
// Redis again.
func TestClusterMasterDown(t *testing.T) {
	if testing.Short() {
		t.Skip("real processes")
	}
	c, err := redisproc.StartCluster(t.TempDir(), 0, "--cluster-require-full-coverage", "no")
	require.NoError(t, err, "start a Cluster of three masters")
	t.Cleanup(c.Close)
	// DialerRetries 1: a dead master's connection refused at once, not
	// after four more dials 100ms apart (docs/redis.md).
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs, ContextTimeoutEnabled: true, MaxRetries: -1, DialerRetries: 1,
		DialTimeout: 100 * time.Millisecond, ReadTimeout: 200 * time.Millisecond, WriteTimeout: 200 * time.Millisecond})
	t.Cleanup(func() { cc.Close() })
	rec := &records{}
	l, err := New(Config{Redis: cc, Logger: slog.New(rec)})
	require.NoError(t, err)
	t.Cleanup(func() { l.Close() })
	r, err := l.Register(Rule{Name: "login", Mode: Central, Policy: FailClosed, Limit: Limit{Algorithm: FixedWindow, Quota: 100, Window: time.Minute}})
	require.NoError(t, err)
	api, err := l.Register(Rule{Name: "api", Policy: FailLocal, Limit: Limit{Algorithm: TokenBucket, Quota: 100, Window: time.Second, Burst: 20}})
	require.NoError(t, err)
	ctx := context.Background()
	rules := []*Rule{r, api}
	srs := []*syncer.Rule{l.rules["login"].mode.(*centralRule).redis.Load(), l.rules["api"].mode.(*hybridRule).lease.Load().Ref().(*syncer.Rule)}
	// byMaster[i] lists rule i's keys by the master of their slot: a key's
	// slot is its rule's and its own.
	byMaster := []map[string][]string{{}, {}}
	for i := range 30 {
		k := fmt.Sprintf("user-%d", i)
		for j, rule := range rules {
			d, err := l.Allow(ctx, rule, k)
			require.NoError(t, err)
			require.True(t, d.Allowed() && !d.Degraded(), "rule %s, key %s before the fault: %v", rule.Name, k, d)
			addr := l.shards.master(srs[j], k)
			byMaster[j][addr] = append(byMaster[j][addr], k)
		}
	}
	require.Len(t, byMaster[0], 3, "the keys are spread over the three masters")
	require.Len(t, byMaster[1], 3, "the keys are spread over the three masters")
	var dead *redisproc.Redis
	for _, s := range c.Servers {
		if s.Addr == c.Addrs[0] {
			dead = s
		}
	}
	dead.Kill()
	start := time.Now()
	// Central: each key once per round. Hybrid: 15 requests per key and
	// round, more than the bucket's share each key holds.
	slowest := map[string]time.Duration{}
	var degraded int
	for round := range 3 {
		for j, rule := range rules {
			for addr, ks := range byMaster[j] {
				for _, k := range ks {
					for range 1 + 14*j {
						t0 := time.Now()
						d, err := l.Allow(ctx, rule, k)
						if round > 0 {
							slowest[rule.Name] = max(slowest[rule.Name], time.Since(t0))
						}
						require.NoError(t, err, "a policy's decision comes without error")
						switch {
						case addr != dead.Addr && rule == r:
							assert.True(t, d.Allowed() && !d.Degraded(), "round %d: key %s of a live master: decided by Redis, got %v", round, k, d)
						case addr != dead.Addr:
							assert.False(t, d.Degraded(), "round %d: rule api, key %s of a live master: decided on its lease, got %v", round, k, d)
						case rule == r:
							assert.True(t, d.Degraded() && !d.Allowed(), "round %d: key %s of the dead master: FailClosed's refusal, got %v", round, k, d)
						case d.Degraded():
							degraded++
						}
					}
				}
			}
		}
	}
	assert.NotZero(t, degraded, "FailLocal decided the dead master's hybrid keys once their shares ran out")
	t.Logf("%v: hybrid decisions by the policy for the dead master's keys: %d", time.Since(start), degraded)
	for name, d := range slowest {
		// One decision per backoff tries the master again, within Timeout.
		assert.Less(t, d, DefaultTimeout+100*time.Millisecond, "rule %s: no decision waits on the dead master past Timeout (slowest %v)", name, d)
	}
	assert.False(t, l.breakerOpen(), "the Limiter's breaker stays closed: two masters of three answer")
	t.Logf("%v: restart", time.Since(start))
	require.NoError(t, dead.Restart())
	for j, rule := range rules {
		k := byMaster[j][dead.Addr][0]
		require.Eventually(t, func() bool {
			d, err := l.Allow(ctx, rule, k)
			return err == nil && !d.Degraded()
		}, 10*time.Second, 50*time.Millisecond, "rule %s: the restarted master's keys are decided by Redis again", rule.Name)
	}
	t.Logf("%v: back", time.Since(start))
	rec.mu.Lock()
	defer rec.mu.Unlock()
	var down, back int
	for _, m := range rec.msgs {
		switch {
		case strings.Contains(m, "cluster node unavailable"):
			down++
		case strings.Contains(m, "cluster node available again"):
			back++
		}
	}
	assert.Equal(t, 1, down, "the node's loss is logged once: %q", rec.msgs)
	assert.Equal(t, 1, back, "its return is logged once: %q", rec.msgs)
}
