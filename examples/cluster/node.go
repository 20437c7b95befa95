package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"math/bits"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/redis/go-redis/v9"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/hybridlimit/hybridlimit/hybrid"
	"github.com/hybridlimit/hybridlimit/hybrid/httplimit"
	"github.com/hybridlimit/hybridlimit/local"
)

// clientHeader carries the client's key, as an API key: the load generator
// sets it, the middleware keys the rule by it (Config.APIKeyHeader).
const clientHeader = "X-API-Key"

// nodeOptions configure one node process.
type nodeOptions struct {
	id    int    // 1 to nodes
	nodes int    // how many nodes the cluster has
	redis string // host:port
	limit int64  // requests per window (ruleWindow) per client
	algo  string // local.Algorithm's name of a window algorithm
	// the gossip: this node's loopback port, the others' addresses, the
	// cluster's encryption key
	gossipPort int
	seeds      []string
	gossipKey  []byte
	records    string // the file the node records its decisions in (recordLog)
}

// gossipKeyEnv passes the gossip's encryption key (hex) to the nodes.
const gossipKeyEnv = "HYBRIDLIMIT_DEMO_GOSSIP_KEY"

// gossipConfig configures a node's gossip on the loopback interface: every
// packet encrypted and authenticated with the cluster's key, under the
// demo's cluster label.
func gossipConfig(o nodeOptions, logger *slog.Logger) *hybrid.GossipConfig {
	ml := memberlist.DefaultLocalConfig()
	ml.Name = "n" + strconv.Itoa(o.id)
	ml.BindAddr, ml.BindPort = "127.0.0.1", o.gossipPort
	ml.AdvertiseAddr, ml.AdvertisePort = "127.0.0.1", o.gossipPort
	return &hybrid.GossipConfig{
		Memberlist: ml, Seeds: o.seeds, Keys: [][]byte{o.gossipKey}, Label: "hybridlimit-demo",
		Logger: logger,
	}
}

// latencyName names what the nodes time: the middleware, from just before
// it to the handler it protects or to its 429.
const latencyName = "middleware"

// fallbackName names, in the table, the mode a node decides in while its
// Limiter cannot reach Redis: the rule's failure policy.
const fallbackName = "gossip"

// demoRule is the middleware's rule on every node: GET /api limited per
// client (API key), in hybrid mode, each node deciding against its lease of
// the client's budget.
func demoRule(lim local.Limit) httplimit.Rule {
	return httplimit.Rule{
		ID: "per-client", Key: httplimit.KeyAPIKey, Endpoint: "GET /api",
		Algorithm: lim.Algorithm, Quota: lim.Quota, Window: lim.Window,
		Mode: hybrid.Hybrid, // the policy: the Limiter's default, Gossip with Config.Gossip
	}
}

// runNode serves HTTP until SIGTERM or SIGINT, or until its standard input
// closes (the driver is gone): /api behind the limiter, /stats and /flush for
// the driver.
// It records every request it decides in o.records, on Redis's clock. It
// prints "listening ADDR" on standard output once it accepts connections.
func runNode(o nodeOptions) error {
	client := redis.NewClient(&redis.Options{
		Addr: o.redis, ContextTimeoutEnabled: true, MaxRetries: -1,
		DialTimeout: 200 * time.Millisecond, ReadTimeout: 500 * time.Millisecond, WriteTimeout: 500 * time.Millisecond,
	})
	defer client.Close()
	// Redis's clock places the windows: the node learns its offset from it
	// once, at start (the nodes share Redis's host, whose clock does not
	// drift from theirs), to record its decisions on it.
	octx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	offset, err := measureOffset(octx, client)
	cancel()
	if err != nil {
		return err
	}
	rlog, err := newRecordLog(o.records, offset)
	if err != nil {
		return err
	}
	defer rlog.close()
	// The node reads the Limiter's own gauge, hybridlimit.redis.available,
	// to tell the driver which mode it decides in.
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer mp.Shutdown(context.Background())
	logger := slog.New(slog.NewTextHandler(os.Stderr, nil)).With("node", o.id)
	lim, err := hybrid.New(hybrid.Config{
		Redis:         client,
		Keyspace:      hybrid.Keyspace{Prefix: "demo"},
		Sync:          hybrid.SyncConfig{NodeID: "n" + strconv.Itoa(o.id), Nodes: o.nodes},
		Gossip:        gossipConfig(o, logger),
		MeterProvider: mp,
		Logger:        logger,
	})
	if err != nil {
		return err
	}
	defer lim.Close()
	dl, err := demoLimit(o.algo, o.limit)
	if err != nil {
		return err
	}
	dr := demoRule(dl)
	mw, err := httplimit.New(lim, httplimit.Config{Rules: []httplimit.Rule{dr}, APIKeyHeader: clientHeader, MeterProvider: mp, Logger: logger})
	if err != nil {
		return err
	}
	// The middleware registered the rule: registering it again returns it,
	// and its Mode is the mode it runs in (a limit with no lease runs
	// central).
	rule, err := lim.Register(hybrid.Rule{Name: dr.ID, Mode: dr.Mode, Policy: dr.Policy, Limit: dl})
	if err != nil {
		return err
	}
	if rule.Mode != hybrid.Hybrid {
		return fmt.Errorf("rule %s runs %v, not hybrid", rule.Name, rule.Mode)
	}

	st := &nodeStats{reader: reader, log: rlog}
	mux := http.NewServeMux()
	mux.Handle("GET /api", st.timed(mw.Handler(http.HandlerFunc(st.admit))))
	mux.HandleFunc("GET /stats", st.serve)
	mux.HandleFunc("GET /flush", st.flush)

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	fmt.Printf("listening %s\n", ln.Addr())

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	orphaned := make(chan struct{})
	go func() {
		// The driver holds our standard input: EOF means it is gone.
		bufio.NewReader(os.Stdin).WriteTo(discard{})
		close(orphaned)
	}()
	select {
	case <-ctx.Done():
	case <-orphaned:
	case err := <-served:
		return err
	}
	sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	srv.Shutdown(sctx)
	return lim.Shutdown(sctx)
}

// discard swallows what the driver might write to a node's standard input.
type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }

// timing is one request's start, and whether the middleware let it through.
type timing struct {
	start   time.Time
	reached bool
}

type timingKey struct{}

// timed measures the middleware's decision: from just before it to the
// handler it protects (admitted), or to its 429 (refused); and records the
// request, at the time it began, with its client and outcome.
func (s *nodeStats) timed(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		t := &timing{}
		key := req.Header.Get(clientHeader)
		req = req.WithContext(context.WithValue(req.Context(), timingKey{}, t))
		sw := &statusWriter{ResponseWriter: w, code: http.StatusOK}
		t.start = time.Now()
		next.ServeHTTP(sw, req)
		if !t.reached {
			s.latency.record(time.Since(t.start))
		}
		outcome := byte(outcomeFailed)
		switch sw.code {
		case http.StatusOK:
			outcome = outcomeAdmitted
		case http.StatusTooManyRequests:
			outcome = outcomeRefused
		}
		s.log.add(t.start, key, outcome)
	})
}

// admit is the protected handler: the request was admitted.
func (s *nodeStats) admit(w http.ResponseWriter, req *http.Request) {
	if t, ok := req.Context().Value(timingKey{}).(*timing); ok {
		s.latency.record(time.Since(t.start))
		t.reached = true
	}
	w.Write([]byte("ok\n"))
}

// statusWriter remembers the status code of a response.
type statusWriter struct {
	http.ResponseWriter
	code int
}

func (w *statusWriter) WriteHeader(code int) {
	w.code = code
	w.ResponseWriter.WriteHeader(code)
}

// nodeStats are a node's counters since it started, served as JSON on
// /stats (the driver takes the differences), and its record of decisions.
type nodeStats struct {
	latency histogram
	reader  *sdkmetric.ManualReader
	log     *recordLog
}

// statsReply is the JSON of /stats.
type statsReply struct {
	Degraded       int64 // decisions made by the failure policy
	Failed         int64 // requests the Limiter could not decide, let through
	RedisAvailable bool  // the Limiter's hybridlimit.redis.available gauge
	Latency        []uint64
}

// flush answers /flush once the records of every request decided before it
// are in the node's file: the driver reads them after the reply.
func (s *nodeStats) flush(w http.ResponseWriter, req *http.Request) {
	if err := s.log.flush(); err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *nodeStats) serve(w http.ResponseWriter, req *http.Request) {
	m := s.metrics(req.Context())
	rep := statsReply{
		Degraded: m.degraded, Failed: m.errors,
		RedisAvailable: m.available,
		Latency:        s.latency.snapshot(),
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(rep)
}

// metricValues are the figures the node reads from the Limiter's and the
// middleware's metrics.
type metricValues struct {
	available bool  // hybridlimit.redis.available
	degraded  int64 // hybridlimit.policy.decisions: made by a failure policy
	errors    int64 // hybridlimit.http.errors: requests the Limiter could not decide
}

func (s *nodeStats) metrics(ctx context.Context) metricValues {
	var v metricValues
	var rm metricdata.ResourceMetrics
	if err := s.reader.Collect(ctx, &rm); err != nil {
		return v
	}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			switch d := m.Data.(type) {
			case metricdata.Gauge[int64]:
				if m.Name == "hybridlimit.redis.available" {
					for _, p := range d.DataPoints {
						v.available = p.Value == 1
					}
				}
			case metricdata.Sum[int64]:
				var n int64
				for _, p := range d.DataPoints {
					n += p.Value
				}
				switch m.Name {
				case "hybridlimit.policy.decisions":
					v.degraded = n
				case "hybridlimit.http.errors":
					v.errors = n
				}
			}
		}
	}
	return v
}

// histogram counts durations in log-linear buckets: exact below 16 ns, then
// eight buckets per power of two (12.5% wide). Safe for concurrent use.
type histogram struct {
	counts [histBuckets]atomic.Uint64
}

const histBuckets = 16 + 60*8

func histBucket(ns int64) int {
	if ns < 16 {
		return int(max(ns, 0))
	}
	e := bits.Len64(uint64(ns)) - 1 // 4 or more
	return min(16+(e-4)*8+int(uint64(ns)>>(e-3)&7), histBuckets-1)
}

// histUpper returns the upper bound of bucket i, in nanoseconds.
func histUpper(i int) int64 {
	if i < 16 {
		return int64(i + 1)
	}
	e, sub := (i-16)/8+4, int64((i-16)%8)
	return (8 + sub + 1) << (e - 3)
}

func (h *histogram) record(d time.Duration) { h.counts[histBucket(int64(d))].Add(1) }

func (h *histogram) snapshot() []uint64 {
	out := make([]uint64, histBuckets)
	for i := range out {
		out[i] = h.counts[i].Load()
	}
	return out
}

// quantile returns the q-quantile of the counts c (a histogram's buckets),
// as the upper bound of its bucket; 0 when c is empty.
func quantile(c []uint64, q float64) time.Duration {
	var total uint64
	for _, n := range c {
		total += n
	}
	if total == 0 {
		return 0
	}
	rank := uint64(q*float64(total) + 0.5)
	var seen uint64
	for i, n := range c {
		seen += n
		if seen >= max(rank, 1) {
			return time.Duration(histUpper(i))
		}
	}
	return time.Duration(histUpper(len(c) - 1))
}
