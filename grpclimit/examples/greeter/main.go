// Command greeter is a gRPC greeter server limited per client by
// grpclimit, and a client that shows what a limited client sees.
//
//	go run ./examples/greeter -listen localhost:50051 &    # the server
//	go run ./examples/greeter -call 4 -addr localhost:50051  # 4 calls, as grpcurl -v prints them
//
// The server's rules are in rules.yaml (-rules), applied again whenever
// the file changes. With -redis, the limits are shared by every server on
// that Redis (hybrid mode); without, each server keeps its own (local
// mode).
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"slices"
	"strings"

	"github.com/redis/go-redis/v9"
	_ "google.golang.org/genproto/googleapis/rpc/errdetails" // the status details' types, for protojson
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/hybridlimit/hybridlimit/grpclimit"
	"github.com/hybridlimit/hybridlimit/hybrid"
	"github.com/hybridlimit/hybridlimit/hybrid/httplimit"
)

func main() {
	listen := flag.String("listen", "localhost:50051", "the server's address")
	rules := flag.String("rules", "examples/greeter/rules.yaml", "the rules file")
	redisAddr := flag.String("redis", "", "a Redis server to share the limits through (hybrid mode)")
	call := flag.Int("call", 0, "call SayHello this many times at -addr instead of serving")
	addr := flag.String("addr", "localhost:50051", "the server a client calls")
	apiKey := flag.String("api-key", "", "the client's x-api-key")
	name := flag.String("name", "alice", "the name to greet")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	var err error
	if *call > 0 {
		err = callHello(ctx, os.Stdout, *addr, *name, *apiKey, *call)
	} else {
		var lis net.Listener
		if lis, err = net.Listen("tcp", *listen); err == nil {
			err = serve(ctx, lis, *rules, *redisAddr)
		}
	}
	if err != nil {
		log.Fatal(err)
	}
}

// tiers are the API keys' tiers: an application would look them up.
var tiers = map[string]string{"gold-key": "gold"}

// serve serves the greeter on lis, limited by the rules file, until ctx
// ends.
func serve(ctx context.Context, lis net.Listener, rulesPath, redisAddr string) error {
	cfg := hybrid.Config{Mode: hybrid.Local}
	if redisAddr != "" {
		rc := redis.NewClient(&redis.Options{Addr: redisAddr, ContextTimeoutEnabled: true})
		defer rc.Close()
		cfg = hybrid.Config{Redis: rc, Mode: hybrid.Hybrid, Keyspace: hybrid.Keyspace{Prefix: "greeter"}}
	}
	l, err := hybrid.New(cfg)
	if err != nil {
		return err
	}
	defer l.Close()
	limit, err := grpclimit.New(l, grpclimit.Config{Tiers: tiers})
	if err != nil {
		return err
	}
	w, err := httplimit.WatchFile(ctx, rulesPath, limit.SetRules, httplimit.WatchConfig{})
	if err != nil {
		return err
	}
	defer w.Close()

	s := grpc.NewServer(
		grpc.ChainUnaryInterceptor(limit.UnaryServerInterceptor()),
		grpc.ChainStreamInterceptor(limit.StreamServerInterceptor()),
	)
	s.RegisterService(&greeterService, greeter{})
	go func() { <-ctx.Done(); s.GracefulStop() }()
	slog.Info("greeter: serving", "addr", lis.Addr().String(), "rules", rulesPath)
	return s.Serve(lis)
}

// greeter answers SayHello.
type greeter struct{}

func (greeter) SayHello(_ context.Context, in *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
	return wrapperspb.String("Hello, " + in.GetValue()), nil
}

// greeterServer is the service's interface, as protoc-gen-go-grpc would
// write it: the service is described by hand, its messages the
// well-known google.protobuf.StringValue, so that the example needs no
// generated code.
type greeterServer interface {
	SayHello(context.Context, *wrapperspb.StringValue) (*wrapperspb.StringValue, error)
}

const sayHello = "/greeter.Greeter/SayHello"

var greeterService = grpc.ServiceDesc{
	ServiceName: "greeter.Greeter",
	HandlerType: (*greeterServer)(nil),
	Methods: []grpc.MethodDesc{{
		MethodName: "SayHello",
		Handler: func(srv any, ctx context.Context, dec func(any) error, intercept grpc.UnaryServerInterceptor) (any, error) {
			in := new(wrapperspb.StringValue)
			if err := dec(in); err != nil {
				return nil, err
			}
			h := func(ctx context.Context, req any) (any, error) {
				return srv.(greeterServer).SayHello(ctx, req.(*wrapperspb.StringValue))
			}
			if intercept == nil {
				return h(ctx, in)
			}
			return intercept(ctx, in, &grpc.UnaryServerInfo{Server: srv, FullMethod: sayHello}, h)
		},
	}},
}

// callHello calls SayHello n times at addr and prints each call as
// grpcurl -v does: the response headers, then the response or the error
// with its status details.
func callHello(ctx context.Context, out io.Writer, addr, name, apiKey string, n int) error {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	if apiKey != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, "x-api-key", apiKey)
	}
	for i := range n {
		fmt.Fprintf(out, "$ grpcurl -plaintext -v -d '{\"value\": %q}' %s greeter.Greeter/SayHello   # call %d\n", name, addr, i+1)
		var hdr metadata.MD
		resp := new(wrapperspb.StringValue)
		err := conn.Invoke(ctx, sayHello, wrapperspb.String(name), resp, grpc.Header(&hdr))
		printHeaders(out, hdr)
		if err == nil {
			fmt.Fprintf(out, "Response contents:\n%q\n\n", resp.GetValue())
			continue
		}
		st, ok := status.FromError(err)
		if !ok {
			return err
		}
		if err := printStatus(out, st); err != nil {
			return err
		}
	}
	return nil
}

// printHeaders prints the rate-limit header metadata, sorted.
func printHeaders(out io.Writer, hdr metadata.MD) {
	fmt.Fprintln(out, "Response headers received:")
	for _, k := range slices.Sorted(func(yield func(string) bool) {
		for k := range hdr {
			if strings.HasPrefix(k, "ratelimit") && !yield(k) {
				return
			}
		}
	}) {
		for _, v := range hdr[k] {
			fmt.Fprintf(out, "%s: %s\n", k, v)
		}
	}
	fmt.Fprintln(out)
}

// printStatus prints an error's status as grpcurl does, with its details
// in their JSON form.
func printStatus(out io.Writer, st *status.Status) error {
	fmt.Fprintf(out, "ERROR:\n  Code: %s\n  Message: %s\n  Details:\n", st.Code(), st.Message())
	for i, d := range st.Proto().GetDetails() {
		b, err := protojson.Marshal(d)
		if err != nil {
			return err
		}
		// protojson's spacing varies from run to run on purpose: indent
		// the JSON again, as grpcurl prints it.
		var buf bytes.Buffer
		if err := json.Indent(&buf, b, "    \t", "  "); err != nil {
			return err
		}
		fmt.Fprintf(out, "  %d)\t%s\n", i+1, buf.String())
	}
	fmt.Fprintln(out)
	return nil
}
