package grpclimit_test

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/hybridlimit/hybridlimit/grpclimit"
	"github.com/hybridlimit/hybridlimit/hybrid"
	"github.com/hybridlimit/hybridlimit/hybrid/httplimit"
	"github.com/hybridlimit/hybridlimit/internal/clocktest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// t0 is where the tests' clocks start: a whole minute, so that windows of
// 1, 10 and 60 s start there.
var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// The methods of the test services.
const (
	mEmpty  = "/grpc.testing.TestService/EmptyCall"
	mUnary  = "/grpc.testing.TestService/UnaryCall"
	mStream = "/grpc.testing.TestService/StreamingOutputCall"
	mHealth = "/grpc.health.v1.Health/Check"
)

// newLimiter returns a Local Limiter on clk, closed when t ends.
func newLimiter(t testing.TB, clk *clocktest.Clock) *hybrid.Limiter {
	t.Helper()
	l, err := hybrid.New(hybrid.Config{Clock: clk})
	require.NoError(t, err)
	t.Cleanup(func() { l.Close() })
	return l
}

// testServer is grpc.testing.TestService: EmptyCall and UnaryCall answer,
// StreamingOutputCall sends one empty response per requested one.
type testServer struct {
	testpb.UnimplementedTestServiceServer
}

func (testServer) EmptyCall(context.Context, *testpb.Empty) (*testpb.Empty, error) {
	return &testpb.Empty{}, nil
}

func (testServer) UnaryCall(context.Context, *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
	return &testpb.SimpleResponse{}, nil
}

func (testServer) StreamingOutputCall(req *testpb.StreamingOutputCallRequest, ss testpb.TestService_StreamingOutputCallServer) error {
	for range req.GetResponseParameters() {
		if err := ss.Send(&testpb.StreamingOutputCallResponse{}); err != nil {
			return err
		}
	}
	return nil
}

// client is a real client of a real server behind an Interceptor, on a
// loopback listener.
type client struct {
	test   testpb.TestServiceClient
	health healthpb.HealthClient
}

// serve starts a server of the test services behind ic, listening on
// network and address (port 0), and returns a client of it; both are
// stopped when t ends.
func serve(t *testing.T, ic *grpclimit.Interceptor) *client {
	t.Helper()
	return serveOn(t, ic, "127.0.0.1:0")
}

func serveOn(t *testing.T, ic *grpclimit.Interceptor, addr string) *client {
	t.Helper()
	lis, err := net.Listen("tcp", addr)
	require.NoError(t, err)
	s := grpc.NewServer(grpc.ChainUnaryInterceptor(ic.UnaryServerInterceptor()), grpc.ChainStreamInterceptor(ic.StreamServerInterceptor()))
	testpb.RegisterTestServiceServer(s, testServer{})
	healthpb.RegisterHealthServer(s, health.NewServer())
	done := make(chan struct{})
	go func() { defer close(done); s.Serve(lis) }() //nolint:errcheck // Serve returns when Stop is called
	t.Cleanup(func() { s.Stop(); <-done })
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close() })
	return &client{test: testpb.NewTestServiceClient(conn), health: healthpb.NewHealthClient(conn)}
}

// result is what a client saw of a call: its header metadata and status.
type result struct {
	header metadata.MD
	st     *status.Status
}

// empty calls EmptyCall with the metadata given as key, value pairs.
func (c *client) empty(t *testing.T, kv ...string) result {
	t.Helper()
	var hdr metadata.MD
	ctx := metadata.AppendToOutgoingContext(t.Context(), kv...)
	_, err := c.test.EmptyCall(ctx, &testpb.Empty{}, grpc.Header(&hdr))
	return result{header: hdr, st: status.Convert(err)}
}

// unary calls UnaryCall with the metadata given as key, value pairs.
func (c *client) unary(t *testing.T, kv ...string) result {
	t.Helper()
	var hdr metadata.MD
	ctx := metadata.AppendToOutgoingContext(t.Context(), kv...)
	_, err := c.test.UnaryCall(ctx, &testpb.SimpleRequest{}, grpc.Header(&hdr))
	return result{header: hdr, st: status.Convert(err)}
}

// healthCheck calls Health/Check.
func (c *client) healthCheck(t *testing.T) result {
	t.Helper()
	var hdr metadata.MD
	_, err := c.health.Check(t.Context(), &healthpb.HealthCheckRequest{}, grpc.Header(&hdr))
	return result{header: hdr, st: status.Convert(err)}
}

// codes returns the status codes of n calls of call.
func countOK(n int, call func() result) (ok int, refused []codes.Code) {
	for range n {
		r := call()
		if r.st.Code() == codes.OK {
			ok++
		} else {
			refused = append(refused, r.st.Code())
		}
	}
	return ok, refused
}

// details returns the RetryInfo and QuotaFailure of a refusal's status,
// failing t unless it has exactly those.
func details(t *testing.T, st *status.Status) (*errdetails.RetryInfo, *errdetails.QuotaFailure) {
	t.Helper()
	var ri *errdetails.RetryInfo
	var qf *errdetails.QuotaFailure
	for _, d := range st.Details() {
		switch d := d.(type) {
		case *errdetails.RetryInfo:
			ri = d
		case *errdetails.QuotaFailure:
			qf = d
		default:
			t.Fatalf("unexpected detail %T: %v", d, d)
		}
	}
	require.NotNil(t, ri, "RetryInfo")
	require.NotNil(t, qf, "QuotaFailure")
	return ri, qf
}

// ipRule is a rule of quota per window per client IP on endpoint: a fixed
// window, whose figures are exact.
func ipRule(id, endpoint string, quota int64, window time.Duration) httplimit.Rule {
	return httplimit.Rule{ID: id, Key: httplimit.KeyIP, Endpoint: endpoint, Algorithm: hybrid.FixedWindow, Quota: quota, Window: window}
}

// newInterceptor returns an Interceptor over a Local Limiter on clk.
func newInterceptor(t *testing.T, clk *clocktest.Clock, cfg grpclimit.Config) *grpclimit.Interceptor {
	t.Helper()
	ic, err := grpclimit.New(newLimiter(t, clk), cfg)
	require.NoError(t, err)
	return ic
}
