package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/internal/redisproc"
)

// The reproduction counts per key and window in Redis, two commands a
// descriptor, and fails the request when Redis does not answer.
func TestRepro(t *testing.T) {
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Skip("redis-server not installed (scripts/redis.sh ensure)")
	}
	srv, err := redisproc.Start(t.TempDir())
	require.NoError(t, err)
	defer srv.Close()
	cfg := filepath.Join(t.TempDir(), "c.yaml")
	require.NoError(t, os.WriteFile(cfg, []byte("domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 2}\n"), 0o644))
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, MaxRetries: -1})
	defer rdb.Close()
	r, err := newRepro(rdb, cfg)
	require.NoError(t, err)
	req := &rlsv3.RateLimitRequest{Domain: "d", Descriptors: []*commonv3.RateLimitDescriptor{
		{Entries: []*commonv3.RateLimitDescriptor_Entry{{Key: "k", Value: "a"}}},
		{Entries: []*commonv3.RateLimitDescriptor_Entry{{Key: "other", Value: "a"}}},
	}}
	var codes []rlsv3.RateLimitResponse_Code
	for range 3 {
		resp, err := r.ShouldRateLimit(t.Context(), req)
		require.NoError(t, err)
		codes = append(codes, resp.GetOverallCode())
		assert.Equal(t, rlsv3.RateLimitResponse_OK, resp.GetStatuses()[1].GetCode(), "no limit")
	}
	assert.Equal(t, []rlsv3.RateLimitResponse_Code{1, 1, 2}, codes)
	info, err := rdb.Info(t.Context(), "commandstats").Result()
	require.NoError(t, err)
	assert.Contains(t, info, "cmdstat_incrby:calls=3")
	assert.Contains(t, info, "cmdstat_expire:calls=3")
	srv.Kill()
	_, err = r.ShouldRateLimit(t.Context(), req)
	assert.Error(t, err)
}
