package main

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/hybridlimit/hybridlimit/envoy/internal/rlstest"
	"github.com/hybridlimit/hybridlimit/internal/leakcheck"
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

// The command against a real redis-server: health SERVING, decisions,
// a reload on file change, and a clean exit on cancel.
func TestRun(t *testing.T) {
	leakcheck.Check(t)
	srv := rlstest.Redis(t)
	dir := t.TempDir()
	cfg := filepath.Join(dir, "config.yaml")
	write := func(rpu string) {
		tmp := filepath.Join(dir, ".tmp")
		require.NoError(t, os.WriteFile(tmp, []byte("domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: "+rpu+"}\n"), 0o644))
		require.NoError(t, os.Rename(tmp, cfg))
	}
	write("3")

	ctx, cancel := context.WithCancel(t.Context())
	addrs := make(chan string, 1)
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"-grpc-addr", "127.0.0.1:0", "-config", dir, "-log-level", "error",
			"-gossip-bind", "127.0.0.1:0", "-gossip-insecure", "-gossip-name", "t", "-drain", "1s"},
			env(map[string]string{"RLS_REDIS_ADDR": srv.Addr, "RLS_REDIS_PREFIX": "cmdtest"}), io.Discard,
			func(a string) { addrs <- a })
	}()
	var addr string
	select {
	case addr = <-addrs:
	case err := <-done:
		t.Fatal(err)
	}
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	defer conn.Close()
	hc := healthpb.NewHealthClient(conn)
	for _, name := range []string{"", "envoy.service.ratelimit.v3.RateLimitService"} {
		h, err := hc.Check(t.Context(), &healthpb.HealthCheckRequest{Service: name})
		require.NoError(t, err)
		assert.Equal(t, healthpb.HealthCheckResponse_SERVING, h.GetStatus(), name)
	}
	rc := rlsv3.NewRateLimitServiceClient(conn)
	req := &rlsv3.RateLimitRequest{Domain: "d", Descriptors: []*commonv3.RateLimitDescriptor{
		{Entries: []*commonv3.RateLimitDescriptor_Entry{{Key: "k", Value: "v"}}}}}
	codes := []rlsv3.RateLimitResponse_Code{}
	for range 4 {
		resp, err := rc.ShouldRateLimit(t.Context(), req)
		require.NoError(t, err)
		codes = append(codes, resp.GetOverallCode())
	}
	assert.Equal(t, []rlsv3.RateLimitResponse_Code{1, 1, 1, 2}, codes, "OK×3, then OVER_LIMIT")

	write("5")
	require.Eventually(t, func() bool {
		resp, err := rc.ShouldRateLimit(t.Context(), req)
		return err == nil && resp.GetStatuses()[0].GetCurrentLimit().GetRequestsPerUnit() == 5
	}, 10*time.Second, 20*time.Millisecond)

	cancel()
	require.NoError(t, <-done)
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
