// Command idle measures what a Limiter costs a process that asks little of
// it: the CPU (user + system, from getrusage) of a child process holding
// one, over a measured period, beside a Go process that does nothing. The
// cases: a Limiter without Redis, with Redis, with Redis and gossip (one
// peer, run by this command), and the same with one rule asked once a
// second; each with the default clock, and the first with a Clock that
// calls time.Now (no goroutine: the floor). Every case runs -count times,
// the cases of one repetition side by side; the table gives medians.
//
//	idle -d 10s -count 3
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log"
	"log/slog"
	"os"
	"os/exec"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/redis/go-redis/v9"

	"github.com/hybridlimit/hybridlimit/bench/internal/proc"
	"github.com/hybridlimit/hybridlimit/hybrid"
)

// A case is what a child process holds while it is measured.
type idleCase struct {
	name  string
	flags []string // what the child builds: -redis, -gossip, -rule, -system
}

var cases = []idleCase{
	{"a Go process that does nothing", nil},
	{"Limiter, no Redis, time.Now clock", []string{"-system"}},
	{"Limiter, no Redis", nil},
	{"Limiter, Redis", []string{"-redis"}},
	{"Limiter, Redis, gossip", []string{"-redis", "-gossip"}},
	{"one rule at 1 request/s, Redis", []string{"-redis", "-rule"}},
	{"one rule at 1 request/s, Redis, gossip", []string{"-redis", "-gossip", "-rule"}},
}

// quiet drops the Limiters' logs: members come and go between repetitions.
var quiet = slog.New(slog.DiscardHandler)

// gossipKey encrypts the benchmark's gossip (AES-128).
var gossipKey = []byte("idle-benchmark-k")

func main() {
	var (
		child    = flag.Bool("child", false, "run one case (internal)")
		name     = flag.String("name", "", "child: its gossip member name")
		limiter  = flag.Bool("limiter", false, "child: hold a Limiter")
		addr     = flag.String("redis", "", "child: the Redis address; parent: use this Redis instead of starting one")
		seed     = flag.String("seed", "", "child: a gossip peer to join")
		rule     = flag.Bool("rule", false, "child: one rule asked once a second")
		system   = flag.Bool("system", false, "child: a Clock that calls time.Now")
		d        = flag.Duration("d", 10*time.Second, "the measured period")
		count    = flag.Int("count", 3, "repetitions")
		redisDir = flag.String("dir", "", "parent: where the private redis-server keeps its files (default a temporary directory)")
	)
	flag.Parse()
	log.SetFlags(0)
	if *child {
		runChild(*name, *limiter, *addr, *seed, *rule, *system, *d)
		return
	}
	if err := parent(*addr, *redisDir, *d, *count); err != nil {
		log.Fatalf("idle: %v", err)
	}
}

// parent runs every case count times, each for d, against addr or a
// private redis-server (its files in redisDir), and prints the table.
func parent(addr, redisDir string, d time.Duration, count int) error {
	if addr == "" {
		a, stop, err := proc.Redis(redisDir)
		if err != nil {
			return fmt.Errorf("start redis-server: %w", err)
		}
		defer stop()
		addr = a
	}
	peer, err := gossipPeer()
	if err != nil {
		return fmt.Errorf("the gossip peer: %w", err)
	}
	defer peer.Close()
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	cpu := make([][]time.Duration, len(cases))
	var failed []error
	for i := range count {
		fmt.Fprintf(os.Stderr, "repetition %d of %d: %d cases side by side, %v each\n", i+1, count, len(cases), d)
		var wg sync.WaitGroup
		var mu sync.Mutex
		for j, c := range cases {
			args := []string{"-child", "-d", d.String(), "-name", fmt.Sprintf("case-%d-%d", i, j)}
			if j > 0 {
				args = append(args, "-limiter")
			}
			for _, f := range c.flags {
				switch f {
				case "-redis":
					args = append(args, "-redis", addr)
				case "-gossip":
					args = append(args, "-seed", peer.Stats().GossipAddr)
				default:
					args = append(args, f)
				}
			}
			wg.Go(func() {
				got, err := measure(exe, args)
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					failed = append(failed, fmt.Errorf("%s: %w", c.name, err))
					return
				}
				cpu[j] = append(cpu[j], got)
			})
		}
		wg.Wait()
		if len(failed) > 0 {
			return errors.Join(failed...)
		}
	}
	fmt.Printf("CPU over %v (user + system, median of %d; the Limiter's own: minus the Go process's)\n\n", d, count)
	fmt.Println("| case | CPU | % of a core | the Limiter's own |")
	fmt.Println("|---|---|---|---|")
	base := median(cpu[0])
	for j, c := range cases {
		m := median(cpu[j])
		own := "–"
		if j > 0 {
			own = fmt.Sprintf("%.1f ms", float64(m-base)/1e6)
		}
		fmt.Printf("| %s | %.1f ms | %.2f%% | %s |\n", c.name, float64(m)/1e6, 100*float64(m)/float64(d), own)
	}
	return nil
}

// measure runs the child with args and returns the CPU it reports.
func measure(exe string, args []string) (time.Duration, error) {
	cmd := exec.Command(exe, args...)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return 0, err
	}
	if err := cmd.Start(); err != nil {
		return 0, err
	}
	var r struct{ CPU time.Duration }
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			return 0, fmt.Errorf("child wrote %q: %w", sc.Text(), err)
		}
	}
	if err := cmd.Wait(); err != nil {
		return 0, err
	}
	return r.CPU, nil
}

// runChild builds its case, lets it settle for a second, and writes the
// CPU it used over d.
func runChild(name string, withLimiter bool, addr, seed string, rule, system bool, d time.Duration) {
	if withLimiter {
		cfg := hybrid.Config{Logger: quiet}
		if system {
			cfg.Clock = systemClock{}
		}
		if addr != "" {
			cfg.Redis = redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
		}
		if seed != "" {
			cfg.Gossip = gossipConfig(name, seed)
		}
		l, err := hybrid.New(cfg)
		if err != nil {
			log.Fatalf("idle: %v", err)
		}
		defer l.Close()
		if rule {
			r, err := l.Register(hybrid.Rule{Name: "r", Limit: hybrid.Limit{Algorithm: hybrid.FixedWindow, Quota: 100, Window: time.Second}})
			if err != nil {
				log.Fatalf("idle: %v", err)
			}
			go func() {
				for range time.Tick(time.Second) {
					l.Allow(context.Background(), r, "k")
				}
			}()
		}
	}
	time.Sleep(time.Second)
	t0 := cpuTime()
	time.Sleep(d)
	if err := json.NewEncoder(os.Stdout).Encode(struct{ CPU time.Duration }{cpuTime() - t0}); err != nil {
		log.Fatal(err)
	}
}

// cpuTime is the process's user + system CPU so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		log.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// gossipPeer is a Limiter that only gossips: the children's one peer.
func gossipPeer() (*hybrid.Limiter, error) {
	return hybrid.New(hybrid.Config{Gossip: gossipConfig("peer"), Logger: quiet})
}

// gossipConfig is the gossip of a member named name: memberlist's LAN
// defaults on loopback, what a user gets.
func gossipConfig(name string, seeds ...string) *hybrid.GossipConfig {
	ml := memberlist.DefaultLANConfig()
	ml.Name, ml.BindAddr, ml.BindPort = name, "127.0.0.1", 0
	return &hybrid.GossipConfig{Memberlist: ml, Seeds: seeds, Keys: [][]byte{gossipKey}, Logger: quiet}
}

// systemClock calls time.Now: no goroutine.
type systemClock struct{}

func (systemClock) Now() time.Time { return time.Now() }

func median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}
