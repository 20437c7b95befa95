package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
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

	"github.com/redis/go-redis/v9"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/hybridlimit/hybridlimit/hybrid"
	"github.com/hybridlimit/hybridlimit/local"
)

// clientHeader carries the client's key: the demo's load generator sets it.
const clientHeader = "X-Client"

// nodeOptions configure one node process.
type nodeOptions struct {
	id    int    // 1 to nodes
	nodes int    // how many nodes the cluster has
	redis string // host:port
	limit int64  // requests per second per client
	algo  string // local.ParseAlgorithm's name of a window algorithm
}

// latencyName names what the nodes time: Limiter.Allow.
const latencyName = "decision"

// fallbackName names, in the table, the mode a node decides in while its
// Limiter cannot reach Redis: the rule's failure policy.
const fallbackName = "fallback (FailLocal)"

// demoRule is the rule every node registers: one limit per client key, in
// hybrid mode, each node deciding against its lease of the client's budget.
func demoRule(algo string, limit int64) (hybrid.Rule, error) {
	a, err := local.ParseAlgorithm(algo)
	if err != nil {
		return hybrid.Rule{}, err
	}
	lim, err := hybrid.NewLimit(hybrid.Params{Algorithm: a, Limit: limit, Window: time.Second})
	if err != nil {
		return hybrid.Rule{}, err
	}
	return hybrid.Rule{Name: "per-client", Limit: lim, Mode: hybrid.Hybrid, Policy: hybrid.FailLocal}, nil
}

// runNode serves HTTP until SIGTERM or SIGINT, or until its standard input
// closes (the driver is gone): /api behind the limiter, /stats for the driver.
// It prints "listening ADDR" on standard output once it accepts connections.
func runNode(o nodeOptions) error {
	client := redis.NewClient(&redis.Options{
		Addr: o.redis, ContextTimeoutEnabled: true, MaxRetries: -1,
		DialTimeout: 200 * time.Millisecond, ReadTimeout: 500 * time.Millisecond, WriteTimeout: 500 * time.Millisecond,
	})
	defer client.Close()
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
		MeterProvider: mp,
		Logger:        logger,
	})
	if err != nil {
		return err
	}
	defer lim.Close()
	dr, err := demoRule(o.algo, o.limit)
	if err != nil {
		return err
	}
	rule, err := lim.Register(dr)
	if err != nil {
		return err
	}
	if m := lim.Mode(rule); m != hybrid.Hybrid {
		return fmt.Errorf("rule %s runs %v, not hybrid", rule.Name, m)
	}

	st := &nodeStats{reader: reader}
	mux := http.NewServeMux()
	mux.Handle("GET /api", limitByClient(lim, rule, st)(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Write([]byte("ok\n"))
	})))
	mux.HandleFunc("GET /stats", st.serve)

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

// limitByClient limits each request by its client key (the X-Client header):
// 429 when refused. A decision made by the failure policy while Redis is
// unavailable is a decision like another (the Limiter counts it in
// hybridlimit.fallback.decisions); any other error of the Limiter (misuse)
// is counted and lets the request through, as package httplimit does.
func limitByClient(l *hybrid.Limiter, r *hybrid.Rule, st *nodeStats) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
			key := req.Header.Get(clientHeader)
			if key == "" {
				http.Error(w, "missing "+clientHeader, http.StatusBadRequest)
				return
			}
			start := time.Now()
			d, err := l.Allow(req.Context(), r, key)
			st.latency.record(time.Since(start))
			if err != nil && !errors.Is(err, hybrid.ErrUnavailable) {
				st.failed.Add(1)
				next.ServeHTTP(w, req)
				return
			}
			if !d.Allowed() {
				st.refused.Add(1)
				secs := (d.RetryAfter() + time.Second - 1) / time.Second
				w.Header().Set("Retry-After", strconv.FormatInt(max(int64(secs), 1), 10))
				http.Error(w, "rate limited", http.StatusTooManyRequests)
				return
			}
			st.admitted.Add(1)
			next.ServeHTTP(w, req)
		})
	}
}

// nodeStats are a node's counters since it started, served as JSON on
// /stats; the driver takes the differences.
type nodeStats struct {
	admitted, refused, failed atomic.Int64
	latency                   histogram
	reader                    *sdkmetric.ManualReader
}

// statsReply is the JSON of /stats.
type statsReply struct {
	Admitted, Refused int64
	Degraded          int64 // decisions made by the failure policy
	Failed            int64 // requests the Limiter could not decide, let through
	RedisAvailable    bool  // the Limiter's hybridlimit.redis.available gauge
	Latency           []uint64
}

func (s *nodeStats) serve(w http.ResponseWriter, req *http.Request) {
	m := s.metrics(req.Context())
	rep := statsReply{
		Admitted: s.admitted.Load(), Refused: s.refused.Load(),
		Degraded: m.degraded, Failed: s.failed.Load(),
		RedisAvailable: m.available,
		Latency:        s.latency.snapshot(),
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(rep)
}

// metricValues are the figures the node reads from the Limiter's metrics.
type metricValues struct {
	available bool  // hybridlimit.redis.available
	degraded  int64 // hybridlimit.fallback.decisions: made by a failure policy
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
				if m.Name == "hybridlimit.fallback.decisions" {
					for _, p := range d.DataPoints {
						v.degraded += p.Value
					}
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
