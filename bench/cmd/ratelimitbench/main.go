// Command ratelimitbench measures envoy/cmd/hybridlimit-ratelimit beside a
// reproduction of envoyproxy/ratelimit's decision path (one pipelined
// INCRBY + EXPIRE per descriptor in Redis; see repro.go), both behind the
// same gRPC API, the same configuration and a private redis-server of
// their own each, in one run: 3 replicas of each as processes, a gRPC
// load generator in this one. For each it reports decisions per second,
// per core of the replicas' CPU and of theirs and Redis's together; p50
// and p99 latency of ShouldRateLimit seen by the client; Redis commands
// per decision (INFO commandstats, commands run by scripts included); and
// admitted ÷ limit over the windows the phase covers whole. Then the same
// with Redis killed (SIGKILL by PID) for -outage, and started again empty.
//
//	make bench-envoy
//	ratelimitbench -service .run/envoybench/hybridlimit-ratelimit -duration 10s -outage 10s
package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/hybridlimit/hybridlimit/bench/accuracy"
	"github.com/hybridlimit/hybridlimit/bench/internal/proc"
	"github.com/hybridlimit/hybridlimit/internal/redisproc"
)

func nowUnix() int64                   { return time.Now().Unix() }
func secondsDur(s int64) time.Duration { return time.Duration(s) * time.Second }

func registerHealth(g *grpc.Server) { healthpb.RegisterHealthServer(g, health.NewServer()) }

type options struct {
	service  string
	out      string
	replicas int
	keys     int
	limit    int
	rate     int
	workers  int
	duration time.Duration
	outage   time.Duration
	only     string
}

func main() {
	var o options
	serve := flag.String("serve-repro", "", "internal: serve the reproduction on this address")
	redisAddr := flag.String("redis", "", "internal: the reproduction's Redis")
	config := flag.String("config", "", "internal: the reproduction's configuration")
	flag.StringVar(&o.service, "service", ".run/envoybench/hybridlimit-ratelimit", "the hybridlimit-ratelimit binary")
	flag.StringVar(&o.out, "out", ".run/envoybench", "directory for logs and the configuration")
	flag.IntVar(&o.replicas, "replicas", 3, "service replicas per contender")
	flag.IntVar(&o.keys, "keys", 20, "keys (tenants), each with its own limit")
	flag.IntVar(&o.limit, "limit", 100, "each key's limit per second")
	flag.IntVar(&o.rate, "rate", 4000, "offered decisions per second, all keys together, spread evenly (0: closed loop, each worker as fast as answered)")
	flag.IntVar(&o.workers, "workers", 16, "client goroutines, spread over the replicas")
	flag.DurationVar(&o.duration, "duration", 10*time.Second, "the steady phase")
	flag.DurationVar(&o.outage, "outage", 10*time.Second, "how long Redis stays killed in the outage phase (0: no outage phase)")
	flag.StringVar(&o.only, "only", "", "run one contender: hybridlimit or repro")
	flag.Parse()
	if *serve != "" {
		if err := serveRepro(*serve, *redisAddr, *config); err != nil {
			fmt.Fprintln(os.Stderr, "ratelimitbench:", err)
			os.Exit(1)
		}
		return
	}
	if err := run(o); err != nil {
		fmt.Fprintln(os.Stderr, "ratelimitbench:", err)
		os.Exit(1)
	}
}

// contender is a service under test.
type contender struct {
	name  string
	label string
	start func(o options, i int, redisAddr, grpcAddr string, gossip []string) *exec.Cmd
}

// result is one phase of one contender.
type result struct {
	contender, phase string
	decisions        int
	errors           int
	seconds          float64
	svcCPU, redisCPU float64
	p50, p99         time.Duration
	calls, scripts   int64
	admitted, limit  int64 // over the windows the phase covers whole
	windows          int
}

func run(o options) error {
	if err := os.MkdirAll(o.out, 0o755); err != nil {
		return err
	}
	cfg := filepath.Join(o.out, "bench.yaml")
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf("# ratelimitbench: a limit per tenant\ndomain: bench\ndescriptors:\n  - key: tenant\n    rate_limit:\n      unit: second\n      requests_per_unit: %d\n", o.limit)), 0o644); err != nil {
		return err
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	svc, err := filepath.Abs(o.service)
	if err != nil {
		return err
	}
	contenders := []contender{
		{name: "hybridlimit", label: "hybridlimit-ratelimit (hybrid mode, gossip policy)", start: func(o options, i int, redisAddr, grpcAddr string, gossip []string) *exec.Cmd {
			return exec.Command(svc, "-grpc-addr", grpcAddr, "-config", cfg, "-redis-addr", redisAddr, "-redis-prefix", "bench",
				"-gossip-bind", gossip[i], "-gossip-join", gossip[0], "-gossip-insecure", "-gossip-name", "r"+strconv.Itoa(i), "-log-level", "warn")
		}},
		{name: "repro", label: "envoyproxy/ratelimit reproduction (INCRBY+EXPIRE)", start: func(o options, i int, redisAddr, grpcAddr string, _ []string) *exec.Cmd {
			return exec.Command(self, "-serve-repro", grpcAddr, "-redis", redisAddr, "-config", cfg)
		}},
	}
	var results []result
	for _, c := range contenders {
		if o.only != "" && o.only != c.name {
			continue
		}
		rs, err := runContender(o, c)
		if err != nil {
			return fmt.Errorf("%s: %w", c.name, err)
		}
		results = append(results, rs...)
	}
	fmt.Print(table(o, results))
	return nil
}

func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// runContender starts a redis-server and c's replicas, runs the phases and
// stops them.
func runContender(o options, c contender) ([]result, error) {
	dir, err := os.MkdirTemp("", "envoybench-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	srv, err := redisproc.Start(dir)
	if err != nil {
		return nil, err
	}
	defer srv.Close()
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
	defer rdb.Close()

	var grpcAddrs, gossip []string
	for range o.replicas {
		a, err := freeAddr()
		if err != nil {
			return nil, err
		}
		g, err := freeAddr()
		if err != nil {
			return nil, err
		}
		grpcAddrs, gossip = append(grpcAddrs, a), append(gossip, g)
	}
	var procs []*exec.Cmd
	defer func() {
		for _, p := range procs {
			proc.Stop(p, 5*time.Second)
		}
	}()
	var conns []*grpc.ClientConn
	defer func() {
		for _, cc := range conns {
			cc.Close()
		}
	}()
	for i := range o.replicas {
		cmd := c.start(o, i, srv.Addr, grpcAddrs[i], gossip)
		logf, err := os.Create(filepath.Join(o.out, fmt.Sprintf("%s-%d.log", c.name, i)))
		if err != nil {
			return nil, err
		}
		defer logf.Close()
		cmd.Stdout, cmd.Stderr = logf, logf
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		if err := cmd.Start(); err != nil {
			return nil, err
		}
		procs = append(procs, cmd)
		cc, err := grpc.NewClient(grpcAddrs[i], grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			return nil, err
		}
		conns = append(conns, cc)
		if err := waitServing(cc); err != nil {
			return nil, fmt.Errorf("replica %d: %w (see %s)", i, err, logf.Name())
		}
	}
	clients := make([]rlsv3.RateLimitServiceClient, len(conns))
	for i, cc := range conns {
		clients[i] = rlsv3.NewRateLimitServiceClient(cc)
	}
	fmt.Fprintf(os.Stderr, "%s: %d replicas serving; steady phase %v\n", c.name, o.replicas, o.duration)
	steady, err := phase(o, c, "Redis up", clients, procs, rdb, o.duration, nil)
	if err != nil {
		return nil, err
	}
	out := []result{steady}
	if o.outage > 0 {
		fmt.Fprintf(os.Stderr, "%s: outage phase: Redis killed for %v\n", c.name, o.outage)
		lead, tail := 3*time.Second, 4*time.Second
		fault := func(start time.Time) (time.Time, time.Time) {
			time.Sleep(time.Until(start.Add(lead)))
			killed := time.Now()
			srv.Kill() // SIGKILL by PID
			time.Sleep(o.outage)
			restarted := time.Now()
			if err := srv.Restart(); err != nil {
				fmt.Fprintln(os.Stderr, "restart:", err)
			}
			return killed, restarted
		}
		r, err := phase(o, c, fmt.Sprintf("Redis killed %v", o.outage), clients, procs, rdb, lead+o.outage+tail, fault)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, nil
}

func waitServing(cc *grpc.ClientConn) error {
	hc := healthpb.NewHealthClient(cc)
	deadline := time.Now().Add(20 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		h, err := hc.Check(ctx, &healthpb.HealthCheckRequest{})
		cancel()
		if err == nil && h.GetStatus() == healthpb.HealthCheckResponse_SERVING {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not serving after 20s: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// sample is one decision seen by the client.
type sample struct {
	at      time.Time
	took    time.Duration
	key     int
	ok, err bool
}

// phase offers o.rate decisions per second over d across clients and
// measures; fault, if not nil, runs beside it and returns the outage's
// bounds, outside which windows are not counted for admitted ÷ limit.
func phase(o options, c contender, name string, clients []rlsv3.RateLimitServiceClient, procs []*exec.Cmd,
	rdb *redis.Client, d time.Duration, fault func(time.Time) (time.Time, time.Time)) (result, error) {
	ctx := context.Background()
	if err := rdb.ConfigResetStat(ctx).Err(); err != nil {
		return result{}, err
	}
	before, err := accuracy.ReadRedisStats(ctx, rdb)
	if err != nil {
		return result{}, err
	}
	cpu0, err := procsCPU(procs)
	if err != nil {
		return result{}, err
	}
	start := time.Now()
	end := start.Add(d)
	var wg sync.WaitGroup
	samples := make([][]sample, o.workers)
	var interval time.Duration
	if o.rate > 0 {
		interval = time.Duration(float64(time.Second) * float64(o.workers) / float64(o.rate))
	}
	for w := range o.workers {
		wg.Go(func() {
			client := clients[w%len(clients)]
			rng := rand.New(rand.NewPCG(uint64(w), 1))
			var tick <-chan time.Time // nil: closed loop, a request as soon as the last is answered
			if o.rate > 0 {
				t := time.NewTicker(interval)
				defer t.Stop()
				tick = t.C
			}
			for {
				if tick != nil {
					<-tick
				}
				if time.Now().After(end) {
					return
				}
				k := rng.IntN(o.keys)
				req := &rlsv3.RateLimitRequest{Domain: "bench", Descriptors: []*commonv3.RateLimitDescriptor{{
					Entries: []*commonv3.RateLimitDescriptor_Entry{{Key: "tenant", Value: "t" + strconv.Itoa(k)}}}}}
				cctx, cancel := context.WithTimeout(ctx, time.Second)
				t0 := time.Now()
				resp, err := client.ShouldRateLimit(cctx, req)
				took := time.Since(t0)
				cancel()
				samples[w] = append(samples[w], sample{at: t0, took: took, key: k, err: err != nil,
					ok: err == nil && resp.GetOverallCode() == rlsv3.RateLimitResponse_OK})
			}
		})
	}
	var from, to time.Time
	if fault != nil {
		from, to = fault(start)
	}
	wg.Wait()
	elapsed := time.Since(start)
	cpu1, err := procsCPU(procs)
	if err != nil {
		return result{}, err
	}
	after, err := accuracy.ReadRedisStats(ctx, rdb)
	if err != nil && fault == nil {
		return result{}, err
	}
	r := result{contender: c.label, phase: name, seconds: elapsed.Seconds(), svcCPU: cpu1 - cpu0}
	if fault == nil {
		r.redisCPU = after.CPU - before.CPU
		r.calls = after.Calls - 1 // INFO's own call is not counted until it ends
		r.scripts = after.EvalshaCalls + after.EvalCalls
	} else {
		r.redisCPU, r.calls, r.scripts = -1, -1, -1 // Redis restarted: its counters started again
	}
	var all []sample
	for _, s := range samples {
		all = append(all, s...)
	}
	// Windows of one second, by the client's clock: those the phase (or
	// the outage) covers whole. A refused RPC counts as admitted, as
	// Envoy's filter admits it (failure_mode_deny: false).
	lo, hi := start, end
	if fault != nil {
		lo, hi = from, to
	}
	first, last := lo.Unix()+1, hi.Unix()-1 // [first, last)
	counts := map[[2]int64]int64{}
	var lat []time.Duration
	for _, s := range all {
		r.decisions++
		if s.err {
			r.errors++
		}
		sec := s.at.Unix()
		if sec < first || sec >= last {
			continue
		}
		lat = append(lat, s.took)
		if s.ok || s.err {
			counts[[2]int64{int64(s.key), sec}]++
		}
	}
	if last > first {
		r.windows = int(last - first)
		r.limit = int64(o.limit) * int64(o.keys) * (last - first)
		for _, n := range counts {
			r.admitted += n
		}
	}
	slices.Sort(lat)
	if len(lat) > 0 {
		r.p50, r.p99 = lat[len(lat)/2], lat[len(lat)*99/100]
	}
	return r, nil
}

// procsCPU sums the processes' user and system CPU seconds (/proc, at 100
// ticks a second).
func procsCPU(procs []*exec.Cmd) (float64, error) {
	var total float64
	for _, p := range procs {
		data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p.Process.Pid))
		if err != nil {
			return 0, err
		}
		s := string(data)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			return 0, errors.New("procsCPU: bad stat")
		}
		f := strings.Fields(s[i+2:])
		// fields after the command: state is f[0]; utime f[11], stime f[12]
		ut, _ := strconv.ParseFloat(f[11], 64)
		st, _ := strconv.ParseFloat(f[12], 64)
		total += (ut + st) / 100
	}
	return total, nil
}

func table(o options, rs []result) string {
	var b strings.Builder
	offered := fmt.Sprintf("%d decisions/s offered", o.rate)
	if o.rate == 0 {
		offered = "closed loop"
	}
	fmt.Fprintf(&b, "\n%d replicas each, %d keys × %d/s (fixed window), %s by %d client goroutines over gRPC on loopback; %d cores\n\n",
		o.replicas, o.keys, o.limit, offered, o.workers, runtime.NumCPU())
	b.WriteString("| service | phase | decisions/s | errors | per core (replicas' CPU) | per core (replicas + Redis CPU) | p50 | p99 | Redis commands / decision | scripts / decision | admitted ÷ limit |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range rs {
		rate := float64(r.decisions) / r.seconds
		perCore := float64(r.decisions) / r.svcCPU
		both, cmds, scripts := "n/a", "n/a", "n/a"
		if r.redisCPU >= 0 {
			both = fmt.Sprintf("%.0f", float64(r.decisions)/(r.svcCPU+r.redisCPU))
			cmds = fmt.Sprintf("%.3f", float64(r.calls)/float64(r.decisions))
			scripts = fmt.Sprintf("%.3f", float64(r.scripts)/float64(r.decisions))
		}
		ratio := "n/a"
		if r.limit > 0 {
			ratio = fmt.Sprintf("%.3f (%d windows)", float64(r.admitted)/float64(r.limit), r.windows)
		}
		fmt.Fprintf(&b, "| %s | %s | %.0f | %d | %.0f | %s | %s | %s | %s | %s | %s |\n", r.contender, r.phase, rate, r.errors,
			perCore, both, round(r.p50), round(r.p99), cmds, scripts, ratio)
	}
	return b.String()
}

func round(d time.Duration) string {
	return cmp.Or(d.Round(10*time.Microsecond).String(), "0s")
}
