// Package grpcbench measures the overhead of rate-limiting gRPC server
// interceptors on an admitted unary call, in the same run: no interceptor
// (bare), go-grpc-middleware v2's ratelimit interceptor over an
// x/time/rate limiter (one limiter for every call: that interceptor has no
// key), and grpclimit with one Local rule keyed by client IP, with its
// ratelimit header metadata and without. Every limit is far above the
// traffic, so every call is admitted.
//
//	Interceptor/<peer>     the interceptor alone, called in process as a
//	                       grpc.Server calls it, with a call's context
//	GRPC/<peer>            a real client and server over loopback TCP,
//	                       EmptyCall, RunParallel on one connection
package grpcbench

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/ratelimit"
	"golang.org/x/time/rate"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"

	"github.com/hybridlimit/hybridlimit/grpclimit"
	"github.com/hybridlimit/hybridlimit/hybrid"
	"github.com/hybridlimit/hybridlimit/hybrid/httplimit"
)

// huge is a limit no benchmark reaches.
const huge = 1 << 40

const method = "/grpc.testing.TestService/EmptyCall"

// xrate is go-grpc-middleware's ratelimit.Limiter over an x/time/rate
// limiter, as its documentation builds one.
type xrate struct{ l *rate.Limiter }

var errLimited = errors.New("rate limited")

func (x xrate) Limit(context.Context) error {
	if !x.l.Allow() {
		return errLimited
	}
	return nil
}

// peers returns the interceptors compared, by name; nil is bare.
func peers(b *testing.B) []struct {
	name  string
	unary grpc.UnaryServerInterceptor
} {
	l, err := hybrid.New(hybrid.Config{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { l.Close() })
	rule := []httplimit.Rule{{ID: "per-ip", Key: httplimit.KeyIP, Endpoint: "/grpc.testing.TestService/*", Algorithm: hybrid.FixedWindow, Quota: huge, Window: time.Hour}}
	gl, err := grpclimit.New(l, grpclimit.Config{Rules: rule})
	if err != nil {
		b.Fatal(err)
	}
	quiet := make([]httplimit.Rule, 1)
	quiet[0] = rule[0]
	quiet[0].ID = "per-ip-quiet"
	glQuiet, err := grpclimit.New(l, grpclimit.Config{Rules: quiet, DisableHeaders: true})
	if err != nil {
		b.Fatal(err)
	}
	return []struct {
		name  string
		unary grpc.UnaryServerInterceptor
	}{
		{"bare", nil},
		{"ratelimit-xrate", ratelimit.UnaryServerInterceptor(xrate{rate.NewLimiter(rate.Limit(huge), huge)})},
		{"grpclimit", gl.UnaryServerInterceptor()},
		{"grpclimit-noheaders", glQuiet.UnaryServerInterceptor()},
	}
}

// transportStream is what a grpc.Server puts in a unary call's context
// for grpc.SetHeader; it keeps the header as the server's stream does
// (metadata.Join), so that its cost is counted.
type transportStream struct{ header metadata.MD }

func (s *transportStream) Method() string { return method }
func (s *transportStream) SetHeader(md metadata.MD) error {
	s.header = metadata.Join(s.header, md)
	return nil
}
func (s *transportStream) SendHeader(md metadata.MD) error { return s.SetHeader(md) }
func (s *transportStream) SetTrailer(metadata.MD) error    { return nil }

func handler(context.Context, any) (any, error) { return nil, nil }

// BenchmarkInterceptor is the interceptor alone, in process.
func BenchmarkInterceptor(b *testing.B) {
	for _, p := range peers(b) {
		b.Run(p.name, func(b *testing.B) {
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				st := &transportStream{}
				ctx := peer.NewContext(context.Background(), &peer.Peer{Addr: &net.TCPAddr{IP: net.IPv4(192, 0, 2, 1).To4(), Port: 50000}})
				ctx = grpc.NewContextWithServerTransportStream(ctx, st)
				info := &grpc.UnaryServerInfo{FullMethod: method}
				for pb.Next() {
					st.header = nil
					var err error
					if p.unary == nil {
						_, err = handler(ctx, nil)
					} else {
						_, err = p.unary(ctx, nil, info, handler)
					}
					if err != nil {
						b.Fatal(err)
					}
				}
			})
		})
	}
}

type testServer struct {
	testpb.UnimplementedTestServiceServer
}

func (testServer) EmptyCall(context.Context, *testpb.Empty) (*testpb.Empty, error) {
	return &testpb.Empty{}, nil
}

// BenchmarkGRPC is a real EmptyCall over loopback TCP, the server behind
// each interceptor.
func BenchmarkGRPC(b *testing.B) {
	for _, p := range peers(b) {
		b.Run(p.name, func(b *testing.B) {
			var opts []grpc.ServerOption
			if p.unary != nil {
				opts = append(opts, grpc.UnaryInterceptor(p.unary))
			}
			s := grpc.NewServer(opts...)
			testpb.RegisterTestServiceServer(s, testServer{})
			lis, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				b.Fatal(err)
			}
			done := make(chan struct{})
			go func() { defer close(done); s.Serve(lis) }() //nolint:errcheck // returns at Stop
			defer func() { s.Stop(); <-done }()
			conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				b.Fatal(err)
			}
			defer conn.Close()
			c := testpb.NewTestServiceClient(conn)
			if _, err := c.EmptyCall(context.Background(), &testpb.Empty{}); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if _, err := c.EmptyCall(context.Background(), &testpb.Empty{}); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}
