// Command accuracy runs the multi-process accuracy benchmark (package
// bench/accuracy) and prints its table: N node processes (cmd/accnode, each
// with GOMAXPROCS=1) against one redis-server, per mode, workload and
// algorithm, one run after the other; then the accuracy targets checked
// against the hybrid runs, the api-users, outage and api-patterns tables,
// and the curves over L and N.
//
//	go build -o accnode ./cmd/accnode
//	go run ./cmd/accuracy -node ./accnode [-doc ../docs/accuracy-results.md -img ../docs/img]
//
// It starts a private redis-server (persistence off, flushed and its
// statistics reset before each run) when one is on PATH, so INFO
// commandstats and CPU are the run's alone; -redis uses a server of yours
// instead, which it flushes too. The api-users rows marked (cluster)
// (-users-cluster) run against a private three-master Redis Cluster,
// started on free loopback ports before the first of them and killed by
// PID after the last, its figures summed over the masters. -render rebuilds the tables, document and
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
	"github.com/hybridlimit/hybridlimit/bench/internal/proc"
)

var (
	nodeBin      = flag.String("node", "", "the accnode binary (go build ./cmd/accnode)")
	outDir       = flag.String("out", "../.run/accuracy", "directory for the runs' files and results.json")
	redisAddr    = flag.String("redis", "", "use this Redis server (flushed before each run) instead of a private redis-server")
	windows      = flag.Int("windows", 30, "measured 1 s windows per run of the main table (after one warm-up window)")
	curveWindows = flag.Int("curve-windows", 10, "measured windows per run of the curves")
	nodes        = flag.Int("nodes", 8, "N of the main table")
	algos        = flag.String("algos", "fixed,gcra", "algorithms of the main table (fixed, gcra, counter, token, leaky)")
	modes        = flag.String("modes", "central,hybrid,naive,local", "modes of the main table")
	works        = flag.String("workloads", strings.Join(accuracy.Workloads, ","), "workloads of the main table (also: "+accuracy.WorkColdSkewed+")")
	doMain       = flag.Bool("main", true, "run the main table")
	doCurves     = flag.Bool("curves", true, "run the curves (L × N grid)")
	only         = flag.String("only", "", "run only the runs whose id matches this regexp")
	docPath      = flag.String("doc", "", "write the results as Markdown to this file")
	docSection   = flag.String("doc-section", "", "with -doc: put this partial run into the document as its own section (titled so), keeping the rest")
	imgDir       = flag.String("img", "", "write the curves' SVG plots to this directory")
	keep         = flag.Bool("keep", false, "keep the decision records (.rec) of every run")
	zipfRate     = flag.Float64("zipf-rate", accuracy.ZipfRate, "total offered rate of the Zipf workload, per second")
	noColdStart  = flag.Bool("no-cold-start", false, "diagnostic: turn the hybrid's cold-start allowance off (SyncConfig.NoColdStart)")
	render       = flag.Bool("render", false, "render -out/results.json again; run nothing")
	mergeFrom    = flag.String("merge", "", "add the results of an earlier results.json that this run did not measure again (same run id and algorithm)")

	moreAlgos = flag.String("more-algos", "counter,token,leaky", "the other leasable algorithms of the main table, run on -more-workloads in -more-modes")
	moreWorks = flag.String("more-workloads", "uniform,under", "workloads of -more-algos")
	moreModes = flag.String("more-modes", "central,hybrid", "modes of -more-algos")

	doUsers      = flag.Bool("users", true, "run the api-users workload (its own table)")
	usersKeys    = flag.Int("users-keys", accuracy.UsersKeys, "api-users: users (keys); the offered rate grows with them")
	usersWindows = flag.Int("users-windows", accuracy.UsersWindows, "api-users: measured 10 s windows per run")
	usersModes   = flag.String("users-modes", strings.Join(accuracy.UsersModes, ","), "api-users: modes")

	usersCluster      = flag.Bool("users-cluster", true, "api-users: also run the workload against a three-master Redis Cluster it starts (rows marked (cluster), Redis CPU summed over the masters)")
	usersClusterModes = flag.String("users-cluster-modes", strings.Join(accuracy.UsersClusterModes, ","), "api-users: modes of the Cluster rows (central, hybrid, naive)")

	doOutage      = flag.Bool("outage", true, "run the api-users workload through a Redis outage (needs the private redis-server)")
	outageKeys    = flag.Int("outage-keys", 20000, "outage run: users (keys); 20,000 over 6 windows offers the api-users run's rate")
	outageWindows = flag.Int("outage-windows", 5, "outage run: measured 10 s windows; Redis is killed at the start of the second")
	outageDown    = flag.Duration("outage-down", 10*time.Second, "outage run: how long Redis stays down")
	outageModes   = flag.String("outage-modes", "central,hybrid", "outage run: modes")

	doPatterns      = flag.Bool("patterns", true, "run the api-patterns workload (burst sessions, two rules per request, retries at RetryAfter, a limit change; its own table)")
	patternsWindows = flag.Int("patterns-windows", accuracy.PatWindows, "api-patterns: measured 10 s windows per run")
	patternsModes   = flag.String("patterns-modes", strings.Join(accuracy.PatternsModes, ","), "api-patterns: modes (hybrid, central)")
	patternsScale   = flag.Float64("patterns-scale", 1, "api-patterns: a multiple of each pattern's sessions per window")
	apiWait         = flag.String("api-wait", "", "the hybrid rules' wait for a lease (Rule.Wait) in the api-users and api-patterns runs: empty for the library's default, or "+strings.Join(accuracy.WaitModes, ", "))

	short = flag.Bool("short", false, "a quick check (about 9 minutes): 5 windows, no curves, fewer main-table runs, api-users with 20,000 users over 5 windows and no Cluster rows, api-patterns over 3 windows; flags given explicitly win")
)

// shortDefaults are the flag values -short sets, unless given explicitly.
var shortDefaults = map[string]string{
	"windows": "5", "curves": "false", "workloads": "uniform,under", "modes": "central,hybrid",
	"more-workloads": "under", "users-keys": "20000", "users-windows": "5", "patterns-windows": "3",
	"users-cluster": "false",
}

func main() {
	flag.Parse()
	if *short {
		set := map[string]bool{}
		flag.Visit(func(f *flag.Flag) { set[f.Name] = true })
		for name, v := range shortDefaults {
			if !set[name] {
				flag.Set(name, v)
			}
		}
	}
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
	if err := accuracy.CheckWait(*apiWait); err != nil {
		return fmt.Errorf("-api-wait: %w", err)
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
	var srv *server
	if addr == "" {
		srv, err = startRedis(*outDir)
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
	// The Cluster runs only while its rows do: started before the first,
	// stopped after the last.
	var cl *cluster
	var clErr error
	lastCluster := -1
	for i, s := range specs {
		if s.Cluster {
			lastCluster = i
		}
	}
	defer func() {
		if cl != nil {
			cl.stop()
		}
	}()
	for i, s := range specs {
		if ctx.Err() != nil {
			break
		}
		s.Redis = addr
		servers := []*redis.Client{rc}
		if s.Cluster {
			if cl == nil && clErr == nil {
				cl, clErr = startCluster(ctx, *outDir)
			}
			if clErr != nil {
				failed++
				fmt.Fprintf(os.Stderr, "[%d/%d] %s: FAILED: %v\n", i+1, len(specs), s.ID, clErr)
				continue
			}
			s.Redis, servers = strings.Join(cl.addrs, ","), cl.masters
		}
		s.NoColdStart = *noColdStart
		if s.Set == accuracy.SetUsers || s.Set == accuracy.SetOutage || s.Set == accuracy.SetPatterns {
			s.Wait = *apiWait
		}
		t := time.Now()
		if s.Outage() && srv == nil {
			fmt.Fprintf(os.Stderr, "[%d/%d] %s: skipped: the outage run kills the private redis-server, not one given with -redis\n", i+1, len(specs), s.ID)
			continue
		}
		rs, err := runOne(ctx, servers, srv, s)
		if i == lastCluster && cl != nil {
			cl.stop()
		}
		if err != nil {
			failed++
			fmt.Fprintf(os.Stderr, "[%d/%d] %s: FAILED: %v\n", i+1, len(specs), s.ID, err)
			continue
		}
		results = append(results, rs...)
		for _, r := range rs {
			if r.Patterns != nil {
				fmt.Fprintf(os.Stderr, "[%d/%d] %s ran %s: false refusals", i+1, len(specs), s.ID, r.ModeRun)
				for _, pr := range r.Patterns {
					fmt.Fprintf(os.Stderr, " %s/%s %.3f%%", pr.Pattern, pr.Algo, pr.FalseRefusalPct)
				}
				fmt.Fprintf(os.Stderr, ", late p99 %.1f ms, load %.1f: %s (%.0f s)\n", r.Lateness.P99, r.LoadAvg, r.Verdict(), time.Since(t).Seconds())
				continue
			}
			if u := r.Users; u != nil {
				// The api-users table's own measures: users under their
				// limit, and users over it after their first window.
				fmt.Fprintf(os.Stderr, "[%d/%d] %s %s ran %s: users under the limit false rej %.3f%%, over later max %s, first window max %s, lat p99 %.2f µs, load %.1f: %s (%.0f s)\n",
					i+1, len(specs), s.ID, r.Spec.Algo, r.ModeRun, u.UnderFalseRejPct, accuracy.Pct(u.OverLater.Max), accuracy.Pct(u.OverFirst.Max),
					float64(r.Latency.P99), r.LoadAvg, r.Verdict(), time.Since(t).Seconds())
				continue
			}
			fmt.Fprintf(os.Stderr, "[%d/%d] %s %s ran %s: over max %s, false rej %.2f%%, lost %.2f%%, scripts/dec %s, lat p99 %.2f µs, sync p99 %.0f ms, rate off %.2f%%, load %.1f: %s (%.0f s)\n",
				i+1, len(specs), s.ID, r.Spec.Algo, r.ModeRun, accuracy.Pct(r.Over.Max), r.FalseRejPct, r.LostPct, accuracy.Num(r.ScriptsPerDecision),
				float64(r.Latency.P99), r.Sync.P99, 100*r.RateOff, r.LoadAvg, r.Verdict(), time.Since(t).Seconds())
		}
	}
	meta.TotalSeconds = time.Since(started).Seconds()
	if *mergeFrom != "" {
		b, err := os.ReadFile(*mergeFrom)
		if err != nil {
			return fmt.Errorf("-merge: %w", err)
		}
		var f file
		if err := json.Unmarshal(b, &f); err != nil {
			return fmt.Errorf("-merge: %s: %w", *mergeFrom, err)
		}
		have := map[[2]string]bool{}
		for _, r := range results {
			have[[2]string{r.Spec.ID, r.Spec.Algo}] = true
		}
		for _, r := range f.Results {
			if !have[[2]string{r.Spec.ID, r.Spec.Algo}] {
				results = append(results, r)
			}
		}
		meta.Command += " (with the results of " + *mergeFrom + ", measured " + f.Meta.Date + ")"
	}
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
	addMain := func(algos, works, modes string) error {
		for _, a := range split(algos) {
			for _, w := range split(works) {
				if !slices.Contains(accuracy.AllWorkloads, w) {
					return fmt.Errorf("-workloads: unknown workload %q (known: %s)", w, strings.Join(accuracy.AllWorkloads, ", "))
				}
				for _, m := range split(modes) {
					s := accuracy.NewSpec(m, a, w, accuracy.DefaultLimit, *nodes, *windows)
					if mainHas[s.ID] || (re != nil && !re.MatchString(s.ID)) {
						continue
					}
					if m == accuracy.ModeNaive && a != accuracy.AlgoFixed && a != accuracy.AlgoGCRA {
						continue // the naive baseline is built for those two only
					}
					if _, err := s.Lim(); err != nil {
						return err
					}
					specs = append(specs, s)
					mainHas[s.ID] = true
				}
			}
		}
		return nil
	}
	if *doMain {
		if err := addMain(*algos, *works, *modes); err != nil {
			return nil, err
		}
		if err := addMain(*moreAlgos, *moreWorks, *moreModes); err != nil {
			return nil, err
		}
	}
	if *doUsers {
		for _, m := range split(*usersModes) {
			s := accuracy.NewUsersSpec(m, *usersKeys, *usersWindows)
			if re == nil || re.MatchString(s.ID) {
				specs = append(specs, s)
			}
		}
	}
	if *doUsers && *usersCluster {
		for _, m := range split(*usersClusterModes) {
			if !slices.Contains(accuracy.UsersClusterModes, m) {
				return nil, fmt.Errorf("-users-cluster-modes: %q: the Cluster rows run %s", m, strings.Join(accuracy.UsersClusterModes, ", "))
			}
			s := accuracy.NewUsersClusterSpec(m, *usersKeys, *usersWindows)
			if re == nil || re.MatchString(s.ID) {
				specs = append(specs, s)
			}
		}
	}
	if *doOutage {
		for _, m := range split(*outageModes) {
			s := accuracy.NewOutageSpec(m, *outageKeys, *outageWindows, *outageDown)
			if re == nil || re.MatchString(s.ID) {
				specs = append(specs, s)
			}
		}
	}
	if *doPatterns {
		for _, m := range split(*patternsModes) {
			if m != accuracy.ModeHybrid && m != accuracy.ModeCentral {
				return nil, fmt.Errorf("-patterns-modes: %q: the api-patterns workload runs hybrid or central", m)
			}
			s := accuracy.NewPatternsSpec(m, *patternsWindows)
			s.PatScale = *patternsScale
			if re == nil || re.MatchString(s.ID) {
				specs = append(specs, s)
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

// runOne runs one spec: N node processes, then the analysis, one Result per
// algorithm the nodes decided. servers are the Redis servers the run uses
// (a Cluster's masters), flushed and their statistics reset first; their
// figures are summed. An outage run kills srv (SIGKILL) KillAt after T0 and
// restarts it Down later.
func runOne(ctx context.Context, servers []*redis.Client, srv *server, s accuracy.Spec) ([]*accuracy.Result, error) {
	dir := filepath.Join(*outDir, s.ID)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	for _, rc := range servers {
		if err := rc.FlushAll(ctx).Err(); err != nil {
			return nil, err
		}
		if err := rc.ConfigResetStat(ctx).Err(); err != nil {
			return nil, err
		}
	}
	before, err := accuracy.SumRedisStats(ctx, servers)
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
		for _, a := range s.RuleAlgos() {
			os.Remove(s.File(dir, n, a) + ".rec")
			os.Remove(s.File(dir, n, a) + ".pat")
			os.Remove(s.File(dir, n, a) + ".json")
		}
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
	outage := make(chan error, 1)
	if s.Outage() {
		go func() { outage <- srv.outage(time.UnixMicro(s.T0).Add(s.KillAt), s.Down) }()
	} else {
		outage <- nil
	}
	limit := time.Until(time.UnixMicro(s.T0)) + s.Duration() + 60*time.Second
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
			// SIGQUIT first: a Go process prints its goroutines' stacks
			// (into its log) and exits.
			for _, c := range procs {
				if c != nil && c.Process != nil {
					c.Process.Signal(syscall.SIGQUIT)
				}
			}
			time.Sleep(2 * time.Second)
			killAll(procs)
			return nil, fmt.Errorf("nodes still running after %v: stacks in their logs, killed", limit.Round(time.Second))
		case <-ctx.Done():
			killAll(procs)
			return nil, ctx.Err()
		}
	}
	if err := <-outage; err != nil && firstErr == nil {
		firstErr = err
	}
	if firstErr != nil {
		return nil, firstErr
	}
	after, err := accuracy.SumRedisStats(ctx, servers)
	if err != nil {
		return nil, err
	}
	after.CPU -= before.CPU
	if s.Outage() {
		after = accuracy.RedisStats{} // a new server: its figures are not the run's
	}
	var out []*accuracy.Result
	if s.Workload == accuracy.WorkPatterns {
		res, err := accuracy.AnalyzePatterns(s, dir, after, s.Duration())
		if err != nil {
			return nil, err
		}
		out = append(out, res)
	} else {
		for _, a := range s.RuleAlgos() {
			res, err := accuracy.Analyze(s.ForAlgo(a), dir, after, s.Duration())
			if err != nil {
				return nil, err
			}
			out = append(out, res)
		}
	}
	if !*keep {
		for n := range s.Nodes {
			for _, a := range s.RuleAlgos() {
				os.Remove(s.File(dir, n, a) + ".rec")
				os.Remove(s.File(dir, n, a) + ".pat")
			}
		}
	}
	return out, nil
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
		switch r.Spec.Set {
		case accuracy.SetMain:
			mainRes = append(mainRes, r)
		case accuracy.SetCurve:
			curveRes = append(curveRes, r)
		}
	}
	fmt.Println("== accuracy: main table (N processes against one redis-server; over-admission per measured window)")
	fmt.Print(accuracy.Table(mainRes))
	fmt.Println()
	fmt.Println("== targets (N = 8, hybrid)")
	fmt.Print(accuracy.ChecksText(accuracy.Targets(results)))
	if ut, ot := accuracy.UsersTables(results); ut != "" || ot != "" {
		if ut != "" {
			fmt.Println()
			fmt.Print("== api-users: users limited to 100 per 10 s, 1% at 10 × it, N = 8, each request to a random node")
			if hasCluster(results) {
				fmt.Print("; rows marked (cluster): the same against a three-master Redis Cluster, Redis CPU summed over the masters, vs central against central (cluster)")
			}
			fmt.Println()
			fmt.Print(ut)
		}
		if ot != "" {
			fmt.Println()
			fmt.Println("== outage: the api-users workload, Redis killed (SIGKILL) and restarted")
			fmt.Print(ot)
		}
		fmt.Println()
		fmt.Println("== api-users and outage targets")
		fmt.Print(accuracy.ChecksText(accuracy.UsersTargets(results)))
	}
	if pt := accuracy.PatternsTable(results); pt != "" {
		fmt.Println()
		fmt.Println("== api-patterns: false refusals against the exact replay, hybrid beside central on the same planned arrivals, N = 8")
		fmt.Print(pt)
		fmt.Println()
		fmt.Println("== api-patterns targets")
		fmt.Print(accuracy.ChecksText(accuracy.PatternsTargets(results)))
	}
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
	if *docPath != "" && *docSection != "" {
		old, err := os.ReadFile(*docPath)
		if err != nil {
			return err
		}
		md := accuracy.SpliceSection(string(old), slug(*docSection), accuracy.Section(meta, *docSection, results))
		if err := os.WriteFile(*docPath, []byte(md), 0o644); err != nil {
			return err
		}
		fmt.Println("document:", *docPath, "(section", *docSection+")")
	} else if *docPath != "" {
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
	args []string
	logf *os.File
	mu   sync.Mutex // guards cmd (replaced by a restart)
	cmd  *exec.Cmd
	once sync.Once
}

// outage kills the server with SIGKILL (by its PID) at at, and starts a new
// one on the same port down later: an empty one, as after a crash without
// persistence.
func (s *server) outage(at time.Time, down time.Duration) error {
	time.Sleep(time.Until(at))
	s.mu.Lock()
	old := s.cmd
	s.mu.Unlock()
	if err := old.Process.Signal(syscall.SIGKILL); err != nil {
		return fmt.Errorf("outage: kill redis-server (pid %d): %w", old.Process.Pid, err)
	}
	old.Wait()
	fmt.Fprintf(os.Stderr, "accuracy: redis-server (pid %d) killed\n", old.Process.Pid)
	time.Sleep(time.Until(at.Add(down)))
	c, err := s.start()
	if err != nil {
		return fmt.Errorf("outage: restart redis-server: %w", err)
	}
	s.mu.Lock()
	s.cmd = c
	s.mu.Unlock()
	fmt.Fprintf(os.Stderr, "accuracy: redis-server restarted (pid %d)\n", c.Process.Pid)
	return s.waitReady()
}

func (s *server) start() (*exec.Cmd, error) {
	c := exec.Command(s.args[0], s.args[1:]...)
	c.Stdout, c.Stderr = s.logf, s.logf
	c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	return c, c.Start()
}

func (s *server) waitReady() error {
	rc := redis.NewClient(&redis.Options{Addr: s.addr, MaxRetries: -1, DialTimeout: 100 * time.Millisecond})
	defer rc.Close()
	for i := 0; ; i++ {
		if rc.Ping(context.Background()).Err() == nil {
			return nil
		}
		if i > 100 {
			return errors.New("private redis-server did not answer PING")
		}
		time.Sleep(50 * time.Millisecond)
	}
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
	s := &server{
		addr: "127.0.0.1:" + strconv.Itoa(port), logf: logf,
		args: []string{bin, "--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", rdir, "--protected-mode", "no"},
	}
	c, err := s.start()
	if err != nil {
		return nil, err
	}
	s.cmd = c
	if err := s.waitReady(); err != nil {
		s.stop()
		return nil, err
	}
	fmt.Fprintf(os.Stderr, "accuracy: private redis-server on %s (pid %d)\n", s.addr, c.Process.Pid)
	return s, nil
}

func (s *server) stop() {
	s.once.Do(func() {
		s.mu.Lock()
		c := s.cmd
		s.mu.Unlock()
		proc.Stop(c, 5*time.Second)
		s.logf.Close()
	})
}

// slug names a document section by its title: lower-case letters and
// digits, dashes between.
func slug(title string) string {
	var b strings.Builder
	dash := false
	for _, r := range strings.ToLower(title) {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' {
			if dash && b.Len() > 0 {
				b.WriteByte('-')
			}
			b.WriteRune(r)
			dash = false
		} else {
			dash = true
		}
	}
	return b.String()
}

// hasCluster reports whether any result ran against a Redis Cluster.
func hasCluster(results []*accuracy.Result) bool {
	return slices.ContainsFunc(results, func(r *accuracy.Result) bool { return r.Spec.Cluster })
}
