package rls_test

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/hybridlimit/hybridlimit/envoy/rls"
	"github.com/hybridlimit/hybridlimit/hybrid"
)

// BenchmarkShouldRateLimit decides in process, without gRPC, on a Limiter
// without Redis: the service's own cost per request (matching, the
// decision of two descriptors as one, the response and its headers).
func BenchmarkShouldRateLimit(b *testing.B) {
	l, err := hybrid.New(hybrid.Config{Logger: quiet})
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	svc, err := rls.New(rls.Config{Limiter: l, Logger: quiet})
	if err != nil {
		b.Fatal(err)
	}
	defer svc.Close()
	files, err := rls.Load("testdata/example2.yaml")
	if err != nil {
		b.Fatal(err)
	}
	if err := svc.Apply(files); err != nil {
		b.Fatal(err)
	}
	var next atomic.Int64
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		n := strconv.FormatInt(next.Add(1), 10)
		req := &rlsv3.RateLimitRequest{Domain: "messaging", Descriptors: []*commonv3RateLimitDescriptor{
			desc("message_type", "marketing", "to_number", n), desc("to_number", n)}}
		for pb.Next() {
			if _, err := svc.ShouldRateLimit(context.Background(), req); err != nil {
				b.Fatal(err)
			}
		}
	})
}
