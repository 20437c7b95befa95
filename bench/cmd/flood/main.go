// Command flood measures what a flood of distinct keys does to one node: an
// attacker cycling API keys or IPv6 addresses while legitimate users keep
// using the service. Each case runs in a child process holding one
// hybrid.Limiter with one per-key rule (-quota per -window), in local mode
// (no Redis) or hybrid mode (a private redis-server this command starts).
// The child offers -users legitimate keys -user-rate requests/s each, under
// their limit, and -newcomers new legitimate keys a second, open-loop (a
// request that waits delays no other), for three
// phases: -before, then -flood with never-repeating keys at -rates keys/s
// added from 4 goroutines (or as fast as they go, when that is less), then -after.
// At the end of each phase it reports its Go heap (after a collection), its
// RSS, the keys its table holds, its goroutines, the legitimate requests
// refused and why, the flood's keys refused for overflow, the legitimate
// decisions' latency, and Redis's keys and used_memory.
//
//	flood -rates 20000,100000 -algos fixed,gcra -flood 30s
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/redis/go-redis/v9"

	"github.com/hybridlimit/hybridlimit/bench/internal/proc"
	"github.com/hybridlimit/hybridlimit/bench/internal/table"
)

func main() {
	var (
		child  = flag.Bool("child", false, "run one case (internal)")
		mode   = flag.String("mode", "hybrid", "child: local or hybrid")
		algo   = flag.String("algo", "fixed", "child: fixed or gcra")
		rate   = flag.Float64("rate", 20_000, "child: flood keys per second")
		modes  = flag.String("modes", "local,hybrid", "parent: the modes to run, comma-separated")
		algos  = flag.String("algos", "fixed,gcra", "parent: the algorithms to run, comma-separated (fixed, gcra)")
		rates  = flag.String("rates", "20000,100000", "parent: the flood rates to run, keys per second, comma-separated")
		addr   = flag.String("redis", "", "child: the Redis address; parent: use this Redis (flushed before each case) instead of starting one")
		dir    = flag.String("dir", "", "parent: where the private redis-server keeps its files (default a temporary directory)")
		verb   = flag.Bool("v", false, "parent: print each case's figures as it ends")
		params params
	)
	flag.IntVar(&params.Users, "users", 1000, "legitimate keys")
	flag.Float64Var(&params.UserRate, "user-rate", 3, "requests per second of each legitimate key")
	flag.Float64Var(&params.Newcomers, "newcomers", 10, "new legitimate keys per second, one request each")
	flag.Int64Var(&params.Quota, "quota", 100, "the rule's requests per window")
	flag.DurationVar(&params.Window, "window", 10*time.Second, "the rule's window (the GCRA's period)")
	flag.IntVar(&params.MaxKeys, "maxkeys", 0, "hybrid.Config.MaxKeys (0: the default, 1,048,576)")
	flag.DurationVar(&params.Before, "before", 10*time.Second, "the phase before the flood")
	flag.DurationVar(&params.Flood, "flood", 30*time.Second, "the flood")
	flag.DurationVar(&params.After, "after", 30*time.Second, "the phase after the flood")
	flag.Parse()
	log.SetFlags(0)
	if *child {
		params.Mode, params.Algo, params.Rate, params.Redis = *mode, *algo, *rate, *addr
		if err := runChild(params); err != nil {
			log.Fatalf("flood: %v", err)
		}
		return
	}
	if err := parent(params, split(*modes), split(*algos), split(*rates), *addr, *dir, *verb); err != nil {
		log.Fatalf("flood: %v", err)
	}
}

// params is a case: what the parent passes its child as flags.
type params struct {
	Mode, Algo, Redis string
	Rate              float64
	Users             int
	UserRate          float64
	Newcomers         float64
	Quota             int64
	Window            time.Duration
	MaxKeys           int
	Before            time.Duration
	Flood             time.Duration
	After             time.Duration
}

// args are p as the child's flags.
func (p params) args() []string {
	return []string{"-child", "-mode", p.Mode, "-algo", p.Algo, "-rate", fmt.Sprint(p.Rate), "-redis", p.Redis,
		"-users", strconv.Itoa(p.Users), "-user-rate", fmt.Sprint(p.UserRate), "-newcomers", fmt.Sprint(p.Newcomers),
		"-quota", strconv.FormatInt(p.Quota, 10), "-window", p.Window.String(), "-maxkeys", strconv.Itoa(p.MaxKeys),
		"-before", p.Before.String(), "-flood", p.Flood.String(), "-after", p.After.String()}
}

// split is s's comma-separated items, spaces dropped.
func split(s string) []string {
	return strings.FieldsFunc(s, func(r rune) bool { return r == ',' || unicode.IsSpace(r) })
}

// parent runs every case, one at a time, each in a child process, and
// prints the table.
func parent(p params, modes, algos, rates []string, addr, dir string, verbose bool) error {
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	var stop func()
	var results []result
	for _, mode := range modes {
		for _, algo := range algos {
			for _, rs := range rates {
				c := p
				c.Mode, c.Algo, c.Redis = mode, algo, ""
				if c.Rate, err = strconv.ParseFloat(rs, 64); err != nil {
					return fmt.Errorf("-rates: %w", err)
				}
				if mode == "hybrid" {
					if addr == "" && stop == nil {
						if addr, stop, err = proc.Redis(dir); err != nil {
							return fmt.Errorf("start redis-server: %w", err)
						}
						defer stop()
					}
					c.Redis = addr
					if err := flush(addr); err != nil {
						return err
					}
				}
				fmt.Fprintf(os.Stderr, "%s, %s, flood %.0f keys/s: %v + %v + %v\n", mode, algo, c.Rate, c.Before, c.Flood, c.After)
				r, err := runCase(exe, c)
				if err != nil {
					return fmt.Errorf("%s %s %.0f: %w", mode, algo, c.Rate, err)
				}
				results = append(results, r)
				if verbose {
					printTable(os.Stderr, []result{r})
				}
			}
		}
	}
	fmt.Printf("One node, one rule (%d per %v), %d legitimate keys at %g requests/s each and %g new ones a second; MaxKeys %s; phases of %v, %v, %v\n\n",
		p.Quota, p.Window, p.Users, p.UserRate, p.Newcomers, maxKeysText(p.MaxKeys), p.Before, p.Flood, p.After)
	printTable(os.Stdout, results)
	return nil
}

func maxKeysText(n int) string {
	if n == 0 {
		return "1,048,576 (the default)"
	}
	return strconv.Itoa(n)
}

// runCase runs c in a child process and returns what it reports.
func runCase(exe string, c params) (result, error) {
	cmd := exec.Command(exe, c.args()...)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return result{}, err
	}
	if err := cmd.Start(); err != nil {
		return result{}, err
	}
	r := result{Params: c}
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		var ph phase
		if err := json.Unmarshal(sc.Bytes(), &ph); err != nil {
			return result{}, fmt.Errorf("child wrote %q: %w", sc.Text(), err)
		}
		r.Phases = append(r.Phases, ph)
	}
	if err := cmd.Wait(); err != nil {
		return result{}, err
	}
	return r, nil
}

// result is a case and its phases' figures.
type result struct {
	Params params
	Phases []phase
}

func printTable(w *os.File, results []result) {
	rows := [][]string{{"mode, algorithm, flood", "phase", "flood keys/s", "keys held (max)", "Go heap", "RSS (peak)", "goroutines",
		"legitimate refused: overflow / unavailable / no lease / limited (of decided; degraded)", "legitimate p50 / p99 / max; over 10 ms",
		"newcomers refused", "flood refused for overflow", "Redis keys", "Redis used_memory"}}
	for _, r := range results {
		for _, ph := range r.Phases {
			c := ph.Legit
			flood, redisKeys, redisMem := "–", "–", "–"
			if ph.Flood.Decided > 0 {
				flood = fmt.Sprintf("%.0f", float64(ph.Flood.Decided)/ph.Seconds)
			}
			if r.Params.Mode == "hybrid" {
				redisKeys, redisMem = fmt.Sprint(ph.RedisKeys), mib(ph.RedisMem)
			}
			rows = append(rows, []string{
				fmt.Sprintf("%s, %s, %.0f/s", r.Params.Mode, r.Params.Algo, r.Params.Rate), ph.Name, flood,
				fmt.Sprintf("%d (%d)", ph.Keys, ph.MaxKeysSeen), mib(ph.Heap), fmt.Sprintf("%s (%s)", mib(ph.RSS), mib(ph.PeakRSS)),
				strconv.Itoa(ph.Goroutines),
				fmt.Sprintf("%d / %d / %d / %d (of %d; %d)", c.Reasons[reasonOverflow], c.Reasons[reasonUnavailable], c.Reasons[reasonNoLease], c.Reasons[reasonLimited], c.Decided, c.Degraded),
				fmt.Sprintf("%s / %s / %s; %d", dur(ph.P50), dur(ph.P99), dur(ph.Max), ph.Slow),
				refusedText(ph.Newcomers, false),
				refusedText(ph.Flood, true),
				redisKeys, redisMem,
			})
		}
	}
	table.Print(w, rows, true)
}

// refusedText is how many of c's decisions were refused (for overflow
// only, when overflow), of how many.
func refusedText(c counts, overflow bool) string {
	if c.Decided == 0 {
		return "–"
	}
	n := c.Decided - c.Admitted
	if overflow {
		n = c.Reasons[reasonOverflow]
	}
	return fmt.Sprintf("%d of %d (%.1f%%)", n, c.Decided, 100*float64(n)/float64(c.Decided))
}

func mib(b int64) string { return fmt.Sprintf("%.0f MiB", float64(b)/(1<<20)) }

// flush empties the Redis at addr: each case starts without the last one's
// keys.
func flush(addr string) error {
	rc := redis.NewClient(&redis.Options{Addr: addr})
	defer rc.Close()
	return rc.FlushAll(context.Background()).Err()
}

// dur is d in µs below a millisecond, else in ms, to a tenth.
func dur(d time.Duration) string {
	if d < time.Millisecond {
		return fmt.Sprintf("%.1f µs", float64(d)/1e3)
	}
	return fmt.Sprintf("%.1f ms", float64(d)/1e6)
}
