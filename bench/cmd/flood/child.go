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
type load struct {
	l *hybrid.Limiter
	r *hybrid.Rule
	// mu is read-locked around each legitimate request, phase read inside
	// it, so that once the phase has moved on a write lock waits out the
	// requests still counted in the one that ended.
	mu                      sync.RWMutex
	phase                   atomic.Int32 // index into phaseNames; len(phaseNames) once over
	legit, newcomers, flood [3]tally
	lat                     [3][][]time.Duration // per phase, per legitimate driver
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
	const drivers = 8
	phases := []time.Duration{p.Before, p.Flood, p.After}
	for i, d := range phases {
		ld.lat[i] = make([][]time.Duration, drivers)
		for j := range drivers {
			ld.lat[i][j] = make([]time.Duration, 0, int(1.2*d.Seconds()*float64(p.Users)*p.UserRate/drivers)+1024)
		}
	}
	var wg sync.WaitGroup
	for j := range drivers {
		wg.Go(func() { ld.legitimate(ctx, j, drivers, p) })
	}
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
		ld.phase.Store(int32(i + 1))
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

// legitimate offers the legitimate keys j, j+n, j+2n, … their requests, in
// turn, until the last phase ends.
func (ld *load) legitimate(ctx context.Context, j, n int, p params) {
	var keys []string
	for k := j; k < p.Users; k += n {
		keys = append(keys, "user-"+strconv.Itoa(k))
	}
	pace(float64(len(keys))*p.UserRate, func(i int64) bool {
		ld.mu.RLock()
		defer ld.mu.RUnlock()
		ph := ld.phase.Load()
		if int(ph) >= len(phaseNames) {
			return false
		}
		s := time.Now()
		d, _ := ld.l.Allow(ctx, ld.r, keys[i%int64(len(keys))])
		ld.lat[ph][j] = append(ld.lat[ph][j], time.Since(s))
		ld.legit[ph].add(d)
		return true
	})
}

// newcomer offers a request of a new legitimate key rate times a second.
func (ld *load) newcomer(ctx context.Context, rate float64) {
	if rate <= 0 {
		return
	}
	pace(rate, func(i int64) bool {
		ld.mu.RLock()
		defer ld.mu.RUnlock()
		ph := ld.phase.Load()
		if int(ph) >= len(phaseNames) {
			return false
		}
		d, _ := ld.l.Allow(ctx, ld.r, "newcomer-"+strconv.FormatInt(i, 10))
		ld.newcomers[ph].add(d)
		return true
	})
}

// floodResult is what the flood offered, and how many requests it fell
// behind its rate by at its end (one goroutine could not go faster).
type floodResult struct{ offered, behind int64 }

// floodKeys offers never-repeating keys at rate per second for d, from one
// goroutine.
func (ld *load) floodKeys(ctx context.Context, rate float64, d time.Duration) floodResult {
	end := time.Now().Add(d)
	buf := []byte("attacker-key-")
	n := len(buf)
	var offered int64
	behind := pace(rate, func(i int64) bool {
		if time.Now().After(end) {
			return false
		}
		buf = strconv.AppendUint(buf[:n], uint64(i)*0x9E3779B97F4A7C15, 36) // distinct, spread over the shards
		dec, _ := ld.l.Allow(ctx, ld.r, string(buf))
		ld.flood[1].add(dec)
		offered++
		return true
	})
	return floodResult{offered: offered, behind: behind}
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

// measure is phase i's figures: its decisions, the legitimate ones'
// latency, and the process's memory and Redis's at its end.
func (ld *load) measure(ctx context.Context, i int, d time.Duration, rc *redis.Client) phase {
	ld.mu.Lock() // the requests still counted in phase i are over
	ph := phase{Name: phaseNames[i], Seconds: d.Seconds(), Legit: ld.legit[i].counts(), Newcomers: ld.newcomers[i].counts(), Flood: ld.flood[i].counts()}
	var lats []time.Duration
	for _, l := range ld.lat[i] {
		lats = append(lats, l...)
	}
	ld.mu.Unlock()
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
