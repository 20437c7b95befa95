// Command scale holds many keys on one node under one hybrid rule and
// measures what they cost: it first decides once for each of -keys keys
// (as fast as -workers goroutines go), then offers -rate requests per
// second spread evenly over them for -d, and reports the heap per key
// (the table's entries and their lease state, after a collection), Redis's
// memory per key, the sync rounds' duration and keys per round, and the
// node's and Redis's CPU per decision over the measured part. The node's
// CPU includes the driver's own work (its clock reads, its random keys).
//
//	scale -keys 1000000 -rate 10000 -d 30s
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"math/rand/v2"
	"os"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/hybridlimit/hybridlimit/bench/accuracy"
	"github.com/hybridlimit/hybridlimit/bench/internal/proc"
	"github.com/hybridlimit/hybridlimit/hybrid"
)

// cpuProfile is where -cpuprofile writes.
var cpuProfile string

func main() {
	var (
		keys    = flag.Int("keys", 1_000_000, "keys held")
		rate    = flag.Float64("rate", 10_000, "requests per second in the measured part, spread evenly over the keys")
		d       = flag.Duration("d", 30*time.Second, "the measured part")
		workers = flag.Int("workers", 8, "goroutines deciding the first request of every key")
		profile = flag.String("cpuprofile", "", "write a CPU profile of the measured part to this file")
		settle  = flag.Duration("settle", 10*time.Second, "the wait between the first requests and the measured part: their leases' first exchanges")
		addr    = flag.String("redis", "", "use this Redis (flushed first) instead of a private redis-server")
		dir     = flag.String("dir", "", "where the private redis-server keeps its files (default a temporary directory)")
	)
	flag.Parse()
	log.SetFlags(0)
	cpuProfile = *profile
	if err := start(*addr, *dir, func(addr string) error { return run(addr, *keys, *rate, *d, *settle, *workers) }); err != nil {
		log.Fatalf("scale: %v", err)
	}
}

// start runs f against addr, or against a private redis-server (its files
// in dir) that it stops once f returns.
func start(addr, dir string, f func(addr string) error) error {
	if addr != "" {
		return f(addr)
	}
	a, stop, err := proc.Redis(dir)
	if err != nil {
		return fmt.Errorf("start redis-server: %w", err)
	}
	defer stop()
	return f(a)
}

func run(addr string, keys int, rate float64, d, settle time.Duration, workers int) error {
	ctx := context.Background()
	rc := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true, PoolSize: 32})
	defer rc.Close()
	if err := rc.FlushAll(ctx).Err(); err != nil {
		return err
	}
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer mp.Shutdown(ctx)
	heap0 := heap()
	l, err := hybrid.New(hybrid.Config{Redis: rc, MaxKeys: 2 * keys, MeterProvider: mp})
	if err != nil {
		return err
	}
	defer l.Close()
	// A limit no key reaches: every key stays held for the run (a window
	// of an hour), and every decision is an admission.
	r, err := l.Register(hybrid.Rule{Name: "api", Limit: hybrid.Limit{Algorithm: hybrid.FixedWindow, Quota: 1000, Window: time.Hour}})
	if err != nil {
		return err
	}
	name := func(i int) string { return "key-" + strconv.Itoa(i) }

	// The first request of every key.
	t0 := time.Now()
	var next atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for i := int(next.Add(1)) - 1; i < keys; i = int(next.Add(1)) - 1 {
				l.Allow(ctx, r, name(i))
			}
		})
	}
	wg.Wait()
	fill := time.Since(t0)
	time.Sleep(settle) // the last first-lease rounds and the exchanges after them
	st := l.Stats()
	perKey := float64(heap()-heap0) / float64(st.Keys)
	redisMem, err := usedMemory(ctx, rc)
	if err != nil {
		return err
	}
	redisKeys, err := rc.DBSize(ctx).Result()
	if err != nil {
		return err
	}

	// The measured part: rate requests per second over the keys.
	before, err := accuracy.ReadRedisStats(ctx, rc)
	if err != nil {
		return err
	}
	rounds0 := roundStats(ctx, reader)
	if cpuProfile != "" {
		f, err := os.Create(cpuProfile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
	}
	cpu0 := cpuTime()
	var admitted, decided atomic.Int64
	var lats []time.Duration
	var mu sync.Mutex
	const drivers = 4
	gap := time.Duration(float64(time.Second) * drivers / rate)
	end := time.Now().Add(d)
	for w := range drivers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 1))
			var mine []time.Duration
			for at := time.Now(); at.Before(end); at = at.Add(gap) {
				if wait := time.Until(at); wait > 0 {
					time.Sleep(wait)
				}
				s := time.Now()
				dec, _ := l.Allow(ctx, r, name(rng.IntN(keys)))
				mine = append(mine, time.Since(s))
				decided.Add(1)
				if dec.Allowed() {
					admitted.Add(1)
				}
			}
			mu.Lock()
			lats = append(lats, mine...)
			mu.Unlock()
		})
	}
	wg.Wait()
	cpu := cpuTime() - cpu0
	pprof.StopCPUProfile()
	rounds := roundStats(ctx, reader).minus(rounds0)
	after, err := accuracy.ReadRedisStats(ctx, rc)
	if err != nil {
		return err
	}
	n := decided.Load()
	slices.Sort(lats)
	q := func(p float64) time.Duration { return lats[min(int(p*float64(len(lats))), len(lats)-1)] }

	fmt.Printf("%d keys held on one node under one hybrid rule (fixed window, 1,000 per hour), a private redis-server; %s\n\n", st.Keys, runtime.Version())
	fmt.Println("| figure | value |")
	fmt.Println("|---|---|")
	fmt.Printf("| first request of every key (%d goroutines) | %.1f s, %.0f keys/s |\n", workers, fill.Seconds(), float64(keys)/fill.Seconds())
	fmt.Printf("| heap per key (table entry and lease state, after a collection) | %.0f B (Stats.Bytes estimates %.0f B) |\n", perKey, float64(st.Bytes)/float64(st.Keys))
	fmt.Printf("| Redis memory per key (used_memory ÷ keys) | %.0f B; %d Redis keys |\n", float64(redisMem)/float64(st.Keys), redisKeys)
	fmt.Printf("| measured part | %v at %.0f requests/s offered, %d decided (%.0f/s), %d admitted |\n", d, rate, n, float64(n)/d.Seconds(), admitted.Load())
	fmt.Printf("| decision latency p50 / p99 / max | %v / %v / %v |\n", q(0.5), q(0.99), lats[len(lats)-1])
	fmt.Printf("| sync rounds | %d, %.0f keys exchanged per round, mean %.1f ms, p50 ≤ %s, p99 ≤ %s, max ≤ %s |\n", rounds.count, rounds.keys/float64(max(rounds.count, 1)), 1000*rounds.sum/float64(max(rounds.count, 1)), rounds.quantile(0.5), rounds.quantile(0.99), rounds.quantile(1))
	fmt.Printf("| node CPU per decision (process: library and driver) | %.1f µs (%.0f%% of a core) |\n", float64(cpu.Microseconds())/float64(n), 100*cpu.Seconds()/d.Seconds())
	fmt.Printf("| Redis CPU per decision | %.1f µs (%.0f%% of a core); %.2f scripts per decision |\n", (after.CPU-before.CPU)*1e6/float64(n), 100*(after.CPU-before.CPU)/d.Seconds(), float64(after.EvalshaCalls-before.EvalshaCalls)/float64(n))
	return nil
}

// heap is the live heap after a collection.
func heap() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// usedMemory is Redis's used_memory.
func usedMemory(ctx context.Context, rc *redis.Client) (int64, error) {
	info, err := rc.InfoMap(ctx, "memory").Result()
	if err != nil {
		return 0, err
	}
	return strconv.ParseInt(info["Memory"]["used_memory"], 10, 64)
}

// cpuTime is the process's user + system CPU so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		log.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// rounds are the sync rounds' figures from the Limiter's metrics.
type rounds struct {
	count     uint64
	sum, keys float64
	buckets   []uint64
	bounds    []float64
}

func roundStats(ctx context.Context, reader *sdkmetric.ManualReader) rounds {
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		log.Fatal(err)
	}
	var out rounds
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			switch m.Name {
			case "hybridlimit.sync.duration":
				for _, p := range m.Data.(metricdata.Histogram[float64]).DataPoints {
					out.count += p.Count
					out.sum += p.Sum
					out.bounds = p.Bounds
					if out.buckets == nil {
						out.buckets = make([]uint64, len(p.BucketCounts))
					}
					for i, c := range p.BucketCounts {
						out.buckets[i] += c
					}
				}
			case "hybridlimit.sync.keys":
				for _, p := range m.Data.(metricdata.Sum[int64]).DataPoints {
					out.keys += float64(p.Value)
				}
			}
		}
	}
	return out
}

// minus is r's figures since earlier.
func (r rounds) minus(earlier rounds) rounds {
	out := rounds{count: r.count - earlier.count, sum: r.sum - earlier.sum, keys: r.keys - earlier.keys, bounds: r.bounds}
	out.buckets = slices.Clone(r.buckets)
	for i := range min(len(out.buckets), len(earlier.buckets)) {
		out.buckets[i] -= earlier.buckets[i]
	}
	return out
}

// quantile is the upper bound of the bucket that holds quantile q of the
// rounds' durations.
func (r rounds) quantile(q float64) string {
	var seen uint64
	for i, c := range r.buckets {
		seen += c
		if c > 0 && float64(seen) >= q*float64(r.count) {
			if i < len(r.bounds) {
				return fmt.Sprintf("%g ms", 1000*r.bounds[i])
			}
			return "∞"
		}
	}
	return "-"
}
