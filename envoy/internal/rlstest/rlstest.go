// Package rlstest holds what the envoy module's tests share.
package rlstest

import (
	"os/exec"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/internal/redisproc"
)

// Redis starts a private redis-server for t, killed when t ends; t is
// skipped when redis-server is not installed.
func Redis(t *testing.T) *redisproc.Redis {
	t.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Skip("redis-server not installed (scripts/redis.sh ensure)")
	}
	srv, err := redisproc.Start(t.TempDir())
	require.NoError(t, err)
	t.Cleanup(srv.Close)
	return srv
}
