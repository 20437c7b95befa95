package rls_test

import (
	"context"
	"io"
	"log/slog"
	"net"
	"path/filepath"
	"sync"
	"testing"
	"time"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/hybridlimit/hybridlimit/envoy/rls"
	"github.com/hybridlimit/hybridlimit/hybrid"
)

// fakeClock is a clock tests move by hand.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// start is 2026-01-01 00:00 UTC: the start of a second, minute, hour and
// day window.
var start = time.Date(2026, time.January, 1, 0, 0, 0, 0, time.UTC)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// harness is a Service behind a real gRPC server on loopback, and a real
// client of it.
type harness struct {
	svc    *rls.Service
	client rlsv3.RateLimitServiceClient
	clock  *fakeClock
}

// newLocal serves the configuration files named (under testdata) from a
// Limiter without Redis (its rules run Local) on a fake clock.
func newLocal(t *testing.T, names ...string) *harness {
	t.Helper()
	clock := &fakeClock{t: start}
	l, err := hybrid.New(hybrid.Config{Clock: clock, Logger: quiet})
	require.NoError(t, err)
	t.Cleanup(func() { l.Close() })
	return serve(t, l, clock, rls.Config{}, names...)
}

// serve starts a Service with cfg on l, configured with the files named,
// behind a gRPC server, and a client of it.
func serve(t *testing.T, l *hybrid.Limiter, clock *fakeClock, cfg rls.Config, names ...string) *harness {
	t.Helper()
	cfg.Limiter, cfg.Logger = l, quiet
	if clock != nil {
		cfg.Clock = clock
	}
	svc, err := rls.New(cfg)
	require.NoError(t, err)
	t.Cleanup(func() { svc.Close() })
	var files []*rls.File
	for _, n := range names {
		fs, err := rls.Load(filepath.Join("testdata", n))
		require.NoError(t, err)
		files = append(files, fs...)
	}
	require.NoError(t, svc.Apply(files))
	return &harness{svc: svc, client: dial(t, svc), clock: clock}
}

// dial serves svc on a loopback port and returns a client of it.
func dial(t *testing.T, svc rlsv3.RateLimitServiceServer) rlsv3.RateLimitServiceClient {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	g := grpc.NewServer()
	rlsv3.RegisterRateLimitServiceServer(g, svc)
	done := make(chan struct{})
	go func() { defer close(done); g.Serve(ln) }()
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	t.Cleanup(func() {
		conn.Close()
		g.Stop()
		<-done
	})
	return rlsv3.NewRateLimitServiceClient(conn)
}

// desc is a descriptor of entries given as key, value, key, value, ….
func desc(kv ...string) *commonv3.RateLimitDescriptor {
	d := &commonv3.RateLimitDescriptor{}
	for i := 0; i+1 < len(kv); i += 2 {
		d.Entries = append(d.Entries, &commonv3.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	return d
}

// ask sends one request of descriptors ds in domain.
func (h *harness) ask(t *testing.T, domain string, ds ...*commonv3.RateLimitDescriptor) *rlsv3.RateLimitResponse {
	t.Helper()
	return h.askN(t, domain, 0, ds...)
}

func (h *harness) askN(t *testing.T, domain string, hits uint32, ds ...*commonv3.RateLimitDescriptor) *rlsv3.RateLimitResponse {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := h.client.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: domain, Descriptors: ds, HitsAddend: hits})
	require.NoError(t, err)
	require.Len(t, resp.GetStatuses(), len(ds))
	return resp
}

// admitted counts the requests admitted of n, each of descriptors ds.
func (h *harness) admitted(t *testing.T, n int, domain string, ds ...*commonv3.RateLimitDescriptor) int {
	t.Helper()
	ok := 0
	for range n {
		if h.ask(t, domain, ds...).GetOverallCode() == rlsv3.RateLimitResponse_OK {
			ok++
		}
	}
	return ok
}

const (
	codeOK   = rlsv3.RateLimitResponse_OK
	codeOver = rlsv3.RateLimitResponse_OVER_LIMIT
)

// headers returns a response's headers by name.
func headers(resp *rlsv3.RateLimitResponse) map[string]string {
	m := map[string]string{}
	for _, h := range resp.GetResponseHeadersToAdd() {
		m[h.GetKey()] = h.GetValue()
	}
	return m
}

type (
	commonv3RateLimitDescriptor = commonv3.RateLimitDescriptor
	commonv3RateLimitOverride   = commonv3.RateLimitDescriptor_RateLimitOverride
)

const (
	typeMinute           = typev3.RateLimitUnit_MINUTE
	codesInvalidArgument = codes.InvalidArgument
)

func statusCode(err error) codes.Code { return status.Code(err) }

// newLimiter is a Limiter without Redis on clock.
func newLimiter(t *testing.T, clock *fakeClock) *hybrid.Limiter {
	t.Helper()
	l, err := hybrid.New(hybrid.Config{Clock: clock, Logger: quiet})
	require.NoError(t, err)
	t.Cleanup(func() { l.Close() })
	return l
}
