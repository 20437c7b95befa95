package local_test

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/internal/coarse"
	"github.com/hybridlimit/hybridlimit/internal/keyed"
	"github.com/hybridlimit/hybridlimit/internal/leakcheck"
	"github.com/hybridlimit/hybridlimit/internal/vectors"
	"github.com/hybridlimit/hybridlimit/local"
)

var t0 = time.UnixMicro(vectors.Base)

// one limit of each algorithm, small enough to reach.
func eachAlgorithm() []local.Limit {
	return []local.Limit{
		local.Limit{Algorithm: local.FixedWindow, Quota: 5, Window: time.Minute},
		local.Limit{Algorithm: local.SlidingWindowLog, Quota: 5, Window: time.Minute},
		local.Limit{Algorithm: local.SlidingWindowCounter, Quota: 5, Window: time.Minute},
		local.Limit{Algorithm: local.TokenBucket, Quota: 5, Window: time.Minute},
		local.Limit{Algorithm: local.LeakyBucket, Quota: 5, Window: time.Minute},
		local.Limit{Algorithm: local.GCRA, Quota: 5, Window: time.Minute},
		local.Limit{Algorithm: local.SubWindowCounter, Quota: 5, Window: time.Minute, SubWindows: 60},
		local.Limit{Algorithm: local.SubWindowCounter, Quota: 5, Window: time.Minute, SubWindows: 6, Anchored: true},
		local.Limit{Algorithm: local.FixedWindow, Quota: 5, Window: time.Minute, Anchored: true},
	}
}

func TestConfigRejects(t *testing.T) {
	lim := eachAlgorithm()[0]
	for _, c := range []struct {
		cfg   local.Config
		field string
	}{
		{local.Config{Shards: 3}, "Shards"},
		{local.Config{Shards: -1}, "Shards"},
		{local.Config{Shards: 1 << 17}, "Shards"},
		{local.Config{MaxKeys: -1}, "MaxKeys"},
		{local.Config{Overflow: 9}, "Overflow"},
		{local.Config{SweepInterval: -time.Second}, "SweepInterval"},
	} {
		_, err := local.New(lim, c.cfg)
		if !assert.ErrorIs(t, err, local.ErrInvalidConfig, "%+v", c.cfg) {
			continue
		}
		assert.ErrorContains(t, err, c.field, "%+v: want ErrInvalidConfig naming %s", c.cfg, c.field)
		assert.NotErrorIs(t, err, keyed.ErrInvalidConfig, "%+v: carries the store's own error", c.cfg)
		assert.NotContains(t, err.Error(), "keyed", "%+v: carries the store's own error", c.cfg)
	}
	_, err := local.New(local.Limit{}, local.Config{})
	assert.ErrorIs(t, err, local.ErrInvalidConfig, "zero Limit")
}

func TestNewCopiesConfig(t *testing.T) {
	leakcheck.Check(t)
	cfg := local.Config{MaxKeys: 10}
	want := cfg
	l, err := local.New(eachAlgorithm()[0], cfg)
	require.NoError(t, err)
	defer l.Close()
	assert.Equal(t, want, cfg, "New modified its config")
}

// TestCloseStopsEverything starts a Limiter with its default clock and
// sweeper, and checks Close stops both, idempotently.
func TestCloseStopsEverything(t *testing.T) {
	leakcheck.Check(t)
	l, err := local.New(eachAlgorithm()[3], local.Config{SweepInterval: time.Millisecond})
	require.NoError(t, err)
	assert.True(t, l.Allow("k").Allowed(), "first request rejected")
	require.NoError(t, l.Close())
	require.NoError(t, l.Close(), "the second Close")
	// Decisions still work after Close, on time.Now.
	d := l.AllowN("k", 0)
	assert.True(t, d.Allowed(), "after Close: %+v", d)
	c := coarse.New(time.Millisecond)
	c.Close()
	c.Close()
	got := c.Now()
	now := time.Now()
	assert.WithinRange(t, got, now.Add(-time.Minute), now, "a closed coarse clock's time, against time.Now")
}

// TestEvictsOnlyInitialState: a key is kept while anything it consumed
// could still matter, and evicted from the moment its state is initial.
func TestEvictsOnlyInitialState(t *testing.T) {
	for _, lim := range eachAlgorithm() {
		t.Run(lim.Algorithm.String(), func(t *testing.T) {
			l := newLimiter(t, lim, local.Config{})
			d := l.AllowNAt(t0, "victim", 3)
			require.True(t, d.Allowed(), "%+v", d)
			require.Positive(t, d.ResetAfter(), "%+v", d)
			require.Zero(t, l.SweepAt(t0.Add(d.ResetAfter()-time.Microsecond)), "swept before reset-after")
			require.Equal(t, 1, l.Stats().Keys, "keys held before reset-after")
			require.Equal(t, 1, l.SweepAt(t0.Add(d.ResetAfter())), "swept at reset-after")
			require.Zero(t, l.Stats().Keys, "keys held after reset-after")
			assert.Equal(t, uint64(1), l.Stats().Evictions, "evictions in the stats")
			// Evicted means forgotten, which is exactly the initial state.
			after := l.AllowNAt(t0.Add(d.ResetAfter()), "victim", 0)
			assert.Equal(t, maxCost(lim), after.Remaining(), "after eviction: %+v", after)
		})
	}
}

// TestFullTableKeepsVictimsBudget: flooding a full table with new keys
// never evicts a live key, so it cannot reset anybody's budget.
func TestFullTableKeepsVictimsBudget(t *testing.T) {
	for _, policy := range []local.Overflow{local.OverflowReject, local.OverflowAllow, local.OverflowShared} {
		t.Run(fmt.Sprint("overflow-", uint8(policy)), func(t *testing.T) {
			lim := local.Limit{Algorithm: local.FixedWindow, Quota: 3, Window: time.Minute}
			l := newLimiter(t, lim, local.Config{Shards: 1, MaxKeys: 64, Overflow: policy})
			for range 3 {
				l.AllowNAt(t0, "victim", 1)
			}
			admitted, overflowed := 0, 0
			for i := range 10000 {
				d := l.AllowNAt(t0, fmt.Sprintf("flood-%d", i), 1)
				if d.Allowed() {
					admitted++
				}
				if d.Reason() == local.ReasonOverflow {
					overflowed++
				}
			}
			d := l.AllowNAt(t0, "victim", 1)
			assert.False(t, d.Allowed(), "victim's budget was reset: %+v", d)
			held := 63 // the victim and 63 flood keys
			switch policy {
			case local.OverflowReject:
				assert.Equal(t, held, admitted, "admitted")
				assert.Equal(t, 10000-held, overflowed, "overflowed")
			case local.OverflowAllow:
				assert.Equal(t, 10000, admitted, "admitted")
				assert.Equal(t, 10000-held, overflowed, "overflowed")
			case local.OverflowShared:
				// The overflowing keys share one budget of 3.
				assert.Equal(t, held+3, admitted, "admitted")
			}
			s := l.Stats()
			assert.Equal(t, 64, s.Keys, "keys in the stats %+v", s)
			assert.Equal(t, uint64(10000-held), s.Overflows, "overflows in the stats %+v", s)
			// Once the flood keys are idle, new keys get in again: the
			// insert sweeps make room.
			later := t0.Add(2 * time.Minute)
			d = l.AllowNAt(later, "newcomer", 1)
			assert.True(t, d.Allowed(), "newcomer after the flood: %+v", d)
			assert.Equal(t, local.ReasonOK, d.Reason(), "newcomer after the flood: %+v", d)
		})
	}
}

func TestManyKeysGrowAndSweep(t *testing.T) {
	lim := local.Limit{Algorithm: local.GCRA, Quota: 10, Window: time.Second}
	l := newLimiter(t, lim, local.Config{Shards: 4})
	const n = 50000
	for i := range n {
		require.True(t, l.AllowNAt(t0, fmt.Sprint(i), 1).Allowed(), "key %d rejected", i)
	}
	require.Equal(t, n, l.Stats().Keys, "keys held")
	for i := range n { // every key found again: its second request sees the first
		d := l.AllowNAt(t0, fmt.Sprint(i), 0)
		require.Equal(t, int64(9), d.Remaining(), "key %d: %+v", i, d)
	}
	assert.Equal(t, n, l.SweepAt(t0.Add(time.Second)), "evicted")
	assert.Zero(t, l.Stats().Keys, "keys left")
}

func TestAnyKeyBytes(t *testing.T) {
	lim := local.Limit{Algorithm: local.FixedWindow, Quota: 1, Window: time.Minute}
	l := newLimiter(t, lim, local.Config{})
	big := make([]byte, 1<<20)
	for i := range big {
		big[i] = byte(i)
	}
	keys := []string{"", "{", "}", "a:b", "\n", "\xff\xfe", string(big), string(big[:len(big)-1]), "\x00"}
	for _, k := range keys {
		assert.True(t, l.AllowNAt(t0, k, 1).Allowed(), "key %q rejected on first use", k[:min(len(k), 8)])
	}
	for _, k := range keys {
		assert.False(t, l.AllowNAt(t0, k, 1).Allowed(), "key %q admitted twice", k[:min(len(k), 8)])
	}
}

// TestSetLimitSameBucket: a change of limit that leaves a bucket's rate and
// burst as they were (another bucket algorithm, or the same rate written
// with another window) keeps the state exactly, its fraction of a token
// included: every decision after it is the one the key would have had.
func TestSetLimitSameBucket(t *testing.T) {
	mk := func(a local.Algorithm, n int64, w time.Duration) local.Limit {
		return local.Limit{Algorithm: a, Quota: n, Window: w, Burst: 3}
	}
	from := mk(local.TokenBucket, 3, time.Second) // an interval of 333,333⅓ µs
	for _, to := range []local.Limit{mk(local.GCRA, 3, time.Second), mk(local.LeakyBucket, 6, 2*time.Second)} {
		t.Run(to.String(), func(t *testing.T) {
			ref, l := newLimiter(t, from, local.Config{}), newLimiter(t, from, local.Config{})
			for _, x := range []*local.Limiter{ref, l} {
				x.AllowNAt(t0, "k", 2)
			}
			// 100 ms later 0.3 of a token has come back: a conversion through
			// whole tokens would drop it.
			require.NoError(t, l.SetLimit(to))
			for _, step := range []struct {
				at time.Duration
				n  int64
			}{{100 * time.Millisecond, 0}, {100 * time.Millisecond, 1}, {500 * time.Millisecond, 2}, {700 * time.Millisecond, 1}, {2 * time.Second, 3}} {
				at := t0.Add(step.at)
				got, want := l.AllowNAt(at, "k", step.n), ref.AllowNAt(at, "k", step.n)
				require.Equal(t, want.String(), got.String(), "at +%v n=%d: want the decision as if the limit had not changed", step.at, step.n)
			}
		})
	}
}

func TestSetLimitKeepsConsumption(t *testing.T) {
	fw := func(n int64) local.Limit {
		return local.Limit{Algorithm: local.FixedWindow, Quota: n, Window: time.Minute}
	}
	tb := func(burst int64) local.Limit {
		return local.Limit{Algorithm: local.TokenBucket, Quota: 1, Window: time.Hour, Burst: burst}
	}
	for _, c := range []struct {
		name                 string
		from, to             local.Limit
		consume, wantRemains int64
	}{
		{"window raised", fw(10), fw(20), 7, 13},
		{"window lowered below use", fw(10), fw(5), 7, 0},
		{"bucket burst lowered clamps tokens", tb(10), tb(3), 6, 3},
		{"bucket burst raised keeps tokens", tb(10), tb(20), 6, 4},
		{"algorithm changed starts afresh", fw(10), tb(4), 7, 4},
	} {
		t.Run(c.name, func(t *testing.T) {
			l := newLimiter(t, c.from, local.Config{})
			require.True(t, l.AllowNAt(t0, "k", c.consume).Allowed(), "setup rejected")
			require.NoError(t, l.SetLimit(c.to))
			d := l.AllowNAt(t0, "k", 0)
			assert.Equal(t, c.wantRemains, d.Remaining(), "after SetLimit: %+v", d)
			assert.Equal(t, maxCost(c.to), d.Capacity(), "after SetLimit: %+v", d)
		})
	}
	l := newLimiter(t, fw(1), local.Config{})
	assert.ErrorIs(t, l.SetLimit(local.Limit{}), local.ErrInvalidConfig, "SetLimit(zero)")
}

func TestCostReasons(t *testing.T) {
	for _, lim := range eachAlgorithm() {
		l := newLimiter(t, lim, local.Config{})
		d := l.AllowNAt(t0, "k", maxCost(lim)+1)
		assert.False(t, d.Allowed(), "%v: cost above max: %+v", lim, d)
		assert.Equal(t, local.ReasonCostTooHigh, d.Reason(), "%v: cost above max: %+v", lim, d)
		assert.Zero(t, d.RetryAfter(), "%v: cost above max: %+v", lim, d)
		d = l.AllowNAt(t0, "k", -1)
		assert.False(t, d.Allowed(), "%v: negative cost: %+v", lim, d)
		assert.Equal(t, local.ReasonInvalidCost, d.Reason(), "%v: negative cost: %+v", lim, d)
		d = l.AllowNAt(t0, "k", maxCost(lim))
		assert.True(t, d.Allowed(), "%v: cost equal to max: %+v", lim, d)
		assert.Zero(t, d.Remaining(), "%v: cost equal to max: %+v", lim, d)
		d = l.AllowNAt(t0, "k", 1)
		assert.False(t, d.Allowed(), "%v: exhausted: %+v", lim, d)
		assert.Equal(t, local.ReasonLimited, d.Reason(), "%v: exhausted: %+v", lim, d)
		assert.Positive(t, d.RetryAfter(), "%v: exhausted: %+v", lim, d)
	}
}

// TestNoAllocations holds the hot path to zero allocations for a key already
// held, in every algorithm, with the time passed in and read from the clock.
func TestNoAllocations(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	for _, lim := range eachAlgorithm() {
		l := newLimiter(t, lim, local.Config{Clock: coarse.New(time.Millisecond)})
		now := t0
		for range 1000 { // grow the sliding log to its working size
			now = now.Add(time.Second)
			l.AllowNAt(now, "hot", 1)
		}
		a := testing.AllocsPerRun(1000, func() {
			now = now.Add(time.Second)
			l.AllowNAt(now, "hot", 1)
		})
		assert.Zero(t, a, "%v: AllowNAt's allocations per call", lim)
		a = testing.AllocsPerRun(1000, func() { l.Allow("hot") })
		assert.Zero(t, a, "%v: Allow's allocations per call", lim)
		reqs := []local.Request{{l, "hot", 0}, {l, "other", 0}}
		out := make([]local.Decision, 2)
		local.AllowMultiAt(now, reqs, out)
		a = testing.AllocsPerRun(1000, func() { local.AllowMultiAt(now, reqs, out) })
		assert.Zero(t, a, "%v: AllowMultiAt's allocations per call", lim)
	}
}

// TestConcurrentExact: goroutines racing on one key at one instant admit
// exactly what the limit allows, never more.
func TestConcurrentExact(t *testing.T) {
	for _, lim := range eachAlgorithm() {
		t.Run(lim.Algorithm.String(), func(t *testing.T) {
			big := local.Limit{Algorithm: lim.Algorithm, Quota: 1000, Window: time.Minute}
			l := newLimiter(t, big, local.Config{})
			var admitted atomic.Int64
			var wg sync.WaitGroup
			for range 8 {
				wg.Go(func() {
					for range 500 {
						if l.AllowNAt(t0, "hot", 1).Allowed() {
							admitted.Add(1)
						}
					}
				})
			}
			wg.Wait()
			assert.Equal(t, maxCost(big), admitted.Load(), "requests admitted of 4000, want exactly the limit")
		})
	}
}

// TestTimeFarBackwards: a request stamped long before what a key has stored
// is clamped, never admitted past the limit, and reports sane figures (the
// bucket algorithms once overflowed here and admitted).
func TestTimeFarBackwards(t *testing.T) {
	fast := local.Limit{Algorithm: local.GCRA, Quota: 7777777, Window: time.Second, Burst: 1}
	for _, lim := range append(eachAlgorithm(), fast) {
		t.Run(lim.String(), func(t *testing.T) {
			l := newLimiter(t, lim, local.Config{})
			require.True(t, l.AllowNAt(t0, "k", maxCost(lim)).Allowed(), "setup rejected")
			for _, back := range []time.Time{{}, time.Unix(0, 0), t0.Add(-time.Hour), t0.Add(-time.Microsecond)} {
				d := l.AllowNAt(back, "k", 1)
				assert.False(t, d.Allowed(), "at %v: %+v", back, d)
				assert.GreaterOrEqual(t, d.Remaining(), int64(0), "at %v: %+v", back, d)
				assert.GreaterOrEqual(t, d.ResetAfter(), time.Duration(0), "at %v: %+v", back, d)
				assert.Positive(t, d.RetryAfter(), "at %v: %+v", back, d)
			}
		})
	}
}

func TestOverflowReasonsAgree(t *testing.T) {
	lim := local.Limit{Algorithm: local.TokenBucket, Quota: 1, Window: time.Hour, Burst: 1}
	for _, c := range []struct {
		policy      local.Overflow
		allowOK     bool
		reserveOK   bool
		secondAllow bool
	}{
		{local.OverflowReject, false, false, false},
		{local.OverflowAllow, true, true, true},
		{local.OverflowShared, true, true, false},
	} {
		t.Run(fmt.Sprint("overflow-", uint8(c.policy)), func(t *testing.T) {
			l := newLimiter(t, lim, local.Config{Shards: 1, MaxKeys: 1, Overflow: c.policy})
			l.AllowNAt(t0, "held", 1)
			d := l.AllowNAt(t0, "new", 1)
			assert.Equal(t, c.allowOK, d.Allowed(), "Allow: %+v", d)
			assert.Equal(t, local.ReasonOverflow, d.Reason(), "Allow: %+v", d)
			r, err := l.ReserveAt(t0, "other", 1, 0)
			require.NoError(t, err)
			// The shared budget of 1 went to "new" above: Reserve must wait
			// for it, which a max delay of 0 refuses.
			wantOK := c.reserveOK && c.policy != local.OverflowShared
			assert.Equal(t, wantOK, r.OK, "Reserve: %+v", r)
			assert.Equal(t, local.ReasonOverflow, r.Reason, "Reserve: %+v", r)
			d = l.AllowNAt(t0, "third", 1)
			assert.Equal(t, c.secondAllow, d.Allowed(), "second Allow: %+v", d)
			assert.Equal(t, local.ReasonOverflow, d.Reason(), "second Allow: %+v", d)
		})
	}
}

// flipLimits flips l's limit between a and b, and calls each after every
// flip, until the returned stop is called; stop reports the flips made.
func flipLimits(l *local.Limiter, a, b local.Limit, each func()) (stop func() int) {
	quit, done := make(chan struct{}), make(chan struct{})
	flips := 0
	go func() {
		defer close(done)
		for ; ; flips++ {
			select {
			case <-quit:
				return
			default:
			}
			if flips%2 == 0 {
				l.SetLimit(a)
			} else {
				l.SetLimit(b)
			}
			each()
		}
	}()
	return func() int {
		close(quit)
		<-done
		return flips
	}
}

// TestAllowMultiSurvivesSetLimit: a limit flipped while multi-rule decisions
// run never leaves a rule reported admitted but uncharged. The flipped rule
// is a sliding log, decided under its key's lock, or a bucket that flips
// between GCRA and a token bucket of the same rate and burst, whose state is
// packed and moves to a new entry on every flip; both carry their state over
// exactly, and the bucket refills less than a token in the test.
func TestAllowMultiSurvivesSetLimit(t *testing.T) {
	for _, c := range []struct {
		name     string
		big, alt local.Limit
	}{
		{"log", local.Limit{Algorithm: local.SlidingWindowLog, Quota: 1 << 16, Window: time.Hour},
			local.Limit{Algorithm: local.SlidingWindowLog, Quota: 1, Window: time.Hour}},
		{"packed", local.Limit{Algorithm: local.GCRA, Quota: 1, Window: time.Hour, Burst: 1 << 19},
			local.Limit{Algorithm: local.TokenBucket, Quota: 1, Window: time.Hour, Burst: 1 << 19}},
	} {
		t.Run(c.name, func(t *testing.T) {
			flipped := newLimiter(t, c.big, local.Config{})
			other := newLimiter(t, local.Limit{Algorithm: local.FixedWindow, Quota: 1 << 20, Window: time.Hour}, local.Config{})
			stop := flipLimits(flipped, c.alt, c.big, func() {})
			admitted := int64(0)
			out := make([]local.Decision, 2)
			reqs := []local.Request{{flipped, "k", 1}, {other, "k", 1}}
			for i := range 60000 {
				if local.AllowMultiAt(t0.Add(time.Duration(i)*time.Microsecond), reqs, out) {
					admitted++
				}
			}
			stop()
			flipped.SetLimit(c.big)
			now := t0.Add(time.Minute)
			assert.Equal(t, admitted, maxCost(c.big)-flipped.AllowNAt(now, "k", 0).Remaining(), "the flipped rule's charge, against the multi decisions admitted")
			assert.Equal(t, admitted, int64(1<<20)-other.AllowNAt(now, "k", 0).Remaining(), "the other rule's charge, against the multi decisions admitted")
		})
	}
}

// TestPackedSurvivesSetLimitAndSweeps: decisions on packed states, lock-free,
// while the limit flips between GCRA and a token bucket of the same rate and
// burst, and sweeps run. Every flip moves the key's state into a new entry
// (the state itself carries over exactly: it is the same bucket), and a
// sweep marks an idle one dead; neither may lose an admission, or the
// bucket would start full again and admit more than burst + rate × time.
// The sweeps judge at the time all deciding goroutines have passed, as a
// Limiter's clock would.
func TestPackedSurvivesSetLimitAndSweeps(t *testing.T) {
	gcra := local.Limit{Algorithm: local.GCRA, Quota: 100, Window: time.Millisecond}
	bucket := local.Limit{Algorithm: local.TokenBucket, Quota: 100, Window: time.Millisecond}
	l := newLimiter(t, gcra, local.Config{NoBackgroundSweep: true})
	const ms, workers, perMs = 50, 4, 1000
	var admitted atomic.Int64
	var progress [workers]atomic.Int64 // µs each worker has passed
	swept := 0
	stop := flipLimits(l, bucket, gcra, func() { // and sweep, at the time every worker has passed
		passed := progress[0].Load()
		for w := range progress[1:] {
			passed = min(passed, progress[w+1].Load())
		}
		swept += l.SweepAt(t0.Add(time.Duration(passed) * time.Microsecond))
	})
	var wg sync.WaitGroup
	for g := range workers {
		wg.Go(func() {
			for i := range ms * perMs {
				us := int64(i) * 1000 / perMs
				if l.AllowNAt(t0.Add(time.Duration(us)*time.Microsecond), "hot", 1).Allowed() {
					admitted.Add(1)
				}
				progress[g].Store(us)
			}
		})
	}
	wg.Wait()
	flips := stop()
	most := maxCost(gcra) + gcra.Quota*ms // burst + rate × 50ms
	got := admitted.Load()
	assert.LessOrEqual(t, got, most, "admitted over %dms, want at most burst + rate × time", ms)
	assert.GreaterOrEqual(t, got, most/2, "admitted over %dms, want at least half of burst + rate × time", ms)
	t.Logf("admitted %d of at most %d; %d limit changes, %d evictions", admitted.Load(), most, flips, swept)
}

// TestSweepsRaceDecisions: sweeps evict keys while goroutines decide on
// them, and every key still admits exactly its limit per window, in every
// algorithm (packed words are evicted by compare-and-swap, the others under
// the entry's lock). Each phase is two windows later than the last, so
// every key held is idle when the phase starts: the sweeper, sweeping
// without pause at the phase's time, races the phase's first decisions for
// it, which the deciders make key after key. An
// eviction of a key with consumption pending would let it start afresh and
// admit more than its limit; a lost decision, fewer.
func TestSweepsRaceDecisions(t *testing.T) {
	for _, lim := range eachAlgorithm() {
		t.Run(lim.Algorithm.String(), func(t *testing.T) {
			l := newLimiter(t, lim, local.Config{})
			const keys, phases, workers = 64, 30, 4
			perKey := workers * 2 * maxCost(lim) // attempts per key and phase, more than it admits
			evictions := 0
			for phase := range phases {
				now := t0.Add(time.Duration(2*phase) * lim.Window)
				var admitted [keys]atomic.Int64
				ready, stop, swept := make(chan struct{}), make(chan struct{}), make(chan int)
				go func() {
					n := 0
					close(ready) // the deciders start with the first sweep
					for {
						select {
						case <-stop:
							swept <- n
							return
						default:
							n += l.SweepAt(now)
						}
					}
				}()
				<-ready
				var wg sync.WaitGroup
				for range workers {
					wg.Go(func() {
						for k := range keys {
							key := fmt.Sprint("k", k)
							for range perKey / workers {
								if l.AllowNAt(now, key, 1).Allowed() {
									admitted[k].Add(1)
								}
							}
						}
					})
				}
				wg.Wait()
				close(stop)
				evictions += <-swept
				for k := range admitted {
					require.Equal(t, maxCost(lim), admitted[k].Load(), "phase %d, key %d: admitted of %d", phase, k, perKey)
				}
			}
			t.Logf("%d evictions raced %d phases of decisions", evictions, phases)
		})
	}
}
