package syncer_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/internal/redistest"
	"github.com/hybridlimit/hybridlimit/local"
	"github.com/hybridlimit/hybridlimit/syncer"
)

// event is one decision and the time (µs, Redis's clock) its script used.
type event struct {
	at      int64
	allowed bool
}

// hammer runs workers goroutines per Central, each deciding cost 1 for key
// at Redis's time until the deadline, and returns every decision.
func hammer(cens []*syncer.Central, rule *syncer.Rule, key string, workers int, until time.Time) ([]event, error) {
	var (
		mu     sync.Mutex
		all    []event
		wg     sync.WaitGroup
		errOne error
	)
	for _, cen := range cens {
		for range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				var mine []event
				for time.Now().Before(until) {
					d, at, err := syncer.AllowNTime(context.Background(), cen, rule, key, 1)
					if err != nil {
						mu.Lock()
						errOne = err
						mu.Unlock()
						return
					}
					mine = append(mine, event{at, d.Allowed()})
				}
				mu.Lock()
				all = append(all, mine...)
				mu.Unlock()
			}()
		}
	}
	wg.Wait()
	slices.SortStableFunc(all, func(a, b event) int { return cmpInt(a.at, b.at) })
	return all, errOne
}

func cmpInt(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// checkFixed checks the fixed window's exactness: at most L admitted in any
// window, and exactly L in a window where a request was refused (a refusal
// of cost 1 means the count stood at L). It returns how many windows saw a
// refusal.
func checkFixed(t *testing.T, evs []event, L, w int64) int {
	t.Helper()
	adm, rej := map[int64]int64{}, map[int64]int64{}
	for _, e := range evs {
		if e.allowed {
			adm[e.at/w]++
		} else {
			rej[e.at/w]++
		}
	}
	ids := make([]int64, 0, len(adm)+len(rej))
	for id := range adm {
		ids = append(ids, id)
	}
	for id := range rej {
		if adm[id] == 0 {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	full := 0
	for _, id := range ids {
		if assert.LessOrEqual(t, adm[id], L, "window %d: admitted, over the limit", id) && rej[id] > 0 {
			assert.Equal(t, L, adm[id], "window %d: %d refused, want the limit admitted", id, rej[id])
		}
		if rej[id] > 0 {
			full++
		}
		t.Logf("window %d: %d admitted, %d refused", id, adm[id], rej[id])
	}
	return full
}

// TestContentionExact hammers one key from 64 goroutines over 4 clients, at
// Redis's clock, and checks each exact algorithm's guarantee on the times
// the scripts decided at.
func TestContentionExact(t *testing.T) {
	addr := redistest.Addr(t)
	tests := []struct {
		p   local.Limit
		dur time.Duration
	}{
		{local.Limit{Algorithm: local.FixedWindow, Quota: 500, Window: time.Second}, 3100 * time.Millisecond},
		{local.Limit{Algorithm: local.SlidingWindowLog, Quota: 200, Window: time.Second}, 3100 * time.Millisecond},
		{local.Limit{Algorithm: local.GCRA, Quota: 500, Window: time.Second, Burst: 50}, 2 * time.Second},
		{local.Limit{Algorithm: local.TokenBucket, Quota: 500, Window: time.Second, Burst: 50}, 2 * time.Second},
	}
	if testing.Short() {
		tests = tests[:1]
	}
	for _, tt := range tests {
		t.Run(tt.p.Algorithm.String(), func(t *testing.T) {
			ks := syncer.Keyspace{Prefix: redistest.Prefix(t)}
			var cens []*syncer.Central
			for range 4 {
				cens = append(cens, newCentral(t, redistest.Client(t, addr), ks))
			}
			rule := mustRule(t, "hot", tt.p)
			evs, err := hammer(cens, rule, "k", 16, time.Now().Add(tt.dur))
			require.NoError(t, err)
			L, w := tt.p.Quota, tt.p.Window.Microseconds()
			var adm []int64
			var rej []int64
			for _, e := range evs {
				if e.allowed {
					adm = append(adm, e.at)
				} else {
					rej = append(rej, e.at)
				}
			}
			t.Logf("%d decisions, %d admitted, over %v", len(evs), len(adm), time.Duration(evs[len(evs)-1].at-evs[0].at)*time.Microsecond)
			require.NotEmpty(t, rej, "no request refused in %d: demand never passed the limit (machine overloaded?)", len(evs))
			switch tt.p.Algorithm {
			case local.FixedWindow:
				checkFixed(t, evs, L, w)
			case local.SlidingWindowLog:
				checkLog(t, adm, rej, L, w)
			default:
				checkBucket(t, evs, adm, rej, tt.p)
			}
		})
	}
}

// checkLog: in (t − W, t] at most L admitted for every t, and exactly L for
// every t a request was refused at.
func checkLog(t *testing.T, adm, rej []int64, L, w int64) {
	t.Helper()
	// in returns the admissions in (at − w, at].
	in := func(at int64) int64 {
		hi := sort.Search(len(adm), func(i int) bool { return adm[i] > at })
		lo := sort.Search(len(adm), func(i int) bool { return adm[i] > at-w })
		return int64(hi - lo)
	}
	for _, a := range adm {
		if !assert.LessOrEqual(t, in(a), L, "admitted in (%d − %d, %d], over the limit", a, w, a) {
			break
		}
	}
	for _, r := range rej {
		if !assert.Equal(t, L, in(r), "refused at %d: admitted in (t − W, t], want the limit", r) {
			break
		}
	}
}

// checkBucket: the arrival curve, at most burst + rate·(t1 − t0) admitted in
// any [t0, t1]; and between two refusals with demand continuous, as many as
// the rate allows, within one.
func checkBucket(t *testing.T, evs []event, adm, rej []int64, p local.Limit) {
	t.Helper()
	L, w, burst := p.Quota, p.Window.Microseconds(), p.Burst
	bad := 0
	for i := range adm {
		for j := i; j < len(adm); j++ {
			// (j − i + 1) ≤ burst + (adm[j] − adm[i])·L/w, cross-multiplied
			if (int64(j-i+1)-burst)*w > (adm[j]-adm[i])*L && bad < 5 {
				bad++
				assert.Failf(t, "more than burst + rate · length admitted", "%d admitted in [%d, %d] (%dµs): more than burst %d + rate %d/%dµs", j-i+1, adm[i], adm[j], adm[j]-adm[i], burst, L, w)
			}
		}
	}
	// Between the first and the last refusal: the bucket never fills if no
	// gap between decisions lets burst − 1 tokens come back, and then the
	// admissions in (r0, r1] are (TAT(r1) − TAT(r0)) / interval, with TAT
	// within one interval of r + τ at each refusal.
	r0, r1 := rej[0], rej[len(rej)-1]
	var gap, prev int64 = 0, r0
	for _, e := range evs {
		if e.at > r0 && e.at <= r1 {
			gap = max(gap, e.at-prev)
			prev = e.at
		}
	}
	var n int64
	for _, a := range adm {
		if a > r0 && a <= r1 {
			n++
		}
	}
	d := r1 - r0
	t.Logf("%d admitted between refusals %dµs apart; rate × time = %.1f; longest gap %dµs", n, d, float64(d*L)/float64(w), gap)
	require.GreaterOrEqual(t, d*L, 2*w, "refusals only %dµs apart: too short to compare with the rate", d)
	if gap*L < (burst-1)*w { // gap < (burst − 1) / rate
		// |n − rate × time| < 1, cross-multiplied by the window
		assert.InDelta(t, d*L, n*w, float64(w-1), "%d admitted in %dµs of continuous demand: want rate × time = %.2f within 1", n, d, float64(d*L)/float64(w))
	} else { // the process stalled: a loose bound
		assert.GreaterOrEqual(t, n*w*10, d*L*9, "%d admitted in %dµs: want at least 90%% of rate × time = %.1f", n, d, float64(d*L)/float64(w))
	}
}

// TestHelperHammer is not a test: TestContentionProcesses runs the test
// binary again to run it, as another process. It prints "A <µs>" for each
// admitted decision and "R <µs>" for each refused one, then "done".
func TestHelperHammer(t *testing.T) {
	if os.Getenv(envHelper) != "hammer" {
		t.Skip("helper process for TestContentionProcesses")
	}
	until, err := strconv.ParseInt(os.Getenv("HYBRIDLIMIT_HAMMER_UNTIL"), 10, 64)
	require.NoError(t, err)
	c := redistest.Client(t, os.Getenv("HYBRIDLIMIT_HAMMER_ADDR"))
	cen := newCentral(t, c, syncer.Keyspace{Prefix: os.Getenv("HYBRIDLIMIT_HAMMER_PREFIX")})
	rule := mustRule(t, "hot", hammerParams)
	evs, err := hammer([]*syncer.Central{cen}, rule, "k", 16, time.UnixMicro(until))
	require.NoError(t, err)
	w := bufio.NewWriter(os.Stdout)
	for _, e := range evs {
		kind := "R"
		if e.allowed {
			kind = "A"
		}
		fmt.Fprintf(w, "%s %d\n", kind, e.at)
	}
	fmt.Fprintln(w, "done")
	w.Flush()
}

var hammerParams = local.Limit{Algorithm: local.FixedWindow, Quota: 300, Window: time.Second}

// TestContentionProcesses: three processes hammer one key with 16
// goroutines each; merged, their decisions hold the fixed window exactly.
func TestContentionProcesses(t *testing.T) {
	addr := redistest.Addr(t)
	prefix := redistest.Prefix(t)
	until := time.Now().Add(3500 * time.Millisecond) // each child's start-up included
	type child struct {
		cmd          *exec.Cmd
		stdout, errs bytes.Buffer
		err          error
		waited       bool
	}
	var children []*child
	// t.Context is cancelled when the test ends, early or not:
	// CommandContext kills the children then, and this reaps them.
	t.Cleanup(func() {
		for _, ch := range children {
			if !ch.waited {
				ch.cmd.Process.Kill()
				ch.cmd.Wait()
			}
		}
	})
	for range 3 {
		ch := &child{cmd: exec.CommandContext(t.Context(), redistest.Exec(), "-test.run=^TestHelperHammer$", "-test.count=1")}
		ch.cmd.Env = append(os.Environ(), envHelper+"=hammer",
			"HYBRIDLIMIT_HAMMER_ADDR="+addr, "HYBRIDLIMIT_HAMMER_PREFIX="+prefix,
			"HYBRIDLIMIT_HAMMER_UNTIL="+strconv.FormatInt(until.UnixMicro(), 10))
		ch.cmd.Stdout, ch.cmd.Stderr = &ch.stdout, &ch.errs
		ch.cmd.WaitDelay = 5 * time.Second
		require.NoError(t, ch.cmd.Start())
		children = append(children, ch)
	}
	for _, ch := range children {
		ch.err, ch.waited = ch.cmd.Wait(), true
	}
	var evs []event
	for i, ch := range children {
		if !assert.NoError(t, ch.err, "child %d\nstdout tail: %s\nstderr: %s", i, tail(ch.stdout.String()), ch.errs.String()) {
			continue
		}
		done := false
		n := 0
		for _, l := range strings.Split(ch.stdout.String(), "\n") {
			kind, v, _ := strings.Cut(l, " ")
			switch kind {
			case "A", "R":
				at, err := strconv.ParseInt(v, 10, 64)
				require.NoError(t, err, "child %d: line %q", i, l)
				evs = append(evs, event{at, kind == "A"})
				n++
			case "done":
				done = true
			}
		}
		assert.True(t, done, "child %d did not finish its output:\n%s", i, tail(ch.stdout.String()))
		t.Logf("child %d: %d decisions", i, n)
	}
	if t.Failed() {
		return
	}
	full := checkFixed(t, evs, hammerParams.Quota, hammerParams.Window.Microseconds())
	assert.Positive(t, full, "windows that saw a refusal: demand never passed the limit (machine overloaded?)")
}

func tail(s string) string {
	if len(s) > 500 {
		return "…" + s[len(s)-500:]
	}
	return s
}
