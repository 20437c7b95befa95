// Command hybridlimit-ratelimit is an Envoy rate limit service
// (envoy.service.ratelimit.v3.RateLimitService) deciding with hybridlimit's
// hybrid.Limiter, configured by envoyproxy/ratelimit's YAML files. It
// serves gRPC health checks (grpc.health.v1) beside it, reloads its
// configuration when the files change, and stops gracefully on SIGTERM.
//
// Every flag can be set by an environment variable: RLS_ and the flag's
// name in capitals, '-' as '_' (-redis-addr is RLS_REDIS_ADDR); a flag
// given on the command line wins. Secrets are read from the environment
// only: RLS_REDIS_PASSWORD, RLS_GLOBAL_REDIS_PASSWORD, and RLS_GOSSIP_KEY
// (base64 of 16, 24 or 32 bytes). See envoy/README.md.
//
//	hybridlimit-ratelimit -config /etc/ratelimit/config -redis-addr redis:6379 \
//	    -gossip-bind 0.0.0.0:7946 -gossip-join ratelimit-headless:7946
package main

import (
	"context"
	"encoding/base64"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/hashicorp/memberlist"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/hybridlimit/hybridlimit/envoy/rls"
	"github.com/hybridlimit/hybridlimit/hybrid"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Getenv, os.Stderr, nil); err != nil {
		fmt.Fprintln(os.Stderr, "hybridlimit-ratelimit:", err)
		os.Exit(1)
	}
}

// options are the command's settings.
type options struct {
	grpcAddr        string
	config          string
	redisAddr       string
	sentinelAddrs   string
	sentinelMaster  string
	clusterAddrs    string
	redisPassword   string
	global          redisOptions // the global store of the limits of global reach
	region          string
	prefix          string
	mode            string
	policy          string
	gossipBind      string
	gossipAdvertise string
	gossipJoin      string
	gossipName      string
	gossipKey       string
	gossipInsecure  bool
	logLevel        string
	logFormat       string
	shadowMode      bool
	drain           time.Duration
}

// parse reads args, then the environment for each flag not given.
func parse(args []string, getenv func(string) string, stderr io.Writer) (options, error) {
	var o options
	fs := flag.NewFlagSet("hybridlimit-ratelimit", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.grpcAddr, "grpc-addr", ":8081", "gRPC listen address (the rate limit and health services)")
	fs.StringVar(&o.config, "config", "/etc/ratelimit/config", "configuration: a YAML file, or a directory of *.yaml files (one domain each); reloaded on change")
	fs.StringVar(&o.redisAddr, "redis-addr", "", "Redis server host:port (empty, without Sentinel or Cluster: no Redis, every limit per replica)")
	fs.StringVar(&o.sentinelAddrs, "redis-sentinel-addrs", "", "comma-separated Sentinel host:port addresses (with -redis-sentinel-master)")
	fs.StringVar(&o.sentinelMaster, "redis-sentinel-master", "", "the master's name at the Sentinels")
	fs.StringVar(&o.clusterAddrs, "redis-cluster-addrs", "", "comma-separated Redis Cluster node addresses")
	fs.StringVar(&o.global.addr, "global-redis-addr", "", "the global store's Redis server host:port, for the limits of global reach (with -region)")
	fs.StringVar(&o.global.sentinelAddrs, "global-redis-sentinel-addrs", "", "the global store's comma-separated Sentinel host:port addresses (with -global-redis-sentinel-master)")
	fs.StringVar(&o.global.sentinelMaster, "global-redis-sentinel-master", "", "the global store's master name at its Sentinels")
	fs.StringVar(&o.global.clusterAddrs, "global-redis-cluster-addrs", "", "the global store's comma-separated Redis Cluster node addresses")
	fs.StringVar(&o.region, "region", "", "this replica's region, the same on every replica of the region (with a global store)")
	fs.StringVar(&o.prefix, "redis-prefix", "rls", "prefix of the Redis keys, the same on every replica")
	fs.StringVar(&o.mode, "mode", "", "limits' default mode: hybrid, central or local (default hybrid with Redis, local without)")
	fs.StringVar(&o.policy, "policy", "", "limits' default failure policy: gossip, fail_local, fail_open or fail_closed (default gossip with gossip, fail_local without)")
	fs.StringVar(&o.gossipBind, "gossip-bind", "", "gossip bind host:port (empty: no gossip)")
	fs.StringVar(&o.gossipAdvertise, "gossip-advertise", "", "gossip address host:port the other replicas reach (default: the bind address)")
	fs.StringVar(&o.gossipJoin, "gossip-join", "", "comma-separated gossip host:port of replicas to join")
	fs.StringVar(&o.gossipName, "gossip-name", "", "gossip node name, unique per replica (default: the host name)")
	fs.BoolVar(&o.gossipInsecure, "gossip-insecure", false, "gossip without a key (RLS_GOSSIP_KEY): for a trusted loopback only")
	fs.StringVar(&o.logLevel, "log-level", "info", "log level: debug, info, warn or error")
	fs.StringVar(&o.logFormat, "log-format", "text", "log format: text or json")
	fs.BoolVar(&o.shadowMode, "shadow-mode", false, "answer OK overall whatever the limits say (global shadow mode)")
	fs.DurationVar(&o.drain, "drain", 5*time.Second, "on SIGTERM: how long in-flight requests may finish, health NOT_SERVING meanwhile")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	var err error
	fs.VisitAll(func(f *flag.Flag) {
		env := "RLS_" + strings.ToUpper(strings.ReplaceAll(f.Name, "-", "_"))
		if v := getenv(env); v != "" && !given[f.Name] && err == nil {
			if e := f.Value.Set(v); e != nil {
				err = fmt.Errorf("%s=%q: %w", env, v, e)
			}
		}
	})
	o.redisPassword, o.gossipKey = getenv("RLS_REDIS_PASSWORD"), getenv("RLS_GOSSIP_KEY")
	o.global.password = getenv("RLS_GLOBAL_REDIS_PASSWORD")
	return o, err
}

func (o options) logger(w io.Writer) (*slog.Logger, error) {
	var level slog.Level
	if err := level.UnmarshalText([]byte(o.logLevel)); err != nil {
		return nil, fmt.Errorf("-log-level: %w", err)
	}
	hopts := &slog.HandlerOptions{Level: level}
	switch o.logFormat {
	case "text":
		return slog.New(slog.NewTextHandler(w, hopts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, hopts)), nil
	}
	return nil, fmt.Errorf("-log-format: %q is neither text nor json", o.logFormat)
}

func split(s string) []string {
	var out []string
	for p := range strings.SplitSeq(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// redisOptions name one Redis: a server, a Sentinel group, or a Cluster.
type redisOptions struct {
	addr, sentinelAddrs, sentinelMaster, clusterAddrs, password string
}

// redisClient returns the client the options name, nil for none.
func (o options) redisClient() (redis.UniversalClient, error) {
	return redisOptions{o.redisAddr, o.sentinelAddrs, o.sentinelMaster, o.clusterAddrs, o.redisPassword}.client("-redis")
}

// client returns the client r names, nil for none; flag starts the names
// of its flags, for the errors.
func (r redisOptions) client(flag string) (redis.UniversalClient, error) {
	switch {
	case r.clusterAddrs != "":
		return redis.NewClusterClient(&redis.ClusterOptions{Addrs: split(r.clusterAddrs), Password: r.password, ContextTimeoutEnabled: true}), nil
	case r.sentinelAddrs != "":
		if r.sentinelMaster == "" {
			return nil, fmt.Errorf("%s-sentinel-addrs needs %s-sentinel-master", flag, flag)
		}
		return redis.NewFailoverClient(&redis.FailoverOptions{MasterName: r.sentinelMaster, SentinelAddrs: split(r.sentinelAddrs),
			Password: r.password, ContextTimeoutEnabled: true}), nil
	case r.addr != "":
		return redis.NewClient(&redis.Options{Addr: r.addr, Password: r.password, ContextTimeoutEnabled: true}), nil
	}
	return nil, nil
}

var modes = map[string]hybrid.Mode{"": 0, "hybrid": hybrid.Hybrid, "central": hybrid.Central, "local": hybrid.Local}

var policies = map[string]hybrid.Policy{"": 0, "gossip": hybrid.Gossip, "fail_local": hybrid.FailLocal,
	"fail_open": hybrid.FailOpen, "fail_closed": hybrid.FailClosed}

// gossip returns the gossip configuration the options name, nil for none.
func (o options) gossip(logger *slog.Logger) (*hybrid.GossipConfig, error) {
	if o.gossipBind == "" {
		return nil, nil
	}
	ml := memberlist.DefaultLANConfig()
	host, port, err := hostPort(o.gossipBind)
	if err != nil {
		return nil, fmt.Errorf("-gossip-bind: %w", err)
	}
	ml.BindAddr, ml.BindPort = host, port
	ml.AdvertisePort = port
	if o.gossipAdvertise != "" {
		if ml.AdvertiseAddr, ml.AdvertisePort, err = hostPort(o.gossipAdvertise); err != nil {
			return nil, fmt.Errorf("-gossip-advertise: %w", err)
		}
	}
	if o.gossipName != "" {
		ml.Name = o.gossipName
	}
	g := &hybrid.GossipConfig{Memberlist: ml, Seeds: split(o.gossipJoin), Insecure: o.gossipInsecure, Logger: logger}
	if o.gossipKey != "" {
		key, err := base64.StdEncoding.DecodeString(o.gossipKey)
		if err != nil {
			return nil, fmt.Errorf("RLS_GOSSIP_KEY: %w", err)
		}
		g.Keys = [][]byte{key}
	}
	return g, nil
}

func hostPort(s string) (string, int, error) {
	host, p, err := net.SplitHostPort(s)
	if err != nil {
		return "", 0, err
	}
	port, err := strconv.Atoi(p)
	return host, port, err
}

// run serves until ctx ends; ready, if not nil, gets the gRPC address once
// the configuration is loaded and the server listens.
func run(ctx context.Context, args []string, getenv func(string) string, stderr io.Writer, ready func(addr string)) error {
	o, err := parse(args, getenv, stderr)
	if err != nil {
		return err
	}
	logger, err := o.logger(stderr)
	if err != nil {
		return err
	}
	var closers []io.Closer
	defer func() {
		for _, c := range slices.Backward(closers) {
			c.Close()
		}
	}()
	svc, err := o.service(ctx, logger, &closers)
	if err != nil {
		return err
	}
	return serve(ctx, o, svc, logger, ready)
}

// service builds the Limiter, the Service and the configuration's
// watcher the options describe, adding each to closers.
func (o options) service(ctx context.Context, logger *slog.Logger, closers *[]io.Closer) (*rls.Service, error) {
	mode, ok := modes[o.mode]
	if !ok {
		return nil, fmt.Errorf("-mode: unknown mode %q", o.mode)
	}
	policy, ok := policies[o.policy]
	if !ok {
		return nil, fmt.Errorf("-policy: unknown policy %q", o.policy)
	}
	client, err := o.redisClient()
	if err != nil {
		return nil, err
	}
	g, err := o.gossip(logger)
	if err != nil {
		return nil, err
	}
	hc := hybrid.Config{Keyspace: hybrid.Keyspace{Prefix: o.prefix}, Mode: mode, Policy: policy, Gossip: g, Logger: logger, Region: o.region}
	if client != nil {
		*closers = append(*closers, client)
		hc.Redis = client // a nil interface, not a typed nil, without Redis
	}
	global, err := o.global.client("-global-redis")
	if err != nil {
		return nil, err
	}
	if global != nil {
		*closers = append(*closers, global)
		hc.Global = global
	}
	l, err := hybrid.New(hc)
	if err != nil {
		return nil, err
	}
	*closers = append(*closers, l)
	svc, err := rls.New(rls.Config{Limiter: l, Logger: logger, ShadowMode: o.shadowMode})
	if err != nil {
		return nil, err
	}
	*closers = append(*closers, svc)
	w, err := rls.Watch(ctx, o.config, svc.Apply, rls.WatchConfig{Logger: logger})
	if err != nil {
		return nil, fmt.Errorf("-config %s: %w", o.config, err)
	}
	*closers = append(*closers, w)
	logger.Info("hybridlimit-ratelimit: limiter", "redis", client != nil, "gossip", g != nil, "region", o.region)
	return svc, nil
}

// serve serves svc and the health service on o.grpcAddr until ctx ends,
// then drains.
func serve(ctx context.Context, o options, svc *rls.Service, logger *slog.Logger, ready func(string)) error {
	ln, err := net.Listen("tcp", o.grpcAddr)
	if err != nil {
		return err
	}
	srv := grpc.NewServer()
	hs := health.NewServer()
	rlsv3.RegisterRateLimitServiceServer(srv, svc)
	healthpb.RegisterHealthServer(srv, hs)
	const serviceName = "envoy.service.ratelimit.v3.RateLimitService"
	hs.SetServingStatus(serviceName, healthpb.HealthCheckResponse_SERVING)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	logger.Info("hybridlimit-ratelimit: serving", "grpc", ln.Addr().String(), "config", o.config)
	if ready != nil {
		ready(ln.Addr().String())
	}
	select {
	case err := <-served:
		return err
	case <-ctx.Done():
	}
	// Tell the health checks first, then let in-flight requests finish.
	hs.Shutdown()
	logger.Info("hybridlimit-ratelimit: stopping", "drain", o.drain)
	stopped := make(chan struct{})
	go func() { srv.GracefulStop(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(o.drain):
		srv.Stop()
		<-stopped
	}
	<-served
	return nil
}
