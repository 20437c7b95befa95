// Command accuracy runs the multi-process accuracy benchmark (package
// bench/accuracy) and prints its table: N node processes (cmd/accnode, each
// with GOMAXPROCS=1) against one redis-server, per mode, workload and
// algorithm, one run after the other; then the accuracy targets checked
// against the hybrid runs, and the curves over L and N.
//
//	go build -o accnode ./cmd/accnode
//	go run ./cmd/accuracy -node ./accnode [-doc ../docs/accuracy-results.md -img ../docs/img]
//
// It starts a private redis-server (persistence off, flushed and its
// statistics reset before each run) when one is on PATH, so INFO
// commandstats and CPU are the run's alone; -redis uses a server of yours
// instead, which it flushes too. -render rebuilds the tables, document and
// plots from the results.json of an earlier run without running anything.
//
// The exit status is 1 when a run fails to run (not when it is invalid or
// misses a target: those are results, printed).
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hybridlimit/hybridlimit/bench/accuracy"
)

var (
	nodeBin      = flag.String("node", "", "the accnode binary (go build ./cmd/accnode)")
	outDir       = flag.String("out", "../.run/accuracy", "directory for the runs' files and results.json")
	redisAddr    = flag.String("redis", "", "use this Redis server (flushed before each run) instead of a private redis-server")
	windows      = flag.Int("windows", 30, "measured 1 s windows per run of the main table (after one warm-up window)")
	curveWindows = flag.Int("curve-windows", 10, "measured windows per run of the curves")
	nodes        = flag.Int("nodes", 8, "N of the main table")
	algos        = flag.String("algos", "fixed,gcra", "algorithms of the main table (fixed, gcra, counter)")
	modes        = flag.String("modes", "central,hybrid,naive,local", "modes of the main table")
	works        = flag.String("workloads", strings.Join(accuracy.Workloads, ","), "workloads of the main table (also: "+accuracy.WorkColdSkewed+")")
	doMain       = flag.Bool("main", true, "run the main table")
	doCurves     = flag.Bool("curves", true, "run the curves (L × N grid)")
	only         = flag.String("only", "", "run only the runs whose id matches this regexp")
	docPath      = flag.String("doc", "", "write the results as Markdown to this file")
	imgDir       = flag.String("img", "", "write the curves' SVG plots to this directory")
	keep         = flag.Bool("keep", false, "keep the decision records (.rec) of every run")
	zipfRate     = flag.Float64("zipf-rate", accuracy.ZipfRate, "total offered rate of the Zipf workload, per second")
	noColdStart  = flag.Bool("no-cold-start", false, "diagnostic: turn the hybrid's cold-start allowance off (SyncConfig.NoColdStart)")
	render       = flag.Bool("render", false, "render -out/results.json again; run nothing")
)

func main() {
	flag.Parse()
	accuracy.ZipfRate = *zipfRate
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "accuracy:", err)
		os.Exit(1)
	}
}

// file is what results.json holds.
type file struct {
	Meta    accuracy.Meta
	Results []*accuracy.Result
}

func run() error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := os.MkdirAll(*outDir, 0o755); err != nil {
		return err
	}
	resultsPath := filepath.Join(*outDir, "results.json")
	if *render {
		b, err := os.ReadFile(resultsPath)
		if err != nil {
			return err
		}
		var f file
		if err := json.Unmarshal(b, &f); err != nil {
			return err
		}
		return report(f.Meta, f.Results)
	}
	if *nodeBin == "" {
		return errors.New("-node: the accnode binary is required (go build ./cmd/accnode)")
	}
	specs, err := plan()
	if err != nil {
		return err
	}
	var est time.Duration
	for _, s := range specs {
		est += s.Duration() + 2*time.Second
	}
	fmt.Fprintf(os.Stderr, "accuracy: %d runs, about %v\n", len(specs), est.Round(time.Second))

	addr := *redisAddr
	if addr == "" {
		srv, err := startRedis(*outDir)
		if err != nil {
			return err
		}
		defer srv.stop()
		addr = srv.addr
	}
	rc := redis.NewClient(&redis.Options{Addr: addr, DialTimeout: time.Second})
	defer rc.Close()
	meta := accuracy.NewMeta(ctx, rc, strings.Join(os.Args, " "))
	meta.Windows, meta.CurveWindows = *windows, *curveWindows
	started := time.Now()
	var results []*accuracy.Result
	failed := 0
	for i, s := range specs {
		if ctx.Err() != nil {
			break
		}
		s.Redis = addr
		s.NoColdStart = *noColdStart
		t := time.Now()
		r, err := runOne(ctx, rc, s)
		if err != nil {
			failed++
			fmt.Fprintf(os.Stderr, "[%d/%d] %s: FAILED: %v\n", i+1, len(specs), s.ID, err)
			continue
		}
		results = append(results, r)
		fmt.Fprintf(os.Stderr, "[%d/%d] %s ran %s: over max %s, false rej %.2f%%, lost %.2f%%, scripts/dec %s, sync p99 %.0f ms, rate off %.2f%%, load %.1f: %s (%.0f s)\n",
			i+1, len(specs), s.ID, r.ModeRun, accuracy.Pct(r.Over.Max), r.FalseRejPct, r.LostPct, accuracy.Num(r.ScriptsPerDecision),
			r.Sync.P99, 100*r.RateOff, r.LoadAvg, r.Verdict(), time.Since(t).Seconds())
	}
	meta.TotalSeconds = time.Since(started).Seconds()
	b, err := json.MarshalIndent(file{meta, results}, "", " ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(resultsPath, b, 0o644); err != nil {
		return err
	}
	if err := report(meta, results); err != nil {
		return err
	}
	fmt.Printf("\nresults: %s; total run time %.1f min\n", resultsPath, meta.TotalSeconds/60)
	if failed > 0 {
		return fmt.Errorf("%d runs failed to run", failed)
	}
	return ctx.Err()
}

// plan lists the runs: the main table, then the curves.
func plan() ([]accuracy.Spec, error) {
	var re *regexp.Regexp
	if *only != "" {
		var err error
		if re, err = regexp.Compile(*only); err != nil {
			return nil, fmt.Errorf("-only: %w", err)
		}
	}
	var specs []accuracy.Spec
	mainHas := map[string]bool{}
	if *doMain {
		for _, a := range split(*algos) {
			for _, w := range split(*works) {
				if !slices.Contains(accuracy.AllWorkloads, w) {
					return nil, fmt.Errorf("-workloads: unknown workload %q (known: %s)", w, strings.Join(accuracy.AllWorkloads, ", "))
				}
				for _, m := range split(*modes) {
					s := accuracy.NewSpec(m, a, w, accuracy.DefaultLimit, *nodes, *windows)
					if re != nil && !re.MatchString(s.ID) {
						continue
					}
					if _, err := s.Lim(); err != nil {
						return nil, err
					}
					specs = append(specs, s)
					mainHas[s.ID] = true
				}
			}
		}
	}
	if *doCurves {
		skip := func(m string, l int64, n int) bool {
			return mainHas[accuracy.NewSpec(m, accuracy.AlgoFixed, accuracy.WorkUniform, l, n, *windows).ID]
		}
		for _, s := range accuracy.CurveSpecs(*curveWindows, skip) {
			if re == nil || re.MatchString(s.ID) {
				specs = append(specs, s)
			}
		}
	}
	return specs, nil
}

func split(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

// runOne runs one spec: N node processes, then the analysis.
func runOne(ctx context.Context, rc *redis.Client, s accuracy.Spec) (*accuracy.Result, error) {
	dir := filepath.Join(*outDir, s.ID)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	if err := rc.FlushAll(ctx).Err(); err != nil {
		return nil, err
	}
	if err := rc.ConfigResetStat(ctx).Err(); err != nil {
		return nil, err
	}
	before, err := accuracy.ReadRedisStats(ctx, rc)
	if err != nil {
		return nil, err
	}
	if s.Mode == accuracy.ModeLocal {
		s.Redis = ""
	}
	// A common start, a little ahead and on a window boundary, so that every
	// node's windows are Redis's.
	W := s.W()
	s.T0 = (time.Now().Add(700*time.Millisecond).UnixMicro()/W + 1) * W
	js, err := json.Marshal(s)
	if err != nil {
		return nil, err
	}
	env := []string{"GOMAXPROCS=1"}
	for _, e := range os.Environ() {
		if !strings.HasPrefix(e, "GOMAXPROCS=") {
			env = append(env, e)
		}
	}
	procs := make([]*exec.Cmd, s.Nodes)
	var logs []*os.File
	defer func() {
		for _, f := range logs {
			f.Close()
		}
	}()
	for n := range procs {
		out := filepath.Join(dir, "n"+strconv.Itoa(n))
		os.Remove(out + ".rec")
		os.Remove(out + ".json")
		lf, err := os.Create(out + ".log")
		if err != nil {
			return nil, err
		}
		logs = append(logs, lf)
		c := exec.Command(*nodeBin, "-spec", string(js), "-node", strconv.Itoa(n), "-out", out)
		c.Env, c.Stdout, c.Stderr = env, lf, lf
		c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		if err := c.Start(); err != nil {
			killAll(procs)
			return nil, err
		}
		procs[n] = c
	}
	// Wait for them, killing them all (by PID) on a deadline or an
	// interrupt.
	done := make(chan error, len(procs))
	for n, c := range procs {
		go func() {
			err := c.Wait()
			if err != nil {
				err = fmt.Errorf("node %d: %w (see %s)", n, err, filepath.Join(dir, fmt.Sprintf("n%d.log", n)))
			}
			done <- err
		}()
	}
	limit := time.Until(time.UnixMicro(s.T0)) + s.Duration() + 30*time.Second
	timer := time.NewTimer(limit)
	defer timer.Stop()
	var firstErr error
	for range procs {
		select {
		case err := <-done:
			if err != nil && firstErr == nil {
				firstErr = err
			}
		case <-timer.C:
			killAll(procs)
			return nil, fmt.Errorf("nodes still running after %v: killed", limit.Round(time.Second))
		case <-ctx.Done():
			killAll(procs)
			return nil, ctx.Err()
		}
	}
	if firstErr != nil {
		return nil, firstErr
	}
	after, err := accuracy.ReadRedisStats(ctx, rc)
	if err != nil {
		return nil, err
	}
	after.CPU -= before.CPU
	res, err := accuracy.Analyze(s, dir, after, s.Duration())
	if err != nil {
		return nil, err
	}
	if !*keep {
		for n := range s.Nodes {
			os.Remove(filepath.Join(dir, fmt.Sprintf("n%d.rec", n)))
		}
	}
	return res, nil
}

func killAll(procs []*exec.Cmd) {
	for _, c := range procs {
		if c != nil && c.Process != nil {
			c.Process.Kill()
		}
	}
}

// report prints the tables and writes the document and plots.
func report(meta accuracy.Meta, results []*accuracy.Result) error {
	sorted := accuracy.Sorted(results)
	var mainRes, curveRes []*accuracy.Result
	for _, r := range sorted {
		if r.Spec.Set == accuracy.SetMain {
			mainRes = append(mainRes, r)
		} else {
			curveRes = append(curveRes, r)
		}
	}
	fmt.Println("== accuracy: main table (N processes against one redis-server; over-admission per measured window)")
	fmt.Print(accuracy.Table(mainRes))
	fmt.Println()
	fmt.Println("== targets (N = 8, hybrid)")
	fmt.Print(accuracy.ChecksText(accuracy.Targets(results)))
	if len(curveRes) > 0 {
		fmt.Println()
		fmt.Println("== curves: uniform workload, 10 × L, fixed window")
		fmt.Print(accuracy.Table(accuracy.CurveResults(results)))
	}
	var imgs []string
	if *imgDir != "" {
		if err := os.MkdirAll(*imgDir, 0o755); err != nil {
			return err
		}
		over, fr, sc := accuracy.CurveCharts(results)
		for name, c := range map[string]accuracy.Chart{"over-admission": over, "false-rejections": fr, "scripts": sc} {
			p := filepath.Join(*imgDir, "accuracy-"+name+".svg")
			if err := os.WriteFile(p, []byte(c.SVG()), 0o644); err != nil {
				return err
			}
			imgs = append(imgs, p)
		}
		fmt.Println()
		fmt.Println("plots:", strings.Join(imgs, " "))
	}
	if *docPath != "" {
		md := accuracy.Markdown(meta, results)
		if err := os.WriteFile(*docPath, []byte(md), 0o644); err != nil {
			return err
		}
		fmt.Println("document:", *docPath)
	}
	return nil
}

// server is a private redis-server.
type server struct {
	addr string
	cmd  *exec.Cmd
	once sync.Once
}

func startRedis(dir string) (*server, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, errors.New("redis-server is not on PATH: install it (scripts/redis.sh ensure) or pass -redis")
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	rdir := filepath.Join(dir, "redis")
	if err := os.MkdirAll(rdir, 0o755); err != nil {
		return nil, err
	}
	logf, err := os.Create(filepath.Join(rdir, "redis.log"))
	if err != nil {
		return nil, err
	}
	c := exec.Command(bin, "--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
		"--dir", rdir, "--protected-mode", "no")
	c.Stdout, c.Stderr = logf, logf
	c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := c.Start(); err != nil {
		return nil, err
	}
	s := &server{addr: "127.0.0.1:" + strconv.Itoa(port), cmd: c}
	rc := redis.NewClient(&redis.Options{Addr: s.addr, MaxRetries: -1, DialTimeout: 100 * time.Millisecond})
	defer rc.Close()
	for i := 0; ; i++ {
		if rc.Ping(context.Background()).Err() == nil {
			break
		}
		if i > 100 {
			s.stop()
			return nil, errors.New("private redis-server did not answer PING")
		}
		time.Sleep(50 * time.Millisecond)
	}
	fmt.Fprintf(os.Stderr, "accuracy: private redis-server on %s (pid %d)\n", s.addr, c.Process.Pid)
	return s, nil
}

func (s *server) stop() {
	s.once.Do(func() {
		s.cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { s.cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			s.cmd.Process.Kill()
			<-done
		}
	})
}
