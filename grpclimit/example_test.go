package grpclimit_test

import (
	"context"
	"fmt"
	"net"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/peer"

	"github.com/hybridlimit/hybridlimit/grpclimit"
	"github.com/hybridlimit/hybridlimit/hybrid"
	"github.com/hybridlimit/hybridlimit/hybrid/httplimit"
)

// New's Interceptor installed on a grpc.Server: every method of
// pkg.Orders limited per client IP, and its Create method per API key too.
func ExampleNew() {
	l, err := hybrid.New(hybrid.Config{}) // Local mode: give it Redis to share the limits
	if err != nil {
		panic(err)
	}
	defer l.Close()
	limit, err := grpclimit.New(l, grpclimit.Config{Rules: []httplimit.Rule{
		{ID: "orders-ip", Key: httplimit.KeyIP, Endpoint: "/pkg.Orders/*", Algorithm: hybrid.GCRA, Quota: 100, Window: time.Second},
		{ID: "orders-create", Key: httplimit.KeyAPIKey, Endpoint: "/pkg.Orders/Create", Algorithm: hybrid.SlidingWindowCounter, Quota: 1000, Window: time.Hour},
	}})
	if err != nil {
		panic(err)
	}
	s := grpc.NewServer(
		grpc.ChainUnaryInterceptor(limit.UnaryServerInterceptor()),
		grpc.ChainStreamInterceptor(limit.StreamServerInterceptor()),
	)
	defer s.Stop()
	fmt.Println(len(limit.Rules()), "rules")
	// Output: 2 rules
}

// The rules of a rules file, the format of httplimit's, with method
// patterns as endpoints; httplimit.WatchFile(ctx, path, ic.SetRules,
// httplimit.WatchConfig{}) applies each new version of the file.
func ExampleInterceptor_SetRules() {
	rules, err := httplimit.ParseRules([]byte(`
version: 1
rules:
  - id: greeter-ip
    key: ip
    endpoint: /greeter.Greeter/*
    algorithm: gcra
    max_requests: 3
    window: 10s
`))
	if err != nil {
		panic(err)
	}
	l, err := hybrid.New(hybrid.Config{})
	if err != nil {
		panic(err)
	}
	defer l.Close()
	ic, err := grpclimit.New(l, grpclimit.Config{})
	if err != nil {
		panic(err)
	}
	if err := ic.SetRules(rules); err != nil {
		panic(err)
	}
	fmt.Println(ic.Rules()[0].ID, ic.Rules()[0].Endpoint)

	// A method pattern is checked as SetRules puts the rules in force.
	bad := rules[0]
	bad.Endpoint = "GET /greeter"
	fmt.Println(ic.SetRules([]httplimit.Rule{bad}))
	// Output:
	// greeter-ip /greeter.Greeter/*
	// httplimit: invalid rule "greeter-ip": endpoint: "GET /greeter": not a gRPC method pattern: "/pkg.Service/Method", "/pkg.Service/*" or "/*"
}

// What UnaryServerInterceptor does to calls, here called in process on a
// fake clock: two calls a minute per client, then ResourceExhausted.
func ExampleInterceptor_UnaryServerInterceptor() {
	clk := &manualClock{}
	clk.now.Store(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	l, err := hybrid.New(hybrid.Config{Clock: clk})
	if err != nil {
		panic(err)
	}
	defer l.Close()
	ic, err := grpclimit.New(l, grpclimit.Config{DisableHeaders: true, Rules: []httplimit.Rule{
		{ID: "two", Key: httplimit.KeyIP, Algorithm: hybrid.FixedWindow, Quota: 2, Window: time.Minute},
	}})
	if err != nil {
		panic(err)
	}
	intercept := ic.UnaryServerInterceptor()
	ctx := peer.NewContext(context.Background(), &peer.Peer{Addr: &net.TCPAddr{IP: net.IPv4(192, 0, 2, 1), Port: 4321}})
	info := &grpc.UnaryServerInfo{FullMethod: "/greeter.Greeter/SayHello"}
	hello := func(context.Context, any) (any, error) { return "hello", nil }
	for range 3 {
		resp, err := intercept(ctx, nil, info, hello)
		fmt.Println(resp, err)
	}
	clk.now.Add(int64(time.Minute))
	fmt.Println(intercept(ctx, nil, info, hello))
	// Output:
	// hello <nil>
	// hello <nil>
	// <nil> rpc error: code = ResourceExhausted desc = grpclimit: rate limit exceeded
	// hello <nil>
}

// manualClock is a local.Clock that tells the time it is set to.
type manualClock struct{ now atomic.Int64 }

func (c *manualClock) Now() time.Time { return time.Unix(0, c.now.Load()) }
