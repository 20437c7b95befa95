package grpclimit_test

import (
	"context"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/hybridlimit/hybridlimit/grpclimit"
	"github.com/hybridlimit/hybridlimit/hybrid"
	"github.com/hybridlimit/hybridlimit/hybrid/httplimit"
	"github.com/hybridlimit/hybridlimit/internal/clocktest"
)

// countingServer counts the calls that reach it.
type countingServer struct {
	testpb.UnimplementedTestServiceServer
	calls atomic.Int64
}

func (s *countingServer) EmptyCall(context.Context, *testpb.Empty) (*testpb.Empty, error) {
	s.calls.Add(1)
	return &testpb.Empty{}, nil
}

func (s *countingServer) StreamingOutputCall(*testpb.StreamingOutputCallRequest, testpb.TestService_StreamingOutputCallServer) error {
	s.calls.Add(1)
	return nil
}

// TestClientInterceptors: a client's interceptors keep it to its rules:
// a refused call is never sent and fails with the server's status; ip
// rules count per target, api_key rules per outgoing API key.
func TestClientInterceptors(t *testing.T) {
	srv := &countingServer{}
	s := grpc.NewServer()
	testpb.RegisterTestServiceServer(s, srv)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	done := make(chan struct{})
	go func() { defer close(done); s.Serve(lis) }() //nolint:errcheck // returns at Stop
	t.Cleanup(func() { s.Stop(); <-done })

	ic := newInterceptor(t, clocktest.New(t0), grpclimit.Config{Rules: []httplimit.Rule{
		ipRule("per-backend", "/grpc.testing.TestService/*", 3, time.Minute),
		{ID: "per-key", Key: httplimit.KeyAPIKey, Endpoint: mEmpty, Algorithm: hybrid.FixedWindow, Quota: 1, Window: time.Minute},
	}})
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithChainUnaryInterceptor(ic.UnaryClientInterceptor()), grpc.WithChainStreamInterceptor(ic.StreamClientInterceptor()))
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close() })
	c := testpb.NewTestServiceClient(conn)
	empty := func(kv ...string) codes.Code {
		_, err := c.EmptyCall(metadata.AppendToOutgoingContext(t.Context(), kv...), &testpb.Empty{})
		return status.Code(err)
	}

	assert.Equal(t, codes.OK, empty("x-api-key", "k1"))
	_, err = c.EmptyCall(metadata.AppendToOutgoingContext(t.Context(), "x-api-key", "k1"), &testpb.Empty{})
	st := status.Convert(err)
	require.Equal(t, codes.ResourceExhausted, st.Code())
	_, qf := details(t, st)
	assert.Equal(t, "per-key", qf.Violations[0].QuotaId)
	assert.Equal(t, codes.OK, empty())

	stream, err := c.StreamingOutputCall(t.Context(), &testpb.StreamingOutputCallRequest{})
	require.NoError(t, err)
	_, err = stream.Recv()
	require.Error(t, err) // io.EOF: the stream was admitted and ended
	_, err = c.StreamingOutputCall(t.Context(), &testpb.StreamingOutputCallRequest{})
	assert.Equal(t, codes.ResourceExhausted, status.Code(err), "the backend's 3 used: refused before it opens")
	assert.Equal(t, codes.ResourceExhausted, empty())
	assert.Equal(t, int64(3), srv.calls.Load(), "refused calls never reach the server")
}
