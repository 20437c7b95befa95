package redistest

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Bounds of the failover tests: the shared topologies fail over in a few
// seconds (Sentinel's down-after is 1 s, Cluster's node timeout 2 s).
const (
	promoteWithin = 15 * time.Second
	healthyWithin = 20 * time.Second
)

// writeWithin retries SET until one succeeds, for at most within. A failover
// client finds the new master on its own; a cluster client is asked to reload
// the slots after each failure, as a timeout (unlike MOVED) does not make it
// reload them before its ClusterStateReloadInterval.
func writeWithin(t *testing.T, c redis.UniversalClient, key string, within time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	waitFor(t, within, "a write to "+key, func(ctx context.Context) error {
		err := c.Set(ctx, key, "after", time.Minute).Err()
		if cc, ok := c.(*redis.ClusterClient); ok && err != nil {
			cc.ReloadState(ctx)
		}
		return err
	})
	return time.Since(start)
}

// setReplicated writes key on c's connection and waits until a replica has it
// (WAIT counts the writes of its own connection, so both go in one pipeline).
func setReplicated(t *testing.T, c redis.Cmdable, key string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var wait *redis.Cmd
	_, err := c.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.Set(ctx, key, "before", time.Minute)
		wait = p.Do(ctx, "WAIT", 1, 3000)
		return nil
	})
	require.NoError(t, err)
	n, err := wait.Int64()
	require.NoError(t, err)
	require.EqualValues(t, 1, n, "replicas that acknowledged the write of %s", key)
}

// roleOf returns the role (master or slave) of the server at addr.
func roleOf(ctx context.Context, addr string) (string, error) {
	c := redis.NewClient(Options(addr))
	defer c.Close()
	info, err := c.Info(ctx, "replication").Result()
	r, _ := infoField(info, "role")
	return r, err
}

func role(t *testing.T, addr string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	r, err := roleOf(ctx, addr)
	require.NoError(t, err)
	return r
}

// TestSentinelFailover kills the shared Sentinel topology's master: a
// replica that had its data is promoted, a failover client writes again, and
// the killed server, restarted, comes back as the new master's replica.
func TestSentinelFailover(t *testing.T) {
	sentinels, name := Sentinel(t)
	old := WaitSentinel(t, sentinels, name, healthyWithin)

	c := redis.NewFailoverClient(&redis.FailoverOptions{
		MasterName: name, SentinelAddrs: sentinels,
		DialTimeout: 500 * time.Millisecond, ReadTimeout: 500 * time.Millisecond, WriteTimeout: 500 * time.Millisecond,
		ContextTimeoutEnabled: true, MaxRetries: -1,
	})
	t.Cleanup(func() { c.Close() })
	key := Prefix(t)
	setReplicated(t, c, key)

	srv := FindShared(t, old)
	start := time.Now()
	srv.Kill()

	var promoted string
	waitFor(t, promoteWithin, "a replica promoted", func(ctx context.Context) error {
		for _, s := range sentinels {
			sc := redis.NewSentinelClient(Options(s))
			a, err := sc.GetMasterAddrByName(ctx, name).Result()
			sc.Close()
			if err != nil {
				return err
			}
			if a[0]+":"+a[1] == old {
				return errStill(old)
			}
			promoted = a[0] + ":" + a[1]
		}
		if r, err := roleOf(ctx, promoted); err != nil || r != "master" {
			return errStill(promoted + " not a master yet")
		}
		return nil
	})
	t.Logf("Sentinel: %s promoted %v after the master's SIGKILL", promoted, time.Since(start).Round(time.Millisecond))

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	v, err := Client(t, promoted).Get(ctx, key).Result()
	require.NoError(t, err, "the promoted replica has the key written before the kill")
	assert.Equal(t, "before", v)
	t.Logf("Sentinel: the failover client wrote again %v after promotion",
		writeWithin(t, c, key, 10*time.Second).Round(time.Millisecond))

	srv.Restart()
	start = time.Now()
	assert.Equal(t, promoted, WaitSentinel(t, sentinels, name, healthyWithin))
	assert.Equal(t, "slave", role(t, old), "the restarted old master")
	t.Logf("Sentinel: healthy %v after the restart", time.Since(start).Round(time.Millisecond))
}

// TestClusterFailover pauses a master of the shared replicated Cluster until
// its replica is promoted: a cluster client writes again, and the old
// master, resumed, comes back as the new master's replica.
func TestClusterFailover(t *testing.T) {
	addrs := ReplicatedCluster(t)
	WaitCluster(t, addrs, healthyWithin)
	// Short timeouts and no retries of a node: a reload of the slots that
	// asks the paused node first gives up on it soon.
	c := redis.NewClusterClient(&redis.ClusterOptions{
		Addrs:       addrs,
		DialTimeout: 500 * time.Millisecond, ReadTimeout: 500 * time.Millisecond, WriteTimeout: 500 * time.Millisecond,
		MaxRetries: -1,
	})
	t.Cleanup(func() { c.Close() })

	key := "{" + Prefix(t) + "}"
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	node, err := c.MasterForKey(ctx, key)
	require.NoError(t, err)
	old := node.Options().Addr
	setReplicated(t, node, key)

	slot, err := c.ClusterKeySlot(ctx, key).Result()
	require.NoError(t, err)
	// The replica of the old master, which is to take its place: ask it who
	// serves the slot.
	var replica string
	nodes, err := clusterNodes(ctx, old)
	require.NoError(t, err)
	for _, n := range nodes {
		if strings.Contains(n.flags, "myself") {
			for _, r := range nodes {
				if r.master == n.id {
					replica = r.addr
				}
			}
		}
	}
	require.NotEmpty(t, replica, "a replica of %s", old)

	rc := Client(t, replica)
	srv := FindShared(t, old)
	start := time.Now()
	srv.Pause()
	waitFor(t, promoteWithin, "a replica promoted", func(ctx context.Context) error {
		shards, err := rc.ClusterShards(ctx).Result()
		if err != nil {
			return err
		}
		for _, sh := range shards {
			for _, r := range sh.Slots {
				if r.Start > slot || slot > r.End {
					continue
				}
				for _, n := range sh.Nodes {
					if n.Role == "master" && n.IP+":"+strconv.FormatInt(n.Port, 10) == replica {
						return nil
					}
				}
			}
		}
		return errStill(replica + " not the slot's master")
	})
	t.Logf("Cluster: %s promoted %v after the master's SIGSTOP", replica, time.Since(start).Round(time.Millisecond))

	ctx, cancel = context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	v, err := rc.Get(ctx, key).Result()
	require.NoError(t, err, "the promoted replica has the key written before the pause")
	assert.Equal(t, "before", v)
	t.Logf("Cluster: the cluster client wrote again %v after promotion",
		writeWithin(t, c, key, 10*time.Second).Round(time.Millisecond))

	srv.Resume()
	start = time.Now()
	WaitCluster(t, addrs, healthyWithin)
	assert.Equal(t, "slave", role(t, old), "the resumed old master")
	t.Logf("Cluster: healthy %v after SIGCONT", time.Since(start).Round(time.Millisecond))
}

// errStill says what a wait is still waiting on.
type errStill string

func (e errStill) Error() string { return "still " + string(e) }
