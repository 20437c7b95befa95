package grpclimit_test

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"

	"github.com/hybridlimit/hybridlimit/grpclimit"
	"github.com/hybridlimit/hybridlimit/hybrid"
	"github.com/hybridlimit/hybridlimit/hybrid/httplimit"
	"github.com/hybridlimit/hybridlimit/internal/clocktest"
)

// transportStream is what a grpc.Server puts in a unary call's context
// for grpc.SetHeader: here it keeps the header as the server's stream does
// (metadata.Join), so that its cost is counted.
type transportStream struct{ header metadata.MD }

func (s *transportStream) Method() string { return mEmpty }
func (s *transportStream) SetHeader(md metadata.MD) error {
	s.header = metadata.Join(s.header, md)
	return nil
}
func (s *transportStream) SendHeader(md metadata.MD) error { return s.SetHeader(md) }
func (s *transportStream) SetTrailer(metadata.MD) error    { return nil }

// inProcess is a unary interceptor called in process, as a grpc.Server
// calls it, with the context of a call from a TCP peer.
type inProcess struct {
	intercept grpc.UnaryServerInterceptor
	ctx       context.Context
	stream    *transportStream
	info      *grpc.UnaryServerInfo
}

func newInProcess(intercept grpc.UnaryServerInterceptor, kv ...string) *inProcess {
	st := &transportStream{}
	ctx := peer.NewContext(context.Background(), &peer.Peer{Addr: &net.TCPAddr{IP: net.IPv4(192, 0, 2, 1).To4(), Port: 50000}})
	ctx = metadata.NewIncomingContext(ctx, metadata.Pairs(kv...))
	ctx = grpc.NewContextWithServerTransportStream(ctx, st)
	return &inProcess{intercept: intercept, ctx: ctx, stream: st, info: &grpc.UnaryServerInfo{FullMethod: mEmpty}}
}

func okHandler(context.Context, any) (any, error) { return nil, nil }

func (p *inProcess) call() error {
	p.stream.header = nil
	_, err := p.intercept(p.ctx, nil, p.info, okHandler)
	return err
}

// wideRule admits every call of the benchmarks and allocation tests.
func wideRule(id string, key httplimit.KeyType) httplimit.Rule {
	return httplimit.Rule{ID: id, Key: key, Endpoint: "/grpc.testing.TestService/*", Algorithm: hybrid.FixedWindow, Quota: 1 << 40, Window: time.Hour}
}

// TestAllocs: what an admitted call allocates in process, with one ip rule,
// with an api_key rule beside it, and with the headers off: the header
// metadata (a map, and its values' one block), metadata.Join's copy in the
// stream, and ValueFromIncomingContext's copy of the API key.
func TestAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	for _, tc := range []struct {
		name string
		cfg  grpclimit.Config
		kv   []string
		most float64
	}{
		{"no rule", grpclimit.Config{}, nil, 0},
		{"ip, headers off", grpclimit.Config{DisableHeaders: true, Rules: []httplimit.Rule{wideRule("ip", httplimit.KeyIP)}}, nil, 0},
		{"ip", grpclimit.Config{Rules: []httplimit.Rule{wideRule("ip", httplimit.KeyIP)}}, nil, 7},
		{"ip and api_key", grpclimit.Config{Rules: []httplimit.Rule{wideRule("ip", httplimit.KeyIP), wideRule("key", httplimit.KeyAPIKey)}}, []string{"x-api-key", "k"}, 8},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ic, err := grpclimit.New(newLimiter(t, clocktest.New(t0)), tc.cfg)
			require.NoError(t, err)
			p := newInProcess(ic.UnaryServerInterceptor(), tc.kv...)
			require.NoError(t, p.call())
			n := testing.AllocsPerRun(1000, func() { p.call() })
			t.Logf("%s: %.0f allocs per call", tc.name, n)
			assert.LessOrEqual(t, n, tc.most)
		})
	}
}

// BenchmarkInterceptor is the in-process cost of an admitted unary call:
// the interceptor alone, as a grpc.Server calls it, beside a bare call of
// the handler. bench/grpcbench compares it with other limiters, and over
// real gRPC.
func BenchmarkInterceptor(b *testing.B) {
	bare := func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		return h(ctx, req)
	}
	for _, bc := range []struct {
		name string
		cfg  *grpclimit.Config
		kv   []string
	}{
		{"bare", nil, nil},
		{"ip", &grpclimit.Config{Rules: []httplimit.Rule{wideRule("ip", httplimit.KeyIP)}}, nil},
		{"ip-noheaders", &grpclimit.Config{DisableHeaders: true, Rules: []httplimit.Rule{wideRule("ip", httplimit.KeyIP)}}, nil},
		{"ip+apikey", &grpclimit.Config{Rules: []httplimit.Rule{wideRule("ip", httplimit.KeyIP), wideRule("key", httplimit.KeyAPIKey)}}, []string{"x-api-key", "k"}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			intercept := grpc.UnaryServerInterceptor(bare)
			if bc.cfg != nil {
				ic, err := grpclimit.New(newLimiter(b, clocktest.New(t0)), *bc.cfg)
				require.NoError(b, err)
				intercept = ic.UnaryServerInterceptor()
			}
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				p := newInProcess(intercept, bc.kv...)
				for pb.Next() {
					if err := p.call(); err != nil {
						b.Fatal(err)
					}
				}
			})
		})
	}
}
