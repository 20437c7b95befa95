// Package redisbench measures central mode (package syncer: every decision
// one atomic Lua script) against a real redis-server on loopback, beside two
// peers doing the same job the way people do it without this library:
//
//	peer-redis_rate   github.com/go-redis/redis_rate/v10, GCRA in Lua
//	peer-incr_expire  a fixed-window counter done the naive way: one pipeline
//	                  of INCR and EXPIRE per request, the client compares
//
// BenchmarkRedis/<target>/<workload>/<goroutines> is one timed phase of fixed
// length (flags -redisbench.tput, -redisbench.lat, -redisbench.rej), whatever
// b.N: run it with -benchtime 1x. Each phase reports
//
//	ops/s             decisions per second, all goroutines together
//	p50-us, p99-us    client latency of one decision (a histogram of every call)
//	server-us/call    Redis's own time per request: the usec of the phase's
//	                  EVALSHA calls (INCR and EXPIRE for the naive peer) in
//	                  INFO commandstats, read before and after the phase, over
//	                  the number of requests
//	server-cpu-us/op  the server process's CPU (INFO cpu, user+sys) per request,
//	                  parsing and socket work included
//	client-cpu-us/op  this process's CPU (getrusage, user+sys) per request: the
//	                  client library, go-redis and the Go runtime
//	admit-pct         the share of requests admitted
//
// Workloads, the same for every target:
//
//	admitted  10,000 keys in turn, at 1,000 per second per key (burst 1,000):
//	          every request is admitted. The keys are touched once before.
//	rejected  the same keys at 1 per hour (burst 1), each touched once
//	          before: every request is rejected.
//
// The sliding window log runs at limits 10, 100 and 1,000 (window 10s) with
// its window kept full: its time is passed in (syncx.AllowNAt), each key's
// log is filled with L entries first, and each request comes one window/L
// after the key's previous one, so every request lets exactly one entry
// leave and adds one (admitted), or, in the rejected workload, comes at the
// key's last time and finds the window full. It uses 50,000/L keys, at
// least 64 (5,000, 500, 64), so that filling them takes 50,000 to 64,000
// calls.
//
// In the 64-goroutine phases each goroutine owns every 64th key, so one key
// never has two requests in flight. All phases share one client (a pool of 64
// connections) and one context with a deadline.
//
// The benchmarks start a private redis-server (persistence off) when one is
// on PATH, flushed before each target; otherwise they use the server at
// HYBRIDLIMIT_REDIS_ADDR, under a prefix of their own, without flushing (its
// commandstats then include anyone else's EVALSHA). BenchmarkMemory
// measures the memory each algorithm keeps per user key (memory_test.go).
//
// scripts/bench.sh runs BenchmarkRedis several times, interleaved, and
// cmd/redistable turns the output into the tables of docs/redis.md.
package redisbench

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/redis/go-redis/v9"

	"github.com/hybridlimit/hybridlimit/internal/redistest"
	"github.com/hybridlimit/hybridlimit/internal/syncx"
	"github.com/hybridlimit/hybridlimit/local"
	"github.com/hybridlimit/hybridlimit/syncer"
)

var (
	tputDur = flag.Duration("redisbench.tput", 2*time.Second, "length of each 64-goroutine phase of the admitted workload")
	latDur  = flag.Duration("redisbench.lat", time.Second, "length of each 1-goroutine (latency) phase")
	rejDur  = flag.Duration("redisbench.rej", 500*time.Millisecond, "length of each 64-goroutine phase of the rejected workload")
)

const (
	numKeys    = 10000 // distinct keys of the workloads
	goroutines = 64    // concurrency of the throughput phases
	logEntries = 50000 // keys × L of the sliding window log's prefill
	logWindow  = 10 * time.Second
	admitLimit = 1000 // per second per key, in the admitted workload
)

var userKeys = func() []string {
	k := make([]string, numKeys)
	for i := range k {
		k[i] = fmt.Sprintf("user:%05d", i)
	}
	return k
}()

// env is the Redis server and the client every phase uses.
type env struct {
	addr    string
	client  *redis.Client
	private bool   // a server of our own: flushed between targets
	prefix  string // key prefix of this process
}

func newEnv(b *testing.B) *env {
	b.Helper()
	var addr string
	_, err := exec.LookPath("redis-server")
	private := err == nil || os.Getenv(redistest.EnvAddr) == ""
	if private {
		addr = redistest.Start(b).Addr // skips (fails under CI) without redis-server
	} else {
		addr = redistest.Addr(b)
	}
	e := &env{addr: addr, private: private, prefix: "bench"}
	if !private {
		e.prefix = redistest.Prefix(b)
	}
	e.client = e.newClient()
	b.Cleanup(func() { e.client.Close() })
	return e
}

// newClient returns a client of the server with a pool of 64 connections.
func (e *env) newClient() *redis.Client {
	return redis.NewClient(&redis.Options{
		Addr:                  e.addr,
		ContextTimeoutEnabled: true, // syncer.NewCentral requires it
		PoolSize:              goroutines,
		MaxRetries:            -1,
		DialTimeout:           time.Second,
	})
}

func (e *env) flush(b *testing.B) {
	b.Helper()
	if e.private {
		if err := e.client.FlushAll(context.Background()).Err(); err != nil {
			b.Fatal(err)
		}
	}
}

// keyspace is the Keyspace of the Centrals of e.
func (e *env) keyspace() *syncer.Keyspace { return &syncer.Keyspace{Prefix: e.prefix} }

func (e *env) central(b *testing.B) *syncer.Central {
	b.Helper()
	cen, err := syncer.NewCentral(syncer.CentralConfig{Client: e.client, Keyspace: *e.keyspace()})
	if err != nil {
		b.Fatal(err)
	}
	if err := syncx.Preload(context.Background(), cen); err != nil {
		b.Fatal(err)
	}
	return cen
}

func rule(b *testing.B, name string, p local.Limit) *syncer.Rule {
	b.Helper()
	r, err := syncer.NewRule(name, p)
	if err != nil {
		b.Fatal(err)
	}
	return r
}

// decide makes one decision for key index k and reports whether it was
// admitted. Calls for one k never overlap.
type decide func(ctx context.Context, k int) (bool, error)

// target is one implementation under test. admitted and rejected prepare
// the state of their workload (fill, touch every key once) and return the
// decision; rejected is called after the admitted phases.
type target struct {
	name     string
	keys     int      // distinct keys of its workloads
	cost     []string // commandstats entries whose time is one request's
	calls    string   // commandstats entry counting the requests
	admitted func(b *testing.B, e *env) decide
	rejected func(b *testing.B, e *env) decide
}

var scriptCost = []string{"evalsha"}

// centralTarget is algorithm a in central mode, at Redis's clock.
func centralTarget(a local.Algorithm) target {
	mk := func(name string, p local.Limit) func(b *testing.B, e *env) decide {
		return func(b *testing.B, e *env) decide {
			cen, r := e.central(b), rule(b, name, p)
			d := func(ctx context.Context, k int) (bool, error) {
				dec, err := cen.AllowN(ctx, r, userKeys[k], 1)
				return dec.Allowed(), err
			}
			fill(b, d, numKeys, 1)
			return d
		}
	}
	return target{
		name: a.String(), keys: numKeys, cost: scriptCost, calls: "evalsha",
		admitted: mk(a.String(), local.Limit{Algorithm: a, Quota: admitLimit, Window: time.Second}),
		rejected: mk(a.String()+"-rej", local.Limit{Algorithm: a, Quota: 1, Window: time.Hour}),
	}
}

// logTarget is the sliding window log at limit l with its window kept full,
// its time passed in.
func logTarget(l int64) target {
	keys := int(max(min(logEntries/l, numKeys), goroutines))
	step := logWindow.Microseconds() / l
	var (
		cen   *syncer.Central
		r     *syncer.Rule
		t0    int64
		count []int64 // requests made per key: key k's next time is t0 + count[k]·step
	)
	at := func(ctx context.Context, k int, t int64) (local.Decision, error) {
		return syncx.AllowNAt(ctx, cen, time.UnixMicro(t), r, userKeys[k], 1)
	}
	return target{
		name: fmt.Sprintf("sliding_window_log-L%d", l), keys: keys, cost: scriptCost, calls: "evalsha",
		admitted: func(b *testing.B, e *env) decide {
			cen = e.central(b)
			r = rule(b, fmt.Sprintf("log%d", l), local.Limit{Algorithm: local.SlidingWindowLog, Quota: l, Window: logWindow})
			t0, count = time.Now().UnixMicro(), make([]int64, keys)
			d := func(ctx context.Context, k int) (bool, error) {
				dec, err := at(ctx, k, t0+count[k]*step)
				count[k]++
				if err == nil && count[k] > l && (!dec.Allowed() || dec.Remaining() != 0) {
					err = fmt.Errorf("window of key %d not kept full: %+v", k, dec)
				}
				return dec.Allowed(), err
			}
			fill(b, d, keys, int(l))
			return d
		},
		rejected: func(b *testing.B, e *env) decide {
			return func(ctx context.Context, k int) (bool, error) {
				dec, err := at(ctx, k, t0+(count[k]-1)*step)
				return dec.Allowed(), err
			}
		},
	}
}

func redisRateTarget() target {
	mk := func(lim redis_rate.Limit) func(b *testing.B, e *env) decide {
		return func(b *testing.B, e *env) decide {
			rl := redis_rate.NewLimiter(e.client)
			prefix := e.prefix + ":"
			d := func(ctx context.Context, k int) (bool, error) {
				res, err := rl.Allow(ctx, prefix+userKeys[k], lim)
				return err == nil && res.Allowed > 0, err
			}
			fill(b, d, numKeys, 1) // also loads the script: NOSCRIPT, then EVAL
			return d
		}
	}
	return target{
		name: "peer-redis_rate", keys: numKeys, cost: scriptCost, calls: "evalsha",
		admitted: mk(redis_rate.PerSecond(admitLimit)),
		rejected: mk(redis_rate.Limit{Rate: 1, Burst: 1, Period: time.Hour}),
	}
}

func incrExpireTarget() target {
	mk := func(limit int64, window time.Duration) func(b *testing.B, e *env) decide {
		return func(b *testing.B, e *env) decide {
			c, prefix := e.client, e.prefix+":fw:"
			d := func(ctx context.Context, k int) (bool, error) {
				w := time.Now().UnixNano() / int64(window)
				key := prefix + userKeys[k] + ":" + strconv.FormatInt(w, 10)
				pipe := c.Pipeline()
				incr := pipe.Incr(ctx, key)
				pipe.Expire(ctx, key, window)
				if _, err := pipe.Exec(ctx); err != nil {
					return false, err
				}
				return incr.Val() <= limit, nil
			}
			fill(b, d, numKeys, 1)
			return d
		}
	}
	return target{
		name: "peer-incr_expire", keys: numKeys, cost: []string{"incr", "expire"}, calls: "incr",
		admitted: mk(admitLimit, time.Second),
		rejected: mk(1, time.Hour),
	}
}

// targets in the order they run; our GCRA and its peer side by side.
func targets() []target {
	return []target{
		centralTarget(local.FixedWindow),
		centralTarget(local.SlidingWindowCounter),
		logTarget(10),
		logTarget(100),
		logTarget(1000),
		centralTarget(local.TokenBucket),
		centralTarget(local.LeakyBucket),
		centralTarget(local.GCRA),
		redisRateTarget(),
		incrExpireTarget(),
	}
}

// BenchmarkRedis runs every target's phases: admitted/64g (throughput),
// admitted/1g (latency), rejected/64g. See the package comment.
func BenchmarkRedis(b *testing.B) {
	e := newEnv(b)
	// Warm up the connections, the server and the machine, unmeasured.
	w := incrExpireTarget()
	if _, err := drive(w.admitted(b, e), w.keys, goroutines, 500*time.Millisecond); err != nil {
		b.Fatal(err)
	}
	for _, t := range targets() {
		b.Run(t.name, func(b *testing.B) {
			e.flush(b)
			d := t.admitted(b, e)
			b.Run("admitted/64g", func(b *testing.B) { measure(b, e, t, d, goroutines, *tputDur) })
			b.Run("admitted/1g", func(b *testing.B) { measure(b, e, t, d, 1, *latDur) })
			d = t.rejected(b, e)
			b.Run("rejected/64g", func(b *testing.B) { measure(b, e, t, d, goroutines, *rejDur) })
		})
	}
}

// owned returns the keys goroutine j of g takes in turn.
func owned(keys, j, g int) []int {
	var ks []int
	for k := j; k < keys; k += g {
		ks = append(ks, k)
	}
	return ks
}

// fill makes rounds requests to each of keys keys, with 64 goroutines, each
// on keys of its own.
func fill(b *testing.B, d decide, keys, rounds int) {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, goroutines)
	for j := range goroutines {
		wg.Go(func() {
			ks := owned(keys, j, goroutines)
			for range rounds {
				for _, k := range ks {
					if _, err := d(ctx, k); err != nil {
						errs <- err
						return
					}
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		b.Fatal(err)
	}
}

// phase is what one timed phase measured on the client.
type phase struct {
	ops, admitted int64
	lat           []time.Duration // every call's, sorted
	elapsed       time.Duration
}

// drive runs d for dur with g goroutines, each on keys of its own.
func drive(d decide, keys, g int, dur time.Duration) (phase, error) {
	ctx, cancel := context.WithTimeout(context.Background(), dur+time.Minute)
	defer cancel()
	var (
		ph       phase
		stop     atomic.Bool
		wg       sync.WaitGroup
		start    = make(chan struct{})
		mu       sync.Mutex
		firstErr error
	)
	for j := range g {
		wg.Go(func() {
			ks := owned(keys, j, g)
			if len(ks) == 0 {
				return
			}
			lat := make([]time.Duration, 0, 1<<16)
			var n, adm int64
			var err error
			<-start
			for i := 0; !stop.Load(); i++ {
				t0 := time.Now()
				var ok bool
				ok, err = d(ctx, ks[i%len(ks)])
				lat = append(lat, time.Since(t0))
				if err != nil {
					break
				}
				n++
				if ok {
					adm++
				}
			}
			mu.Lock()
			defer mu.Unlock()
			ph.lat = append(ph.lat, lat...)
			ph.ops, ph.admitted = ph.ops+n, ph.admitted+adm
			if err != nil && firstErr == nil {
				firstErr = err
			}
		})
	}
	t0 := time.Now()
	close(start)
	timer := time.AfterFunc(dur, func() { stop.Store(true) })
	wg.Wait()
	ph.elapsed = time.Since(t0)
	timer.Stop()
	slices.Sort(ph.lat)
	return ph, firstErr
}

// measure runs d for dur with g goroutines and reports the phase's metrics.
func measure(b *testing.B, e *env, t target, d decide, g int, dur time.Duration) {
	before := serverStats(b, e.client)
	cpu0 := processCPU()
	ph, err := drive(d, t.keys, g, dur)
	cpu1 := processCPU()
	after := serverStats(b, e.client)
	if err != nil {
		b.Fatal(err)
	}
	calls := after.cmd[t.calls].calls - before.cmd[t.calls].calls
	var usec float64
	for _, c := range t.cost {
		usec += after.cmd[c].usec - before.cmd[c].usec
	}
	if e.private && calls != ph.ops {
		b.Fatalf("commandstats counted %d %s calls for %d requests", calls, t.calls, ph.ops)
	}
	if n := after.cmd["eval"].calls - before.cmd["eval"].calls; e.private && n != 0 {
		b.Fatalf("%d EVAL calls during the phase: a script was not loaded", n)
	}
	ops := float64(ph.ops)
	pct := func(p float64) float64 { return float64(ph.lat[int(p*float64(len(ph.lat)-1))].Nanoseconds()) / 1e3 }
	b.ReportMetric(float64(ph.elapsed.Nanoseconds())/ops, "ns/op")
	b.ReportMetric(ops/ph.elapsed.Seconds(), "ops/s")
	b.ReportMetric(pct(0.50), "p50-us")
	b.ReportMetric(pct(0.99), "p99-us")
	b.ReportMetric(usec/float64(calls), "server-us/call")
	b.ReportMetric((after.cpu-before.cpu)*1e6/ops, "server-cpu-us/op")
	b.ReportMetric(float64((cpu1-cpu0).Nanoseconds())/1e3/ops, "client-cpu-us/op")
	b.ReportMetric(100*float64(ph.admitted)/ops, "admit-pct")
}

// processCPU returns the CPU time (user + system) this process used so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// stats are a server's counters at one moment.
type stats struct {
	cmd map[string]cmdStat // by command name, lower case
	cpu float64            // used_cpu_user + used_cpu_sys, seconds
}

type cmdStat struct {
	calls int64
	usec  float64
}

// serverStats reads INFO commandstats and cpu.
func serverStats(b *testing.B, c *redis.Client) stats {
	b.Helper()
	info, err := c.Info(context.Background(), "commandstats", "cpu").Result()
	if err != nil {
		b.Fatal(err)
	}
	s := stats{cmd: map[string]cmdStat{}}
	for line := range strings.Lines(info) {
		line = strings.TrimSpace(line)
		name, val, found := strings.Cut(line, ":")
		if !found {
			continue
		}
		switch {
		case strings.HasPrefix(name, "cmdstat_"):
			var cs cmdStat
			for field := range strings.SplitSeq(val, ",") {
				k, v, _ := strings.Cut(field, "=")
				switch k {
				case "calls":
					cs.calls, _ = strconv.ParseInt(v, 10, 64)
				case "usec":
					cs.usec, _ = strconv.ParseFloat(v, 64)
				}
			}
			s.cmd[strings.TrimPrefix(name, "cmdstat_")] = cs
		case name == "used_cpu_user" || name == "used_cpu_sys":
			v, _ := strconv.ParseFloat(val, 64)
			s.cpu += v
		}
	}
	return s
}
