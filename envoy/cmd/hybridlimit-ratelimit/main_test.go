package main

import (
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/hybridlimit/hybridlimit/envoy/internal/rlstest"
	"github.com/hybridlimit/hybridlimit/internal/leakcheck"
	"github.com/hybridlimit/hybridlimit/internal/redisproc"
)

func env(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

func TestParseFlagsAndEnv(t *testing.T) {
	o, err := parse([]string{"-grpc-addr", ":9000"}, env(map[string]string{
		"RLS_GRPC_ADDR": ":1", "RLS_REDIS_ADDR": "r:6379", "RLS_GOSSIP_JOIN": "a:1,b:2",
		"RLS_SHADOW_MODE": "true", "RLS_REDIS_PASSWORD": "pw", "RLS_DRAIN": "1s",
	}), io.Discard)
	require.NoError(t, err)
	assert.Equal(t, ":9000", o.grpcAddr, "the flag wins")
	assert.Equal(t, "r:6379", o.redisAddr)
	assert.Equal(t, []string{"a:1", "b:2"}, split(o.gossipJoin))
	assert.True(t, o.shadowMode)
	assert.Equal(t, "pw", o.redisPassword)
	assert.Equal(t, time.Second, o.drain)
	assert.Equal(t, "/etc/ratelimit/config", o.config, "default")

	_, err = parse(nil, env(map[string]string{"RLS_SHADOW_MODE": "maybe"}), io.Discard)
	assert.ErrorContains(t, err, "RLS_SHADOW_MODE")
	_, err = parse([]string{"-nope"}, env(nil), io.Discard)
	assert.Error(t, err)
	err = run(t.Context(), []string{"-mode", "x"}, env(nil), io.Discard, nil)
	assert.ErrorContains(t, err, "-mode")
	err = run(t.Context(), []string{"-redis-sentinel-addrs", "a:1"}, env(nil), io.Discard, nil)
	assert.ErrorContains(t, err, "-redis-sentinel-master")
}

// started is the command running in a goroutine, and a client of it.
type started struct {
	conn   *grpc.ClientConn
	rc     rlsv3.RateLimitServiceClient
	cancel context.CancelFunc
	done   chan error
}

// start runs the command with args and the variables of env, on a free
// loopback port, until the test stops it (stop) or ends.
func start(t *testing.T, args []string, vars map[string]string) *started {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	s := &started{cancel: cancel, done: make(chan error, 1)}
	addrs := make(chan string, 1)
	go func() {
		s.done <- run(ctx, append([]string{"-grpc-addr", "127.0.0.1:0", "-log-level", "error", "-drain", "1s"}, args...),
			env(vars), io.Discard, func(a string) { addrs <- a })
	}()
	var addr string
	select {
	case addr = <-addrs:
	case err := <-s.done:
		t.Fatal(err)
	}
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	s.conn, s.rc = conn, rlsv3.NewRateLimitServiceClient(conn)
	t.Cleanup(func() { s.stop(t) })
	return s
}

// stop cancels the command and checks that it ended without error.
func (s *started) stop(t *testing.T) {
	if s.cancel == nil {
		return
	}
	s.cancel()
	s.cancel = nil
	s.conn.Close()
	require.NoError(t, <-s.done)
}

// writeConfig writes a configuration of one limit of rpu an hour into
// dir, by rename.
func writeConfig(t *testing.T, dir, rpu string) {
	tmp := filepath.Join(dir, ".tmp")
	require.NoError(t, os.WriteFile(tmp, []byte("domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: "+rpu+"}\n"), 0o644))
	require.NoError(t, os.Rename(tmp, filepath.Join(dir, "config.yaml")))
}

var req = &rlsv3.RateLimitRequest{Domain: "d", Descriptors: []*commonv3.RateLimitDescriptor{
	{Entries: []*commonv3.RateLimitDescriptor_Entry{{Key: "k", Value: "v"}}}}}

// codes returns the overall codes of n requests.
func (s *started) codes(t *testing.T, n int) []rlsv3.RateLimitResponse_Code {
	var out []rlsv3.RateLimitResponse_Code
	for range n {
		resp, err := s.rc.ShouldRateLimit(t.Context(), req)
		require.NoError(t, err)
		out = append(out, resp.GetOverallCode())
	}
	return out
}

var threeThenOver = []rlsv3.RateLimitResponse_Code{1, 1, 1, 2}

// The command against a real redis-server: health SERVING, decisions,
// a reload on file change, and a clean exit on cancel.
func TestRun(t *testing.T) {
	leakcheck.Check(t)
	srv := rlstest.Redis(t)
	dir := t.TempDir()
	writeConfig(t, dir, "3")
	s := start(t, []string{"-config", dir, "-gossip-bind", "127.0.0.1:0", "-gossip-insecure", "-gossip-name", "t"},
		map[string]string{"RLS_REDIS_ADDR": srv.Addr, "RLS_REDIS_PREFIX": "cmdtest"})
	hc := healthpb.NewHealthClient(s.conn)
	for _, name := range []string{"", "envoy.service.ratelimit.v3.RateLimitService"} {
		h, err := hc.Check(t.Context(), &healthpb.HealthCheckRequest{Service: name})
		require.NoError(t, err)
		assert.Equal(t, healthpb.HealthCheckResponse_SERVING, h.GetStatus(), name)
	}
	assert.Equal(t, threeThenOver, s.codes(t, 4), "OK×3, then OVER_LIMIT")

	writeConfig(t, dir, "5")
	require.Eventually(t, func() bool {
		resp, err := s.rc.ShouldRateLimit(t.Context(), req)
		return err == nil && resp.GetStatuses()[0].GetCurrentLimit().GetRequestsPerUnit() == 5
	}, 10*time.Second, 20*time.Millisecond)
	s.stop(t)
}

// The command with a global store: a limit of global reach is served,
// one limit across the region's replica and a second region's; without a
// region the command does not start.
func TestRunGlobal(t *testing.T) {
	store := rlstest.Redis(t)
	dir := t.TempDir()
	cfg := "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 4, global: true}\n"
	require.NoError(t, os.WriteFile(filepath.Join(dir, "config.yaml"), []byte(cfg), 0o644))
	vars := map[string]string{"RLS_GLOBAL_REDIS_ADDR": store.Addr, "RLS_REDIS_PREFIX": "globaltest"}
	err := run(t.Context(), []string{"-config", dir, "-redis-addr", rlstest.Redis(t).Addr}, env(vars), io.Discard, nil)
	assert.ErrorContains(t, err, "Region", "a global store needs a region")

	var regions []*started
	var counts []*redis.Client
	for _, name := range []string{"eu", "us"} {
		srv := rlstest.Redis(t)
		regions = append(regions, start(t, []string{"-config", dir, "-redis-addr", srv.Addr, "-region", name}, vars))
		c := redis.NewClient(&redis.Options{Addr: srv.Addr})
		t.Cleanup(func() { c.Close() })
		counts = append(counts, c)
	}
	// Once each region counts both (a key new to a region opens there at
	// the limit ÷ regions), both admit, and together no more than the limit.
	for _, c := range counts {
		require.Eventually(t, func() bool {
			n, err := c.Get(t.Context(), "{globaltest:nodes}:regions").Int()
			return err == nil && n == 2
		}, 10*time.Second, 20*time.Millisecond, "the regions counted")
	}
	// A replica that read a smaller count (its region registered first)
	// reads it again a second later, at its next round.
	time.Sleep(1500 * time.Millisecond)
	var ok int
	for range 3 {
		for _, s := range regions {
			for _, c := range s.codes(t, 1) {
				if c == rlsv3.RateLimitResponse_OK {
					ok++
				}
			}
		}
	}
	assert.Equal(t, 4, ok, "one limit across the regions: each region's opening, 4 ÷ 2, at once")
	for _, s := range regions {
		s.stop(t)
	}
}

// The command against a Sentinel group and a Cluster, as their flags
// name them.
func TestRunTopologies(t *testing.T) {
	for _, bin := range []string{"redis-server", "redis-cli"} {
		if _, err := exec.LookPath(bin); err != nil {
			t.Skip(bin + " not installed (scripts/redis.sh ensure)")
		}
	}
	dir := t.TempDir()
	writeConfig(t, dir, "3")
	t.Run("sentinel", func(t *testing.T) {
		sg, err := redisproc.StartSentinel(t.TempDir())
		require.NoError(t, err)
		defer sg.Close()
		s := start(t, []string{"-config", dir, "-redis-sentinel-addrs", strings.Join(sg.Addrs, ","), "-redis-sentinel-master", sg.Master}, nil)
		assert.Equal(t, threeThenOver, s.codes(t, 4))
		s.stop(t)
	})
	t.Run("cluster", func(t *testing.T) {
		c, err := redisproc.StartCluster(t.TempDir(), 0)
		require.NoError(t, err)
		defer c.Close()
		s := start(t, []string{"-config", dir}, map[string]string{"RLS_REDIS_CLUSTER_ADDRS": strings.Join(c.Addrs, ",")})
		assert.Equal(t, threeThenOver, s.codes(t, 4))
		s.stop(t)
	})
}

func TestGossipOptions(t *testing.T) {
	o, err := parse([]string{"-gossip-bind", "0.0.0.0:7946", "-gossip-advertise", "10.0.0.5:7000", "-gossip-join", "a:7946, b:7946", "-gossip-name", "r1"},
		env(map[string]string{"RLS_GOSSIP_KEY": "MDEyMzQ1Njc4OWFiY2RlZg=="}), io.Discard)
	require.NoError(t, err)
	g, err := o.gossip(nil)
	require.NoError(t, err)
	assert.Equal(t, "0.0.0.0", g.Memberlist.BindAddr)
	assert.Equal(t, 7946, g.Memberlist.BindPort)
	assert.Equal(t, "10.0.0.5", g.Memberlist.AdvertiseAddr)
	assert.Equal(t, 7000, g.Memberlist.AdvertisePort)
	assert.Equal(t, "r1", g.Memberlist.Name)
	assert.Equal(t, []string{"a:7946", "b:7946"}, g.Seeds)
	assert.Equal(t, [][]byte{[]byte("0123456789abcdef")}, g.Keys)
	assert.False(t, g.Insecure)

	o.gossipKey = "not base64!"
	_, err = o.gossip(nil)
	assert.ErrorContains(t, err, "RLS_GOSSIP_KEY")
	o.gossipBind = ""
	g, err = o.gossip(nil)
	assert.NoError(t, err)
	assert.Nil(t, g, "no bind address: no gossip")
}
