package local

import (
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/hybridlimit/hybridlimit/internal/config"
	"github.com/hybridlimit/hybridlimit/internal/localhook"
)

// Algorithm names a rate limiting algorithm. The zero value is not a valid
// algorithm.
type Algorithm uint8

// The algorithms. See docs/algorithms.md for the guarantees and the error
// at window boundaries of each.
const (
	// FixedWindow counts requests in windows aligned to multiples of Window
	// since the Unix epoch. It admits up to twice Limit across a window
	// boundary.
	FixedWindow Algorithm = iota + 1
	// SlidingWindowLog records every admitted request and admits while the
	// requests in (t − Window, t] number at most Limit. It is exact and costs
	// memory proportional to Limit.
	SlidingWindowLog
	// SlidingWindowCounter weights the previous fixed window's count by the
	// part of it still inside the sliding window and admits iff
	// estimate + n ≤ Limit.
	SlidingWindowCounter
	// TokenBucket refills Limit tokens per Window into a bucket holding at
	// most Burst tokens; a request takes n tokens.
	TokenBucket
	// LeakyBucket is the leaky bucket as a meter: each request pours n into a
	// bucket of capacity Burst that drains Limit per Window. As a meter it is
	// the token bucket seen from the other side; Limiter.Reserve and
	// Limiter.Wait use it as a shaper that delays instead of rejecting.
	LeakyBucket
	// GCRA is the generic cell rate algorithm: a theoretical arrival time
	// advanced by Window/Limit per request, admitting while it stays within
	// Burst emission intervals of now.
	GCRA
	// SubWindowCounter cuts the window into SubWindows equal sub-windows,
	// each with its own count, and admits while the counts of the last
	// SubWindows sub-windows plus n stay within Limit. It errs by at most
	// one sub-window's admissions at the trailing edge: one sub-window is
	// the fixed window, more cost memory and buy accuracy.
	SubWindowCounter

	numAlgorithms = int(SubWindowCounter)
)

var algorithmNames = [...]string{
	FixedWindow:          "fixed_window",
	SlidingWindowLog:     "sliding_window_log",
	SlidingWindowCounter: "sliding_window_counter",
	TokenBucket:          "token_bucket",
	LeakyBucket:          "leaky_bucket",
	GCRA:                 "gcra",
	SubWindowCounter:     "sub_window_counter",
}

// String returns the algorithm's name in snake case, as UnmarshalText
// accepts it.
func (a Algorithm) String() string {
	if a.valid() {
		return algorithmNames[a]
	}
	return fmt.Sprintf("Algorithm(%d)", uint8(a))
}

func (a Algorithm) valid() bool { return a >= FixedWindow && int(a) <= numAlgorithms }

// bucket reports whether the algorithm is one of the three bucket
// algorithms, which share one state (a theoretical arrival time) and take a
// Burst.
func (a Algorithm) bucket() bool { return a == TokenBucket || a == LeakyBucket || a == GCRA }

// parseAlgorithm returns the algorithm named s. It accepts the names String
// returns, case-insensitively, with '-' or ' ' in place of '_'.
func parseAlgorithm(s string) (Algorithm, error) {
	norm := strings.ToLower(strings.NewReplacer("-", "_", " ", "_").Replace(strings.TrimSpace(s)))
	for a := FixedWindow; int(a) <= numAlgorithms; a++ {
		if algorithmNames[a] == norm {
			return a, nil
		}
	}
	return 0, fmt.Errorf("%w: unknown algorithm %q", ErrInvalidConfig, s)
}

// MarshalText implements encoding.TextMarshaler.
func (a Algorithm) MarshalText() ([]byte, error) {
	if !a.valid() {
		return nil, fmt.Errorf("%w: unknown algorithm %d", ErrInvalidConfig, uint8(a))
	}
	return []byte(a.String()), nil
}

// UnmarshalText implements encoding.TextUnmarshaler: it accepts the names
// String returns, case-insensitively, with '-' or ' ' in place of '_'.
func (a *Algorithm) UnmarshalText(b []byte) error {
	v, err := parseAlgorithm(string(b))
	if err != nil {
		return err
	}
	*a = v
	return nil
}

// Bounds on parameters (docs/operating.md#bounds). Every product the
// algorithms form stays at or below maxProduct (2^51), so that sums of two of
// them, and the quotients the algorithms take of those sums, are exact in
// IEEE doubles: the Redis (Lua) twin of each algorithm computes in doubles
// (exact below 2^53) and must give the same answer as the Go one. Its exact
// floor division q = ⌊a/b⌋, corrected by the remainder a − q·b, needs
// a + b < 2^53, which 2^51 leaves room for.
const (
	// maxProduct bounds Limit × (window steps) for the sliding window counter
	// and Burst × (emission interval) for the bucket algorithms, and Limit
	// for the fixed window; see docs/algorithms.md.
	maxProduct = config.MaxProduct
	// maxWindow is the longest window accepted: 366 days.
	maxWindow = config.MaxWindow
	// maxLogLimit is the largest Limit of a SlidingWindowLog. The log keeps
	// up to Limit timestamps per key (16 bytes each); larger limits belong to
	// the sliding window counter.
	maxLogLimit = 1 << 16
	// maxSubWindows is the most sub-windows a SubWindowCounter takes. A key
	// holds a count for each sub-window of its window that saw requests.
	maxSubWindows = 64
)

// defaultSubWindows is a SubWindowCounter's SubWindows when zero.
const defaultSubWindows = 10

// Limit is an algorithm and its parameters: what a Limiter (and a hybrid
// rule) enforces per key. It is a plain value, validated where it is used
// (New, Limiter.SetLimit, Validate); the zero Limit is not valid. A field
// the algorithm does not take must be zero.
type Limit struct {
	// Algorithm is the algorithm. Required.
	Algorithm Algorithm
	// Quota is the number of requests admitted per Window. For the bucket
	// algorithms (TokenBucket, LeakyBucket, GCRA) it is the refill, drain or
	// emission rate: Quota per Window. Required, at least 1.
	Quota int64
	// Window is the length of the window, or the period of the rate. It must
	// be a whole number of microseconds, from 1µs to 366 days. Required.
	Window time.Duration
	// Burst is the capacity of the bucket algorithms: the most requests
	// admitted at once. Zero means Quota. The window algorithms take no burst
	// and reject a non-zero one.
	Burst int64
	// SubWindows is how many equal sub-windows a SubWindowCounter cuts the
	// window into, from 1 to 64; each must be a whole number of
	// microseconds. Default 10. The other algorithms take
	// none and reject a non-zero one.
	SubWindows int64
	// Anchored starts a key's window at its first request, and the next one
	// at its first request after that window ends, rather than at multiples
	// of Window since the epoch: clients waiting for a reset then come back
	// spread out, not all at the top of the hour. FixedWindow and
	// SubWindowCounter take it; the default, false, aligns windows to the
	// clock. An anchored Limit's state does not fit in one word: a Limiter
	// decides it under the key's lock.
	Anchored bool
}

// compiled is a valid Limit with the integer constants its decisions use
// precomputed: an immutable value, safe to copy and to share between
// goroutines (but for queued).
type compiled struct {
	p Limit // Burst and SubWindows defaults filled in

	w    int64 // window in µs
	max  int64 // most a single request may cost: Limit, or Burst for buckets
	step int64 // sliding window counter: length of one weighting step in µs; sub-window counter: of a sub-window
	ws   int64 // sliding window counter: steps per window (w / step); sub-window counter: SubWindows

	// Bucket algorithms: the rate Limit/w reduced by gcd, so the emission
	// interval is el/rl µs exactly, and the tolerance is burst·el in the same
	// scaled unit (µs·rl).
	rl  int64
	el  int64
	tau int64

	// Packed states (packed.go): whether every state packs into one word,
	// the bits of a count, and the latest TAT a packed bucket holds.
	packed bool
	cb     uint8  // bits of a count
	cb2    uint8  // sliding window counter: 2·cb, the shift of its window index
	cmask  uint64 // the windows: 1<<cb − 1, the mask of a count
	// The sliding window counter's 1<<cb2 − 1, the mask of both counts, and
	// cb as a uint64: both derivable, kept so that counterAt, without the
	// conversions, fits the inliner's budget (with uint64(l.cb) it does not).
	hmask  uint64
	cbw    uint64
	w2     int64 // sliding window counter: 2·w, for its reset
	maxTAT int64

	// queued is set in a Limiter's own copies of its limits (New,
	// SetLimit), nil elsewhere: the longest delay in µs that the Limiter's
	// shaper gave a request under this limit, or that a queue carried over
	// to it (convert) runs past its burst. A bucket's TAT is at most
	// ⌈τ/rl⌉ + queued µs ahead of the time it was stored at, and a state
	// can owe more than the burst only when queued > 0 (see queue).
	queued *atomic.Int64
}

// invalid is the error of a bad field of a Limit, wrapping ErrInvalidConfig.
func invalid(field string, value any, reason string) error {
	return config.Invalid(ErrInvalidConfig, field, value, reason)
}

// Validate reports whether l is valid: nil, or an error wrapping
// ErrInvalidConfig that names the first bad field.
func (l Limit) Validate() error {
	_, err := compile(l)
	return err
}

// compile validates p and returns it compiled.
func compile(p Limit) (compiled, error) {
	if !p.Algorithm.valid() {
		return compiled{}, invalid("Algorithm", p.Algorithm, "unknown algorithm")
	}
	if p.Quota < 1 {
		return compiled{}, invalid("Quota", p.Quota, "must be at least 1")
	}
	if p.Window <= 0 {
		return compiled{}, invalid("Window", p.Window, "must be positive")
	}
	if p.Window%time.Microsecond != 0 {
		return compiled{}, invalid("Window", p.Window, "must be a whole number of microseconds")
	}
	if p.Window > maxWindow {
		return compiled{}, invalid("Window", p.Window, fmt.Sprintf("must be at most %d days", maxWindow/(24*time.Hour)))
	}
	l := compiled{p: p, w: p.Window.Microseconds()}
	if p.SubWindows != 0 && p.Algorithm != SubWindowCounter {
		return compiled{}, invalid("SubWindows", p.SubWindows, "only the sub-window counter takes sub-windows")
	}
	if p.Anchored && p.Algorithm != FixedWindow && p.Algorithm != SubWindowCounter {
		return compiled{}, invalid("Anchored", p.Anchored, "only the fixed window and the sub-window counter can be anchored")
	}
	if p.Burst != 0 && !p.Algorithm.bucket() {
		return compiled{}, invalid("Burst", p.Burst, "only the bucket algorithms take a burst")
	}
	var err error
	if p.Algorithm.bucket() {
		err = l.compileBucket()
	} else {
		err = l.compileWindow()
	}
	if err != nil {
		return compiled{}, err
	}
	l.setPacking()
	return l, nil
}

// compileWindow checks the quota and sub-windows of a window algorithm's
// l.p and derives the counters' steps.
func (l *compiled) compileWindow() error {
	p := &l.p
	switch p.Algorithm {
	case SlidingWindowLog:
		if p.Quota > maxLogLimit {
			return invalid("Quota", p.Quota, fmt.Sprintf("the sliding window log keeps one timestamp per request and takes at most %d; use the sliding window counter", maxLogLimit))
		}
	case SlidingWindowCounter:
		l.step = counterStep(l.w)
		l.ws = l.w / l.step
		if p.Quota > maxProduct/l.ws {
			return invalid("Quota", p.Quota, fmt.Sprintf("Quota × %d window steps would pass 2^51; lower the limit or use a rounder window", l.ws))
		}
	default: // fixed window, sub-window counter
		if p.Quota > maxProduct {
			return invalid("Quota", p.Quota, "must be at most 2^51")
		}
	}
	if p.Algorithm == SubWindowCounter {
		k := p.SubWindows
		if k == 0 {
			k = defaultSubWindows
		}
		if k < 1 || k > maxSubWindows {
			return invalid("SubWindows", p.SubWindows, fmt.Sprintf("must be from 1 to %d", maxSubWindows))
		}
		if l.w%k != 0 {
			return invalid("SubWindows", k, fmt.Sprintf("must divide Window (%dµs) into whole microseconds", l.w))
		}
		p.SubWindows = k
		l.step, l.ws = l.w/k, k
	}
	l.max = p.Quota
	return nil
}

// compileBucket checks a bucket algorithm's l.p and reduces its rate to
// lowest terms: one request per el/rl µs, a tolerance of Burst × el.
func (l *compiled) compileBucket() error {
	p := &l.p
	if p.Quota > maxProduct {
		return invalid("Quota", p.Quota, "must be at most 2^51")
	}
	if p.Burst < 0 {
		return invalid("Burst", p.Burst, "must be at least 1 (or 0 for the default, Quota)")
	}
	if p.Burst == 0 {
		p.Burst = p.Quota
	}
	g := gcd(p.Quota, l.w)
	l.rl, l.el = p.Quota/g, l.w/g
	if p.Burst > maxProduct/l.el {
		return invalid("Burst", p.Burst, fmt.Sprintf("Burst × emission interval (%d/%d µs) would pass 2^51", l.el, l.rl))
	}
	l.tau = p.Burst * l.el
	l.max = p.Burst
	return nil
}

// counterStep returns the length in µs of the steps in which the sliding
// window counter measures how far into its window it is: the largest power of
// ten that divides the window and leaves at least 1,000 steps in it (1µs when
// none does). A one-minute window moves in 10ms steps (6,000 per window).
// Coarser steps keep Limit × steps small enough for exact arithmetic.
func counterStep(w int64) int64 {
	step := int64(1)
	for w%(step*10) == 0 && w/(step*10) >= 1000 {
		step *= 10
	}
	return step
}

func gcd(a, b int64) int64 {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

// logged reports whether l's state is a ring of (time, cost) pairs: the
// sliding window log's requests, or the sub-window counter's counts, each
// at its sub-window's start.
func (l *compiled) logged() bool {
	return l.p.Algorithm == SlidingWindowLog || l.p.Algorithm == SubWindowCounter
}

// derived returns what l derives, for the module's other packages
// (internal/localx).
func (l compiled) derived() localhook.Derived {
	return localhook.Derived{
		Burst: l.p.Burst, SubWindows: l.p.SubWindows, MaxCost: l.max,
		Step: l.step, Steps: l.ws, Per: l.rl, Interval: l.el, Tolerance: l.tau,
	}
}

// String describes l, for example "token_bucket 2/1s burst 10" or
// "fixed_window 100/1m", with the defaults of Burst and SubWindows filled
// in; "invalid limit" if it is not valid.
func (l Limit) String() string {
	c, err := compile(l)
	if err != nil {
		return "invalid limit"
	}
	return c.String()
}

func (l compiled) String() string {
	s := fmt.Sprintf("%s %d/%s", l.p.Algorithm, l.p.Quota, shortDuration(l.p.Window))
	if l.p.Algorithm.bucket() {
		s += fmt.Sprintf(" burst %d", l.p.Burst)
	}
	if l.p.Algorithm == SubWindowCounter {
		s += fmt.Sprintf(" in %d", l.p.SubWindows)
	}
	if l.p.Anchored {
		s += " anchored"
	}
	return s
}

// shortDuration formats d like time.Duration.String without its zero
// trailing units: 1m rather than 1m0s, 1h30m rather than 1h30m0s.
func shortDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = s[:len(s)-2]
	}
	if strings.HasSuffix(s, "h0m") {
		s = s[:len(s)-2]
	}
	return s
}
