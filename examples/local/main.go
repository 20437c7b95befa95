// Command local is a tour of package local: it drives the same burst of
// traffic through each of the rate limiting algorithms, and the windows
// anchored at a key's first request, and prints, second by second, what each
// one admitted and rejected. It compares sub-window counters of 1, 6 and 60
// sub-windows on that traffic. Then it shows the leaky bucket as a shaper
// (Reserve delays requests instead of rejecting them) and one multi-rule
// decision (AllowMultiAt).
//
// Time is virtual: every request carries a timestamp the program computes, and
// the limiters decide with their At methods (AllowNAt, ReserveAt,
// AllowMultiAt). Nothing sleeps, so the tour runs in milliseconds and prints
// the same figures on every run.
//
// Usage:
//
//	go run ./examples/local                  # the full tour
//	go run ./examples/local -algo gcra       # one algorithm
//	go run ./examples/local -rate 4 -burst 1 # another limit
package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/hybridlimit/hybridlimit/local"
)

// base is the virtual time the simulations start at. It is a whole minute,
// so the fixed windows (aligned to multiples of their length since the Unix
// epoch) start with the simulated seconds.
var base = time.Date(2030, time.January, 1, 0, 0, 0, 0, time.UTC)

// limiterConfig makes limiters for virtual time. Every decision below passes
// its own time, so the limiter needs no clock of its own, and the background
// sweeper is off: it would sweep at the real time, long after the virtual
// one, and evict every key as idle. With both off, New starts no goroutine;
// the limiters are closed all the same, as every Limiter should be.
var limiterConfig = local.Config{Clock: wallClock{}, NoBackgroundSweep: true}

// wallClock is a local.Clock that calls time.Now: unlike the Limiter's
// default clock, it runs no goroutine.
type wallClock struct{}

func (wallClock) Now() time.Time { return time.Now() }

// algorithms are the tour's, in the order of local's constants.
var algorithms = []local.Algorithm{
	local.FixedWindow, local.SlidingWindowLog, local.SlidingWindowCounter,
	local.TokenBucket, local.LeakyBucket, local.GCRA, local.SubWindowCounter,
}

type options struct {
	seconds int
	rate    int64
	burst   int64
	algo    local.Algorithm // zero: the full tour
}

func main() {
	var opt options
	var algo string
	flag.IntVar(&opt.seconds, "seconds", 8, "seconds of traffic to simulate per algorithm, 5 to 60")
	flag.Int64Var(&opt.rate, "rate", 10, "the limit, in requests per second")
	flag.Int64Var(&opt.burst, "burst", 0, "capacity of token_bucket, leaky_bucket and gcra (0 means the rate)")
	flag.StringVar(&algo, "algo", "", "run only this algorithm, e.g. fixed_window or gcra (default: the full tour)")
	flag.Parse()
	if algo != "" {
		if err := opt.algo.UnmarshalText([]byte(algo)); err != nil {
			fmt.Fprintf(os.Stderr, "local: -algo %q: want one of %v\n", algo, algorithms)
			os.Exit(2)
		}
	}
	if err := run(os.Stdout, opt); err != nil {
		fmt.Fprintln(os.Stderr, "local:", err)
		os.Exit(1)
	}
}

func run(w io.Writer, opt options) error {
	if opt.seconds < 5 || opt.seconds > 60 {
		return fmt.Errorf("-seconds %d: must be from 5 to 60", opt.seconds)
	}
	if opt.rate < 1 || opt.rate > 10_000 {
		return fmt.Errorf("-rate %d: must be from 1 to 10000", opt.rate)
	}
	if opt.burst < 0 {
		return fmt.Errorf("-burst %d: must be at least 0", opt.burst)
	}
	tr := newTraffic(opt.seconds, opt.rate)
	fmt.Fprintf(w, "Traffic, %d virtual seconds: %s.\n", opt.seconds, tr.pattern)
	fmt.Fprintf(w, "One rule per algorithm: limit %d per 1s", opt.rate)
	if opt.burst != 0 {
		fmt.Fprintf(w, " (bucket capacity %d)", opt.burst)
	}
	fmt.Fprintln(w, ".")

	algos := algorithms
	if opt.algo != 0 {
		algos = []local.Algorithm{opt.algo}
	}
	var params []local.Limit
	for _, a := range algos {
		p := local.Limit{Algorithm: a, Quota: opt.rate, Window: time.Second}
		if a == local.TokenBucket || a == local.LeakyBucket || a == local.GCRA {
			p.Burst = opt.burst
		}
		params = append(params, p)
		if a == local.FixedWindow || a == local.SubWindowCounter {
			p.Anchored = true
			params = append(params, p)
		}
	}
	var reference []bool // the token bucket's decisions, to compare the other buckets with
	for _, p := range params {
		a := p.Algorithm
		lim := p
		res, err := simulate(lim, tr)
		if err != nil {
			return err
		}
		fmt.Fprintln(w)
		report(w, lim, tr, res)
		switch a {
		case local.TokenBucket:
			reference = res.allowed
		case local.LeakyBucket, local.GCRA:
			if reference != nil {
				if slices.Equal(reference, res.allowed) {
					fmt.Fprintln(w, "  every decision is the token bucket's: as meters the three bucket algorithms agree")
				} else {
					fmt.Fprintln(w, "  decisions differ from the token bucket's")
				}
			}
		}
	}
	if opt.algo != 0 && opt.algo != local.SubWindowCounter {
		return nil
	}
	fmt.Fprintln(w)
	if err := subWindows(w, tr, opt.rate); err != nil {
		return err
	}
	if opt.algo != 0 {
		return nil
	}
	fmt.Fprintln(w)
	if err := shaper(w, opt.rate); err != nil {
		return err
	}
	fmt.Fprintln(w)
	return multi(w)
}

// traffic is the requests offered to every algorithm: their times as offsets
// from base, in ascending order.
type traffic struct {
	at      []time.Duration
	seconds int
	pattern string // what the traffic is, in words
}

// newTraffic offers, per second, 2.5× the rate evenly spread, except around
// one window boundary b: second b−1 is quiet but for a burst of 3× the rate
// in its last 100ms, second b opens with another such burst, and second b+1
// is quiet. The quiet time before the boundary leaves the fixed window its
// whole budget for the first burst; the quiet second after it lets the
// buckets refill.
func newTraffic(seconds int, rate int64) traffic {
	steady := max(rate*5/2, 1)
	burst := 3 * rate
	b := max(1, (seconds-2)/2)
	const burstSpan = 100 * time.Millisecond
	var at []time.Duration
	for s := range seconds {
		sec := time.Duration(s) * time.Second
		if s == b-1 || s == b { // the burst's half in this second
			from := sec
			if s == b-1 {
				from += time.Second - burstSpan
			}
			for k := range burst {
				at = append(at, from+spread(k, burst, burstSpan))
			}
		}
		if s == b-1 || s == b+1 {
			continue // quiet but for the burst
		}
		for k := range steady {
			off := spread(k, steady, time.Second)
			if s == b && off < burstSpan {
				continue // the burst stands in for the steady traffic
			}
			at = append(at, sec+off)
		}
	}
	bt := time.Duration(b) * time.Second
	pattern := fmt.Sprintf("%d/s spread evenly, except: quiet from %ds, a burst of %d in %s and %d more in %s, then %d/s again; quiet from %ds to %ds",
		steady, b-1, burst, span(bt-burstSpan, bt), burst, span(bt, bt+burstSpan), steady, b+1, b+2)
	return traffic{at: at, seconds: seconds, pattern: pattern}
}

// spread returns the offset of the k-th of n requests spread evenly over d,
// rounded down to the microsecond, the limiters' resolution.
func spread(k, n int64, d time.Duration) time.Duration {
	return time.Duration(k*d.Microseconds()/n) * time.Microsecond
}

func span(from, to time.Duration) string {
	return fmt.Sprintf("[%.1fs, %.1fs)", from.Seconds(), to.Seconds())
}

// result is what one limiter made of the traffic.
type result struct {
	allowed  []bool          // per request
	admitted []time.Duration // the offsets of the admitted requests
	offered  []int           // per second
	accepted []int           // per second
}

// simulate offers tr to a fresh Limiter for lim, one key, in virtual time.
func simulate(lim local.Limit, tr traffic) (result, error) {
	l, err := local.New(lim, limiterConfig)
	if err != nil {
		return result{}, err
	}
	defer l.Close()
	res := result{
		allowed:  make([]bool, len(tr.at)),
		offered:  make([]int, tr.seconds),
		accepted: make([]int, tr.seconds),
	}
	for i, off := range tr.at {
		s := int(off / time.Second)
		res.offered[s]++
		if d := l.AllowNAt(base.Add(off), "user", 1); d.Allowed() {
			res.allowed[i] = true
			res.admitted = append(res.admitted, off)
			res.accepted[s]++
		}
	}
	return res, nil
}

// about says in a few words how each algorithm decides.
var about = map[local.Algorithm]string{
	local.FixedWindow:          "counts per calendar second; the count restarts at every boundary",
	local.SlidingWindowLog:     "remembers each admission; at most the limit in any (t−1s, t]",
	local.SlidingWindowCounter: "this second's count plus the last second's, weighted by overlap",
	local.TokenBucket:          "a bucket of tokens refilled at the rate; a request takes one",
	local.LeakyBucket:          "a bucket drained at the rate; a request pours one in",
	local.GCRA:                 "a theoretical arrival time, advanced one interval per request",
	local.SubWindowCounter:     "a count per tenth of a second; the last ten within the limit",
}

// aboutAnchored says the same of the anchored variants.
var aboutAnchored = map[local.Algorithm]string{
	local.FixedWindow:      "counts per second from the first request after the last second ended",
	local.SubWindowCounter: "a count per tenth of a second, on a grid that starts at the first request into an empty window",
}

func report(w io.Writer, lim local.Limit, tr traffic, res result) {
	how := about[lim.Algorithm]
	if lim.Anchored {
		how = aboutAnchored[lim.Algorithm]
	}
	fmt.Fprintf(w, "%s: %s\n", lim, how)
	fmt.Fprintln(w, "  second  offered  admitted  rejected  limit")
	for s := range tr.seconds {
		fmt.Fprintf(w, "  %6d  %7d  %8d  %8d  %5d\n",
			s, res.offered[s], res.accepted[s], res.offered[s]-res.accepted[s], lim.Quota)
	}
	n, first, last := maxInWindow(res.admitted, lim.Window)
	fmt.Fprintf(w, "  max admitted in any %s window: %d (%.1f× the limit), from %.3fs to %.3fs\n",
		lim.Window, n, float64(n)/float64(lim.Quota), first.Seconds(), last.Seconds())
}

// subWindows offers the traffic to sub-window counters of 1, 6 and 60
// sub-windows, and to the sliding window log, and prints the most each
// admitted in any sliding window. A second does not divide into 6 or 60
// whole microseconds, so the window is 1.2s, at the same rate.
func subWindows(w io.Writer, tr traffic, rate int64) error {
	const win = 1200 * time.Millisecond
	limit := max(rate*6/5, 1)
	fmt.Fprintf(w, "Sub-window counters on the same traffic, limit %d per %s (the same rate; 1s has no 6 or 60 whole-µs sub-windows):\n", limit, win)
	fmt.Fprintln(w, "  limit                                  admitted  max in any (t−1.2s, t]")
	for _, p := range []local.Limit{
		{Algorithm: local.SubWindowCounter, SubWindows: 1},
		{Algorithm: local.SubWindowCounter, SubWindows: 6},
		{Algorithm: local.SubWindowCounter, SubWindows: 60},
		{Algorithm: local.SlidingWindowLog},
	} {
		p.Quota, p.Window = limit, win
		lim := p
		res, err := simulate(lim, tr)
		if err != nil {
			return err
		}
		n, _, _ := maxInWindow(res.admitted, win)
		fmt.Fprintf(w, "  %-38s %8d  %d (%.2f× the limit)\n", lim, len(res.admitted), n, float64(n)/float64(limit))
	}
	return nil
}

// maxInWindow returns the most timestamps of ts (ascending) that fall in one
// window (t − w, t], and the first and last of them.
func maxInWindow(ts []time.Duration, w time.Duration) (n int, first, last time.Duration) {
	j := 0
	for i, t := range ts {
		for ts[j] <= t-w {
			j++
		}
		if i-j+1 > n {
			n, first, last = i-j+1, ts[j], t
		}
	}
	return n, first, last
}

// shaper offers a burst to a leaky bucket twice: through AllowNAt, which
// rejects what does not fit, and through ReserveAt, which schedules it at the
// bucket's rate, up to a maximum delay.
func shaper(w io.Writer, rate int64) error {
	lim := local.Limit{Algorithm: local.LeakyBucket, Quota: rate, Window: time.Second, Burst: 1}
	const n = 8
	// Up to five emission intervals, rounded up to the microsecond, the
	// resolution of the limiter: a maxDelay that falls short of the fifth
	// delay by a fraction of a microsecond would refuse it.
	maxDelay := time.Duration((5_000_000+rate-1)/rate) * time.Microsecond
	fmt.Fprintf(w, "Shaper: %s, %d requests at the same instant.\n", lim, n)

	meter, err := local.New(lim, limiterConfig)
	if err != nil {
		return err
	}
	defer meter.Close()
	admitted := 0
	for range n {
		if meter.AllowNAt(base, "user", 1).Allowed() {
			admitted++
		}
	}
	fmt.Fprintf(w, "  AllowNAt admits %d and rejects %d.\n", admitted, n-admitted)

	shape, err := local.New(lim, limiterConfig)
	if err != nil {
		return err
	}
	defer shape.Close()
	var delays, refused []string
	for range n {
		r, err := shape.ReserveAt(base, "user", 1, maxDelay)
		if err != nil {
			return err
		}
		if r.OK {
			delays = append(delays, r.Delay.String())
		} else {
			// Nothing was consumed: the next request would wait as long.
			refused = append(refused, fmt.Sprintf("%s (%s)", r.Reason, r.Delay))
		}
	}
	fmt.Fprintf(w, "  ReserveAt with max delay %s delays them by: %s\n", maxDelay, strings.Join(delays, " "))
	if len(refused) > 0 {
		fmt.Fprintf(w, "  and refuses %d, which would wait longer: %s\n", len(refused), strings.Join(refused, ", "))
	}
	return nil
}

// multi puts one user under two rules at once, 5 per second and 20 per
// minute, and decides each request against both with AllowMultiAt: it is
// admitted by both, charging both, or by neither, charging nothing.
func multi(w io.Writer) error {
	perSecond, err := local.New(local.Limit{Algorithm: local.SlidingWindowLog, Quota: 5, Window: time.Second}, limiterConfig)
	if err != nil {
		return err
	}
	defer perSecond.Close()
	perMinute, err := local.New(local.Limit{Algorithm: local.FixedWindow, Quota: 20, Window: time.Minute}, limiterConfig)
	if err != nil {
		return err
	}
	defer perMinute.Close()

	const offered = 8 // per second
	fmt.Fprintf(w, "Multi-rule: user alice under %s AND %s, %d requests/s, AllowMultiAt.\n",
		perSecond.Limit(), perMinute.Limit(), offered)
	reqs := []local.Request{
		{Limiter: perSecond, Key: "alice", N: 1},
		{Limiter: perMinute, Key: "alice", N: 1},
	}
	out := make([]local.Decision, len(reqs))
	for s := range 5 {
		var admitted, bySecond, byMinute int
		var retry time.Duration // the 1m rule's, at its first refusal this second
		for k := range offered {
			now := base.Add(time.Duration(s)*time.Second + spread(int64(k), offered, time.Second))
			if local.AllowMultiAt(now, reqs, out) {
				admitted++
				continue
			}
			// out[i].Reason tells which rules refused; ReasonOK marks one
			// that had room and, the request refused, was not charged.
			if out[0].Reason() != local.ReasonOK {
				bySecond++
			}
			if out[1].Reason() != local.ReasonOK {
				byMinute++
				if retry == 0 {
					retry = out[1].RetryAfter()
				}
			}
		}
		fmt.Fprintf(w, "  second %d: admitted %d, refused by the 1s rule %d, by the 1m rule %d", s, admitted, bySecond, byMinute)
		if retry > 0 {
			fmt.Fprintf(w, " (1m rule: retry after %s)", retry)
		}
		fmt.Fprintln(w)
	}
	// Second 4's refusals came from the 1m rule alone; had they charged the
	// 1s rule, it would be full. A zero-cost request asks without consuming.
	d := perSecond.AllowNAt(base.Add(5*time.Second-time.Microsecond), "alice", 0)
	fmt.Fprintf(w, "  the 1s rule still has %d of %d left at 4.999999s: refused requests charge no rule\n", d.Remaining(), d.Capacity())
	return nil
}
