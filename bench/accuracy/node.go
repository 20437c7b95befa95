package accuracy

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
	"golang.org/x/sys/unix"

	"github.com/hybridlimit/hybridlimit/hybrid"
	"github.com/hybridlimit/hybridlimit/local"
	"github.com/hybridlimit/hybridlimit/syncer"
)

// grace is how long after the schedule's end a node keeps deciding late
// arrivals; what is left then is dropped (and the run's achieved rate
// shows it).
const grace = time.Second

// notDecided marks a central-mode slot no worker filled.
const notDecided = ^uint32(0)

// RunNode is the body of one node process: it builds node's schedule and
// limiter, waits for T0, decides every arrival at its scheduled time (open
// loop: a node that falls behind decides late, it never slows the
// schedule), and writes out+".rec" (the decisions) and out+".json" (its
// NodeSummary).
//
// Decisions in hybrid, local and naive modes are made in line, one after
// the other, by the generator: they take well under a microsecond. In
// central mode each one is a round trip to Redis, so the generator hands
// the arrivals, on time, to Spec.Workers goroutines.
func RunNode(spec Spec, node int, out string) error {
	if spec.Workload == WorkPatterns {
		return runPatternsNode(spec, node, out)
	}
	algos := spec.RuleAlgos()
	sched := spec.Schedule(node)
	names := keyNames(sched)
	// A key no arrival uses, decided back to back after the schedule: the
	// same decisions with warm caches (warmProbe).
	warmKey := uint32(len(names))
	names = append(names, "warm-probe")
	rs := &rounds{t0: spec.T0}
	cc := &cmdCounter{}
	ctx := context.Background()
	W, T0 := spec.W(), spec.T0

	var client redis.UniversalClient
	if spec.Mode != ModeLocal {
		client = nodeClient(spec)
		defer client.Close()
		client.AddHook(cc)
		if err := client.Ping(ctx).Err(); err != nil {
			return fmt.Errorf("node %d: redis: %w", node, err)
		}
	}
	prefix := "acc:" + spec.ID

	// rules[i] decides algos[i]: one request at node time now (µs since the
	// epoch): admitted, the reason, the fixed window's reset-after (0 for
	// the other algorithms), from which windowOf tells the window it
	// counted in, and whether it waited for a lease.
	type rule struct {
		algo   string
		decide func(k uint32, now int64) (bool, uint8, time.Duration, bool, error)
		sum    *NodeSummary
		recs   []Record
		lat    Slices     // the decisions that did not wait for a lease
		waits  Slices     // those that did
		waited int64      // guarded by mu in central mode
		onCPU  Slices     // the same decisions' time on the CPU (not central)
		warm   Slices     // warmProbe's decisions (hybrid and local)
		mu     sync.Mutex // central: guards lat
		errs   atomic.Int64
		unav   atomic.Int64 // made without Redis by a failure policy: Degraded, or an error wrapping ErrUnavailable
		first  atomic.Pointer[string]
	}
	rules := make([]*rule, len(algos))
	var stops []func()
	var naives []*naive
	var l *hybrid.Limiter
	if spec.Mode != ModeNaive {
		var err error
		if l, err = newLimiter(spec, node, client, prefix, rs); err != nil {
			return err
		}
		stops = append(stops, func() {
			sctx, cancel := context.WithTimeout(ctx, 3*time.Second)
			defer cancel()
			if err := l.Shutdown(sctx); err != nil {
				s := "shutdown: " + err.Error()
				rules[0].first.CompareAndSwap(nil, &s)
			}
		})
	}
	for i, algo := range algos {
		lim, err := spec.LimOf(algo)
		if err != nil {
			return err
		}
		r := &rule{algo: algo, sum: &NodeSummary{Node: node, Scheduled: len(sched), ModeRun: spec.Mode}}
		rules[i] = r
		fixed := algo == AlgoFixed
		if spec.Mode == ModeNaive {
			n, err := newNaive(ctx, client, lim, prefix+":"+algo, spec.Interval, T0, rs)
			if err != nil {
				return err
			}
			naives = append(naives, n)
			r.decide = func(k uint32, now int64) (bool, uint8, time.Duration, bool, error) {
				ok, end := n.decide(k, now-T0)
				var reason uint8
				if !ok {
					reason = uint8(local.ReasonLimited)
				}
				var reset time.Duration
				if fixed {
					reset = time.Duration(end-(now-T0)) * time.Microsecond
				}
				return ok, reason, reset, false, nil
			}
			continue
		}
		mode := hybrid.Local
		if client != nil {
			mode = hybrid.Hybrid
			if spec.Mode == ModeCentral {
				mode = hybrid.Central
			}
		}
		name := "acc"
		if len(algos) > 1 {
			name += "-" + algo
		}
		hrule := hybrid.Rule{Name: name, Limit: lim.Params(), Mode: mode}
		if mode == hybrid.Hybrid {
			if err := setWait(&hrule, spec.Wait); err != nil {
				l.Close()
				return err
			}
		}
		hr, err := l.Register(hrule)
		if err != nil {
			l.Close()
			return err
		}
		r.sum.ModeRun = hr.Mode.String()
		r.decide = func(k uint32, _ int64) (bool, uint8, time.Duration, bool, error) {
			// The Limiter reads its own clock.
			d, err := l.Allow(ctx, hr, names[k])
			reset := d.ResetAfter()
			if !fixed {
				reset = 0
			}
			if d.Degraded() || (err != nil && errors.Is(err, hybrid.ErrUnavailable)) {
				// A failure policy's decision: not a failed request.
				r.unav.Add(1)
				if errors.Is(err, hybrid.ErrUnavailable) {
					err = nil
				}
			}
			return d.Allowed(), uint8(d.Reason()), reset, waited(d), err
		}
	}
	if spec.Mode == ModeNaive {
		time.Sleep(time.Until(time.UnixMicro(T0)))
		for _, n := range naives {
			n.start()
			stops = append(stops, n.close)
		}
	}

	noteErr := func(r *rule, err error) {
		if err != nil && !errors.Is(err, context.Canceled) {
			r.errs.Add(1)
			s := err.Error()
			r.first.CompareAndSwap(nil, &s)
		}
	}
	end := T0 + spec.Duration().Microseconds()
	deadline := end + grace.Microseconds()
	time.Sleep(time.Until(time.UnixMicro(T0)))
	cpu0 := cpuTime()

	// decideAt decides arrival a by every rule, recording each decision
	// and its latency (measured here, in the node).
	decideAt := func(a Arrival, central bool) []Record {
		var out [8]Record
		for j, r := range rules {
			var c0 time.Duration
			if !central {
				c0 = threadCPU()
			}
			t0 := time.Now()
			ok, reason, reset, wt, err := r.decide(a.Key, t0.UnixMicro())
			t1 := time.Now()
			if !central {
				r.onCPU.Add(t0.UnixMicro()-T0, threadCPU()-c0)
			}
			// Central: the reply's time (Redis decided between the call
			// and now); otherwise the call's.
			t := t0.UnixMicro()
			if central {
				t = t1.UnixMicro()
			}
			noteErr(r, err)
			if central {
				r.mu.Lock()
			}
			if wt {
				r.waits.Add(t0.UnixMicro()-T0, t1.Sub(t0))
				r.waited++
			} else {
				r.lat.Add(t0.UnixMicro()-T0, t1.Sub(t0))
			}
			if central {
				r.mu.Unlock()
			}
			out[j] = NewRecord(a.At, uint32(t-T0), a.Key, ok, reason, windowOf(t, reset, T0, W))
		}
		return out[:len(rules)]
	}

	if spec.Mode == ModeCentral {
		for _, r := range rules {
			r.recs = make([]Record, len(sched))
			for i := range r.recs {
				r.recs[i].Actual = notDecided
			}
		}
		work := make(chan int, 1024)
		var wg sync.WaitGroup
		for range spec.Workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range work {
					if time.Now().UnixMicro() > deadline {
						continue
					}
					for j, rec := range decideAt(sched[i], true) {
						rules[j].recs[i] = rec
					}
				}
			}()
		}
		for i := range sched {
			if _, ok := waitUntil(T0+int64(sched[i].At), deadline); !ok {
				break
			}
			work <- i
		}
		close(work)
		wg.Wait()
		for _, r := range rules {
			n := 0
			for _, rec := range r.recs {
				if rec.Actual != notDecided {
					r.recs[n] = rec
					n++
				}
			}
			r.recs = r.recs[:n]
		}
	} else {
		// One goroutine decides every arrival, on one thread, so that the
		// thread's CPU clock times its decisions (threadCPU).
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		for _, r := range rules {
			r.recs = make([]Record, 0, len(sched))
		}
		for i := 0; i < len(sched); {
			// Sub-millisecond sleeps last about a millisecond (the Go
			// runtime's poller): arrivals due meanwhile are decided
			// together on waking, each at its own time, late by up to
			// about that much. The lateness is measured.
			now, ok := waitUntil(T0+int64(sched[i].At), deadline)
			if !ok {
				break
			}
			// A node behind its schedule stops at the deadline too: what is
			// left is dropped, not decided minutes late.
			for i < len(sched) && T0+int64(sched[i].At) <= now && now <= deadline {
				for j, rec := range decideAt(sched[i], false) {
					rules[j].recs = append(rules[j].recs, rec)
				}
				i++
				now = time.Now().UnixMicro()
			}
		}
	}
	cpu := cpuTime() - cpu0
	if spec.Mode == ModeHybrid || spec.Mode == ModeLocal {
		// warmProbe: one key decided back to back, the caches warm, for
		// comparison with the schedule's decisions, each of which follows
		// a sleep in which the machine's other processes ran.
		for _, r := range rules {
			for range warmProbe {
				t0 := time.Now()
				r.decide(warmKey, t0.UnixMicro())
				r.warm.Add(0, time.Since(t0))
			}
		}
	}
	for _, stop := range stops {
		stop()
	}
	for i, r := range rules {
		sum := r.sum
		sum.CPU = cpu
		for _, rec := range r.recs {
			sum.Reasons[rec.Reason()&7]++
		}
		sum.Decided = len(r.recs)
		sum.Dropped = len(sched) - len(r.recs)
		sum.Errors = int(r.errs.Load())
		sum.Unavailable = r.unav.Load()
		if spec.Mode == ModeNaive && naives[i].errs > 0 {
			// Failed pushes, retried at the next sync: no request failed.
			sum.FirstErr = fmt.Sprintf("naive: %d failed pushes", naives[i].errs)
		}
		if p := r.first.Load(); p != nil && sum.FirstErr == "" {
			sum.FirstErr = *p
		}
		sum.Rounds = rs.times()
		sum.RoundKeys = rs.keys.Load()
		sum.Redis = cc.snapshot()
		r.lat.Trim()
		sum.Latency = r.lat
		r.onCPU.Trim()
		sum.OnCPU = r.onCPU
		r.warm.Trim()
		sum.Warm = r.warm
		r.waits.Trim()
		sum.Waits, sum.Waited = r.waits, r.waited
		base := out
		if len(algos) > 1 {
			base += "." + r.algo
		}
		if err := WriteRecords(base+".rec", r.recs); err != nil {
			return err
		}
		if err := WriteSummary(base+".json", sum); err != nil {
			return err
		}
	}
	return nil
}

// nodeClient returns a node's client of the run's Redis: a
// redis.ClusterClient seeded with the masters when spec.Cluster, else a
// redis.Client; no retries (a decision's deadline bounds it), pools sized
// for central mode's workers (per master, on a Cluster).
func nodeClient(spec Spec) redis.UniversalClient {
	if spec.Cluster {
		return redis.NewClusterClient(&redis.ClusterOptions{
			Addrs: strings.Split(spec.Redis, ","), ContextTimeoutEnabled: true, MaxRetries: -1, DialTimeout: time.Second,
			PoolSize: spec.Workers + 4, MinIdleConns: 2,
		})
	}
	return redis.NewClient(&redis.Options{
		Addr: spec.Redis, ContextTimeoutEnabled: true, MaxRetries: -1, DialTimeout: time.Second,
		PoolSize: spec.Workers + 4, MinIdleConns: 2,
	})
}

// newLimiter returns node's Limiter for a run: the library's defaults but
// for the sync interval, the node's name and the node count, its rounds
// timestamped into rs; client nil for local mode.
func newLimiter(spec Spec, node int, client redis.UniversalClient, prefix string, rs *rounds) (*hybrid.Limiter, error) {
	cfg := hybrid.Config{
		Keyspace:      syncer.Keyspace{Prefix: prefix},
		Sync:          hybrid.SyncConfig{Interval: spec.Interval, NodeID: fmt.Sprintf("n%d", node), Nodes: spec.Nodes, NoColdStart: spec.NoColdStart},
		MeterProvider: roundMeterProvider{r: rs},
		Logger:        slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
	}
	if client != nil {
		cfg.Redis = client // never a nil *redis.Client in the interface
	}
	return hybrid.New(cfg)
}

// keyNames returns the user keys of the ids in sched, indexed by id.
func keyNames(sched []Arrival) []string {
	var hi uint32
	for _, a := range sched {
		hi = max(hi, a.Key)
	}
	names := make([]string, hi+1)
	for i := range names {
		names[i] = KeyName(uint32(i))
	}
	return names
}

// cpuTime returns the process's CPU time so far (user + sys), in seconds.
// warmProbe is how many decisions the warm probe makes per rule.
const warmProbe = 20000

// threadCPU returns the calling thread's CPU time (CLOCK_THREAD_CPUTIME_ID):
// around a decision, the time its thread ran on a CPU, which leaves out
// what it waited for one while the scheduler ran other processes.
func threadCPU() time.Duration {
	var ts unix.Timespec
	if unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts) != nil {
		return 0
	}
	return time.Duration(ts.Nano())
}

func cpuTime() float64 {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
}

// windowOf returns the index (from T0, in windows of W µs) of the window a
// decision made at now (µs) counted in. A fixed window's decision passes its
// reset-after, the time to the end of that window on the clock the limiter
// decided by (Redis's, or the node's estimate of it): rounding now + reset
// to a window boundary recovers the window whatever the clocks' difference,
// as long as it is under W/2. Without one (reset 0), the window is now's.
func windowOf(now int64, reset time.Duration, t0, W int64) int32 {
	if reset > 0 {
		return int32((now+reset.Microseconds()-t0+W/2)/W) - 1
	}
	return int32((now - t0) / W)
}

// waitUntil sleeps until the time at (µs since the epoch) and returns the
// time then; ok is false once the time is past deadline.
func waitUntil(at, deadline int64) (now int64, ok bool) {
	for {
		now = time.Now().UnixMicro()
		if now > deadline {
			return now, false
		}
		if now >= at {
			return now, true
		}
		time.Sleep(time.Duration(at-now) * time.Microsecond)
	}
}
