package rls_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/envoy/internal/rlstest"
	"github.com/hybridlimit/hybridlimit/envoy/rls"
	"github.com/hybridlimit/hybridlimit/hybrid"
	"github.com/hybridlimit/hybridlimit/internal/leakcheck"
)

// replicas starts n Services, each on its own Limiter in hybrid mode
// against addr and gossiping with the first, behind gRPC servers, all
// configured with the files named.
func replicas(t *testing.T, addr, prefix string, n int, names ...string) []*harness {
	t.Helper()
	var hs []*harness
	var seeds []string
	for i := range n {
		client := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true, MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
		t.Cleanup(func() { client.Close() })
		ml := memberlist.DefaultLocalConfig()
		ml.Name, ml.BindAddr, ml.BindPort = fmt.Sprintf("rls-%d", i), "127.0.0.1", 0
		ml.ProbeInterval, ml.ProbeTimeout = 100*time.Millisecond, 50*time.Millisecond
		ml.GossipInterval, ml.PushPullInterval = 20*time.Millisecond, 500*time.Millisecond
		l, err := hybrid.New(hybrid.Config{
			Redis: client, Keyspace: hybrid.Keyspace{Prefix: prefix}, Logger: quiet,
			Gossip: &hybrid.GossipConfig{Memberlist: ml, Seeds: seeds, Insecure: true, Label: prefix,
				Interval: 50 * time.Millisecond, DemandHalfLife: 500 * time.Millisecond},
		})
		require.NoError(t, err)
		t.Cleanup(func() { l.Close() })
		if i == 0 {
			seeds = []string{l.Stats().GossipAddr}
		}
		hs = append(hs, serve(t, l, nil, rls.Config{}, names...))
	}
	return hs
}

// roundRobin sends n requests of descriptor kv over hs in turn and counts
// those admitted.
func roundRobin(t *testing.T, hs []*harness, n int, domain string, kv ...string) int {
	t.Helper()
	ok := 0
	for i := range n {
		if hs[i%len(hs)].ask(t, domain, desc(kv...)).GetOverallCode() == codeOK {
			ok++
		}
	}
	return ok
}

// Three replicas share one limit through Redis; Redis killed by its PID,
// they keep answering, each from its own state and the gossip, by the
// limit's failure policy.
func TestRedisReplicasAndOutage(t *testing.T) {
	leakcheck.Check(t)
	srv := rlstest.Redis(t)
	hs := replicas(t, srv.Addr, "rlstest", 3, "replicas.yaml")

	const limit = 60 // per hour: no window ends during the test
	got := roundRobin(t, hs, 2*limit, "replicas", "tenant", "a")
	t.Logf("Redis up: %d admitted of %d, limit %d", got, 2*limit, limit)
	assert.InDelta(t, limit, got, 0.1*limit)

	require.NotZero(t, srv.PID())
	srv.Kill()
	startOut := time.Now()
	got = roundRobin(t, hs, 2*limit, "replicas", "tenant", "b")
	took := time.Since(startOut)
	t.Logf("Redis killed: %d admitted of %d, limit %d, in %v", got, 2*limit, limit, took)
	assert.InDelta(t, limit, got, 0.5*limit, "the gossip policy holds about the limit")
	// A fail_closed limit refuses what Redis cannot decide.
	resp := hs[0].ask(t, "replicas", desc("login", "x"))
	assert.Equal(t, codeOver, resp.GetOverallCode())
	// The key used up before the outage stays refused.
	assert.Equal(t, codeOver, hs[1].ask(t, "replicas", desc("tenant", "a")).GetOverallCode())
}
