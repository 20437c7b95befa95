package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hybridlimit/hybridlimit/hybrid"
	"github.com/hybridlimit/hybridlimit/local"
)

// The reasons the table names.
const (
	reasonOverflow    = local.ReasonOverflow
	reasonUnavailable = local.ReasonUnavailable
	reasonNoLease     = local.ReasonNoLease
	reasonLimited     = local.ReasonLimited
)

// phase is what the child reports at the end of a phase.
type phase struct {
	Name    string
	Seconds float64
	// Counts of the phase's decisions.
	Legit, Newcomers, Flood counts
	// Legitimate decisions' latency, and how many took over 10 ms.
	P50, P99, Max time.Duration
	Slow          int
	// At the phase's end: the Go heap in use after a collection, the
	// process's RSS and its peak so far (VmHWM), the keys held and the most
	// seen during the phase (sampled each second), the goroutines.
	Heap, RSS, PeakRSS   int64
	Keys, MaxKeysSeen    int
	Goroutines           int
	RedisKeys, RedisMem  int64
	StatsBytes           int64
	FloodOffered, Behind int64
}

// counts are decisions by reason.
type counts struct {
	Decided, Admitted, Degraded int64
	Reasons                     [8]int64 // by local.Reason
}

// tally counts one phase's decisions of one stream; the drivers add to it.
type tally struct {
	decided, admitted, degraded atomic.Int64
	reasons                     [8]atomic.Int64
}

func (t *tally) add(d hybrid.Decision) {
	t.decided.Add(1)
	if d.Allowed() {
		t.admitted.Add(1)
	}
	if d.Degraded() {
		t.degraded.Add(1)
	}
	if r := d.Reason(); int(r) < len(t.reasons) {
		t.reasons[r].Add(1)
	}
}

func (t *tally) counts() counts {
	c := counts{Decided: t.decided.Load(), Admitted: t.admitted.Load(), Degraded: t.degraded.Load()}
	for i := range t.reasons {
		c.Reasons[i] = t.reasons[i].Load()
	}
	return c
}

var phaseNames = []string{"before", "flood", "after"}

// load is the requests a case offers and what became of them, by phase.
// The legitimate requests and the newcomers' are open-loop: each runs in a
// goroutine of its own, launched on schedule, so that one that waits delays
// no other (and no user sends faster to catch up).
type load struct {
	l *hybrid.Limiter
	r *hybrid.Rule
	// mu orders launches against the end of a phase: a request launched in
	// a phase is counted in it, and the phase's figures wait for it.
	mu                      sync.Mutex
	phase                   int // index into phaseNames; len(phaseNames) once over; guarded by mu
	inflight                [3]sync.WaitGroup
	legit, newcomers, flood [3]tally
	latMu                   sync.Mutex
	lat                     [3][]time.Duration // legitimate decisions' latency, per phase; guarded by latMu
}

// launch runs f(phase) in a goroutine of its own, counted in the current
// phase, and reports true; false once the last phase is over.
func (ld *load) launch(f func(ph int)) bool {
	ld.mu.Lock()
	ph := ld.phase
	if ph < len(phaseNames) {
		ld.inflight[ph].Add(1)
	}
	ld.mu.Unlock()
	if ph >= len(phaseNames) {
		return false
	}
	go func() {
		defer ld.inflight[ph].Done()
		f(ph)
	}()
	return true
}

// end ends phase i: nothing is launched in it any more, and what was is
// over when end returns.
func (ld *load) end(i int) {
	ld.mu.Lock()
	ld.phase = i + 1
	ld.mu.Unlock()
	ld.inflight[i].Wait()
}

// runChild builds the case's Limiter and rule, runs the three phases and
// writes each phase's figures as a line of JSON.
func runChild(p params) error {
	ctx := context.Background()
	cfg := hybrid.Config{MaxKeys: p.MaxKeys, Logger: slog.New(slog.DiscardHandler)}
	var rc *redis.Client
	mode := hybrid.Local
	if p.Mode == "hybrid" {
		rc = redis.NewClient(&redis.Options{Addr: p.Redis, ContextTimeoutEnabled: true})
		defer rc.Close()
		cfg.Redis, mode = rc, hybrid.Hybrid
	} else if p.Mode != "local" {
		return fmt.Errorf("-mode %q: local or hybrid", p.Mode)
	}
	lim := hybrid.Limit{Algorithm: hybrid.FixedWindow, Quota: p.Quota, Window: p.Window}
	switch p.Algo {
	case "fixed":
	case "gcra":
		lim.Algorithm = hybrid.GCRA
	default:
		return fmt.Errorf("-algo %q: fixed or gcra", p.Algo)
	}
	l, err := hybrid.New(cfg)
	if err != nil {
		return err
	}
	defer l.Close()
	r, err := l.Register(hybrid.Rule{Name: "api", Mode: mode, Limit: lim})
	if err != nil {
		return err
	}
	ld := &load{l: l, r: r}
	phases := []time.Duration{p.Before, p.Flood, p.After}
	for i, d := range phases {
		ld.lat[i] = make([]time.Duration, 0, int(1.2*d.Seconds()*float64(p.Users)*p.UserRate)+1024)
	}
	var wg sync.WaitGroup
	wg.Go(func() { ld.legitimate(ctx, p) })
	wg.Go(func() { ld.newcomer(ctx, p.Newcomers) })
	out := json.NewEncoder(os.Stdout)
	var floodDone chan floodResult
	start := time.Now() // the phase's: it starts as the last one ends, its measurement included
	for i, d := range phases {
		if i == 1 {
			floodDone = make(chan floodResult, 1)
			go func() { floodDone <- ld.floodKeys(ctx, p.Rate, d) }()
		}
		maxKeys := 0
		for time.Since(start) < d {
			time.Sleep(min(time.Second, d-time.Since(start)))
			maxKeys = max(maxKeys, l.Stats().Keys)
		}
		var fr floodResult
		if i == 1 {
			fr = <-floodDone
		}
		ld.end(i)
		end := time.Now()
		ph := ld.measure(ctx, i, end.Sub(start), rc)
		start = end
		ph.MaxKeysSeen = max(maxKeys, ph.Keys)
		ph.FloodOffered, ph.Behind = fr.offered, fr.behind
		if err := out.Encode(ph); err != nil {
			return err
		}
	}
	wg.Wait()
	return nil
}

// legitimate offers each legitimate key its requests, p.UserRate a second
// evenly spaced, the keys in turn, until the last phase ends.
func (ld *load) legitimate(ctx context.Context, p params) {
	keys := make([]string, p.Users)
	for k := range keys {
		keys[k] = "user-" + strconv.Itoa(k)
	}
	pace(float64(len(keys))*p.UserRate, func(i int64) bool {
		key := keys[i%int64(len(keys))]
		return ld.launch(func(ph int) {
			s := time.Now()
			d, _ := ld.l.Allow(ctx, ld.r, key)
			took := time.Since(s)
			ld.latMu.Lock()
			ld.lat[ph] = append(ld.lat[ph], took)
			ld.latMu.Unlock()
			ld.legit[ph].add(d)
		})
	})
}

// newcomer offers a request of a new legitimate key rate times a second.
func (ld *load) newcomer(ctx context.Context, rate float64) {
	if rate <= 0 {
		return
	}
	pace(rate, func(i int64) bool {
		key := "newcomer-" + strconv.FormatInt(i, 10)
		return ld.launch(func(ph int) {
			d, _ := ld.l.Allow(ctx, ld.r, key)
			ld.newcomers[ph].add(d)
		})
	})
}

// floodResult is what the flood offered, and how many requests it fell
// behind its rate by at its end (its goroutines could not go faster).
type floodResult struct{ offered, behind int64 }

// floodGoroutines send the flood, each at its part of the rate: an
// attacker's few connections, each waiting for its answers.
const floodGoroutines = 4

// floodKeys offers never-repeating keys at rate per second for d.
func (ld *load) floodKeys(ctx context.Context, rate float64, d time.Duration) floodResult {
	end := time.Now().Add(d)
	var offered, behind atomic.Int64
	var wg sync.WaitGroup
	for g := range floodGoroutines {
		wg.Go(func() {
			buf := []byte("attacker-key-")
			n := len(buf)
			b := pace(rate/floodGoroutines, func(i int64) bool {
				if time.Now().After(end) {
					return false
				}
				k := uint64(i*floodGoroutines + int64(g))
				buf = strconv.AppendUint(buf[:n], k*0x9E3779B97F4A7C15, 36) // distinct, spread over the shards
				dec, _ := ld.l.Allow(ctx, ld.r, string(buf))
				ld.flood[1].add(dec)
				offered.Add(1)
				return true
			})
			behind.Add(b)
		})
	}
	wg.Wait()
	return floodResult{offered: offered.Load(), behind: behind.Load()}
}

// pace calls f(0), f(1), … at rate calls a second, catching up when it
// falls behind, until f returns false; it returns how many calls it was
// behind then.
func pace(rate float64, f func(i int64) bool) int64 {
	start := time.Now()
	var i int64
	for {
		due := int64(time.Since(start).Seconds() * rate)
		for ; i < due; i++ {
			if !f(i) {
				return due - i
			}
		}
		time.Sleep(time.Millisecond)
	}
}

// measure is phase i's figures, once its requests are over: its decisions, the legitimate ones'
// latency, and the process's memory and Redis's at its end.
func (ld *load) measure(ctx context.Context, i int, d time.Duration, rc *redis.Client) phase {
	ph := phase{Name: phaseNames[i], Seconds: d.Seconds(), Legit: ld.legit[i].counts(), Newcomers: ld.newcomers[i].counts(), Flood: ld.flood[i].counts()}
	ld.latMu.Lock()
	lats := ld.lat[i]
	ld.latMu.Unlock()
	slices.Sort(lats)
	if n := len(lats); n > 0 {
		ph.P50, ph.P99, ph.Max = lats[n/2], lats[min(n*99/100, n-1)], lats[n-1]
		ph.Slow = n - sort.Search(n, func(i int) bool { return lats[i] > 10*time.Millisecond })
	}
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	ph.Heap = int64(m.HeapInuse)
	ph.RSS, ph.PeakRSS = status("VmRSS"), status("VmHWM")
	st := ld.l.Stats()
	ph.Keys, ph.StatsBytes = st.Keys, st.Bytes
	ph.Goroutines = runtime.NumGoroutine()
	if rc != nil {
		ph.RedisKeys, _ = rc.DBSize(ctx).Result()
		if info, err := rc.InfoMap(ctx, "memory").Result(); err == nil {
			ph.RedisMem, _ = strconv.ParseInt(info["Memory"]["used_memory"], 10, 64)
		}
	}
	return ph
}

// status is a field of /proc/self/status given in kB, in bytes.
func status(field string) int64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), field+":"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb << 10
		}
	}
	return 0
}
