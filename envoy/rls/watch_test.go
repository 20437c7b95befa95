package rls_test

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/envoy/rls"
	"github.com/hybridlimit/hybridlimit/internal/leakcheck"
)

func limitFile(rpu int) string {
	return "domain: internal\ndescriptors:\n  - key: azure\n    rate_limit:\n      unit: minute\n      requests_per_unit: " + strconv.Itoa(rpu) + "\n"
}

// Watch applies each new version of a directory's files, by rename as
// editors and Kubernetes volumes write them, and keeps the previous one
// when a version does not load.
func TestWatchReloads(t *testing.T) {
	leakcheck.Check(t)
	dir := t.TempDir()
	path := filepath.Join(dir, "config.yaml")
	write := func(s string) {
		tmp := filepath.Join(dir, ".tmp")
		require.NoError(t, os.WriteFile(tmp, []byte(s), 0o644))
		require.NoError(t, os.Rename(tmp, path))
	}
	write(limitFile(100))
	clock := &fakeClock{t: start}
	l := newLimiter(t, clock)
	svc, err := rls.New(rls.Config{Limiter: l, Clock: clock, Logger: quiet})
	require.NoError(t, err)
	defer svc.Close()
	w, err := rls.Watch(t.Context(), dir, svc.Apply, rls.WatchConfig{PollInterval: time.Hour, Debounce: 10 * time.Millisecond, Logger: quiet})
	require.NoError(t, err)
	defer w.Close()
	h := &harness{svc: svc, client: dial(t, svc), clock: clock}
	limitNow := func() uint32 {
		return h.ask(t, "internal", desc("azure", "a")).GetStatuses()[0].GetCurrentLimit().GetRequestsPerUnit()
	}
	require.EqualValues(t, 100, limitNow())

	write(limitFile(200))
	require.Eventually(t, func() bool { return limitNow() == 200 }, 5*time.Second, 10*time.Millisecond)

	write("domain: internal\ndescriptors:\n  - key: azure\n    rate_limit: {unit: fortnight}\n")
	write(limitFile(300)[:76])         // a truncated write: "unit: min" does not parse either
	time.Sleep(100 * time.Millisecond) // no event to wait for: a rejected version changes nothing
	assert.EqualValues(t, 200, limitNow(), "the previous version keeps serving")

	write(limitFile(300))
	require.Eventually(t, func() bool { return limitNow() == 300 }, 5*time.Second, 10*time.Millisecond)
	require.NoError(t, w.Close())
	require.NoError(t, w.Close(), "idempotent")
}

func TestWatchFirstVersion(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "bad.yaml")
	require.NoError(t, os.WriteFile(path, []byte("domain: ''"), 0o644))
	_, err := rls.Watch(t.Context(), path, func([]*rls.File) error { return nil }, rls.WatchConfig{})
	assert.ErrorIs(t, err, rls.ErrInvalidConfig)
	_, err = rls.Watch(t.Context(), filepath.Join(dir, "missing.yaml"), func([]*rls.File) error { return nil }, rls.WatchConfig{})
	assert.ErrorIs(t, err, os.ErrNotExist)
	// A directory: its .yaml and .yml files, dot files skipped.
	require.NoError(t, os.WriteFile(path, []byte("domain: a"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "b.yml"), []byte("domain: b"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, ".c.yaml"), []byte("domain: ''"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "notes.txt"), []byte("x"), 0o644))
	files, err := rls.Load(dir)
	require.NoError(t, err)
	require.Len(t, files, 2)
	assert.Equal(t, "b", files[0].Domain, "b.yml before bad.yaml")
	assert.Equal(t, "a", files[1].Domain)
}

// Reloads during traffic: requests decided on a snapshot whose rules an
// Apply has just unregistered are decided again on the new one, and never
// fail.
func TestApplyDuringTraffic(t *testing.T) {
	leakcheck.Check(t)
	clock := &fakeClock{t: start}
	l := newLimiter(t, clock)
	h := serve(t, l, clock, rls.Config{}, "example5.yaml")
	versions := []*rls.File{
		mustParse(t, limitFile(100)),
		mustParse(t, "domain: internal\ndescriptors:\n  - key: azure\n    rate_limit: {unit: minute, requests_per_unit: 100, algorithm: gcra}\n"),
	}
	stop := make(chan struct{})
	applied := make(chan int)
	go func() {
		n := 0
		defer func() { applied <- n }()
		for {
			select {
			case <-stop:
				return
			default:
			}
			if err := h.svc.Apply([]*rls.File{versions[n%2]}); err != nil {
				t.Error(err)
				return
			}
			n++
		}
	}()
	for i := range 300 {
		resp, err := h.client.ShouldRateLimit(t.Context(), &rlsv3.RateLimitRequest{Domain: "internal",
			Descriptors: []*commonv3RateLimitDescriptor{desc("azure", strconv.Itoa(i%7)), desc("ldap", "x")}})
		require.NoError(t, err)
		require.Len(t, resp.GetStatuses(), 2)
	}
	close(stop)
	t.Logf("%d versions applied during 300 requests", <-applied)
}
