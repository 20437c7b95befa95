package syncer_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/internal/localx"
	"github.com/hybridlimit/hybridlimit/internal/redistest"
	"github.com/hybridlimit/hybridlimit/internal/vectors"
	"github.com/hybridlimit/hybridlimit/local"
	"github.com/hybridlimit/hybridlimit/syncer"
)

// topologies runs f against the shared single server and the shared Cluster.
func topologies(t *testing.T, f func(t *testing.T, c redis.UniversalClient)) {
	t.Run("single", func(t *testing.T) { f(t, redistest.Client(t, redistest.Addr(t))) })
	t.Run("cluster", func(t *testing.T) { f(t, redistest.ClusterClient(t, redistest.ClusterAddrs(t))) })
}

func newCentral(t testing.TB, c redis.UniversalClient, ks syncer.Keyspace) *syncer.Central {
	t.Helper()
	if ks.Prefix == "" {
		ks.Prefix = redistest.Prefix(t)
	}
	cen, err := syncer.NewCentral(syncer.CentralConfig{Client: c, Keyspace: ks, Timeout: 5 * time.Second})
	require.NoError(t, err)
	return cen
}

func mustRule(t testing.TB, name string, p local.Limit) *syncer.Rule {
	t.Helper()
	r, err := syncer.NewRule(name, p)
	require.NoError(t, err, "rule %s", name)
	return r
}

// TestVectors runs the shared decision vectors through the Lua scripts,
// with the time passed in, in both forms of each algorithm's decision: its
// single-rule script (AllowNAt), and the multi-rule script deciding it
// alone (AllowMultiAt with one request), where the buckets' decision runs
// as a function answering a table rather than as a flat chunk answering in
// place. Every field of every decision must equal the vector, which package
// local meets too.
func TestVectors(t *testing.T) {
	forms := []struct {
		name  string
		allow func(ctx context.Context, cen *syncer.Central, at time.Time, r *syncer.Rule, n int64) (local.Decision, error)
	}{
		{"single", func(ctx context.Context, cen *syncer.Central, at time.Time, r *syncer.Rule, n int64) (local.Decision, error) {
			return syncer.AllowNAt(ctx, cen, at, r, "key", n)
		}},
		{"multi", func(ctx context.Context, cen *syncer.Central, at time.Time, r *syncer.Rule, n int64) (local.Decision, error) {
			out := []local.Decision{garbage}
			_, err := syncer.AllowMulti(ctx, cen, at, []syncer.Request{{Rule: r, Key: "key", N: n}}, out)
			return out[0], err
		}},
	}
	topologies(t, func(t *testing.T, c redis.UniversalClient) {
		for _, f := range forms {
			t.Run(f.name, func(t *testing.T) {
				cen := newCentral(t, c, syncer.Keyspace{})
				ctx := context.Background()
				for ci, vc := range vectors.Cases {
					t.Run(vc.Name, func(t *testing.T) {
						r := mustRule(t, fmt.Sprintf("v%d", ci), vc.Params)
						for i, s := range vc.Steps {
							got, err := f.allow(ctx, cen, time.UnixMicro(vectors.Base+s.At), r, s.N)
							require.NoError(t, err, "step %d", i)
							assert.Equal(t, localx.OutcomeOf(s.Want), localx.OutcomeOf(got), "step %d (at %v, n=%d)", i, time.Duration(s.At)*time.Microsecond, s.N)
						}
					})
				}
			})
		}
	})
}

// TestDifferential drives random request sequences (times forward and
// sometimes backwards, costs from 0 to beyond the limit, and limits changed
// on the way) through package local and through Redis: every decision must
// be identical, field by field.
func TestDifferential(t *testing.T) {
	topologies(t, func(t *testing.T, c redis.UniversalClient) {
		cen := newCentral(t, c, syncer.Keyspace{})
		seed := uint64(2026)
		if v := os.Getenv("HYBRIDLIMIT_DIFF_SEED"); v != "" { // for long hunts: go test -run Differential with many seeds
			seed, _ = strconv.ParseUint(v, 10, 64)
		}
		rng := rand.New(rand.NewPCG(seed, 11))
		windows := []time.Duration{time.Second, time.Minute, 7 * time.Millisecond, 3*time.Second + 17*time.Microsecond}
		randomParams := func(a local.Algorithm) local.Limit {
			p := local.Limit{Algorithm: a, Quota: 1 + rng.Int64N(30), Window: windows[rng.IntN(len(windows))]}
			if a == local.TokenBucket || a == local.LeakyBucket || a == local.GCRA {
				p.Burst = rng.Int64N(40)
			}
			return p
		}
		sequences, steps := 60, 80
		if testing.Short() {
			sequences = 12
		}
		for seq := range sequences {
			algo := localx.Algorithms()[seq%6]
			p := randomParams(algo)
			differential(t, cen, rng, fmt.Sprintf("seed %d sequence %d", seed, seq), fmt.Sprintf("d%d", seq), p, steps, func() local.Limit {
				// The limit changes at runtime, mostly within the algorithm.
				np := randomParams(algo)
				if rng.IntN(4) == 0 {
					np = randomParams(localx.Algorithms()[rng.IntN(6)])
				}
				return np
			})
		}
	})
}

// differential drives one random sequence of steps on one key through
// package local and through Redis, starting under p: at each step the
// limit may change to what change returns, time may run back by up to p's
// window or move forward, and a random cost is decided by both, which
// must agree field by field. label names the sequence in a failure.
func differential(t *testing.T, cen *syncer.Central, rng *rand.Rand, label, name string, p local.Limit, steps int, change func() local.Limit) {
	t.Helper()
	ctx := context.Background()
	rule := mustRule(t, name, p)
	lim := newLocal(t, syncer.RuleLimit(rule))
	now := vectors.Base + rng.Int64N(int64(time.Hour/time.Microsecond))
	var history []string // the sequence so far, printed on a mismatch
	for step := range steps {
		switch r := rng.IntN(20); {
		case r == 0: // the limit changes at runtime
			rule = mustRule(t, name, change())
			require.NoError(t, lim.SetLimit(syncer.RuleLimit(rule).Params()), "%s step %d", label, step)
			history = append(history, fmt.Sprintf("  limit now %v", syncer.RuleLimit(rule)))
		case r == 1: // time runs backwards
			now -= rng.Int64N(int64(p.Window/time.Microsecond) + 1)
		case r < 8:
			now += rng.Int64N(int64(syncer.RuleLimit(rule).Window()/time.Microsecond)/4 + 1)
		}
		n := rng.Int64N(syncer.RuleLimit(rule).MaxCost() + 2)
		at := time.UnixMicro(now)
		want := lim.AllowNAt(at, "k", n)
		got, err := syncer.AllowNAt(ctx, cen, at, rule, "k", n)
		require.NoError(t, err, "%s step %d", label, step)
		history = append(history, fmt.Sprintf("  step %d t=%d n=%d: %+v", step, now, n, want))
		require.Equal(t, localx.OutcomeOf(want), localx.OutcomeOf(got), "%s (%v) step %d (t=%d n=%d): redis, want local's decision\nhistory:\n%s",
			label, syncer.RuleLimit(rule), step, now, n, strings.Join(history[max(len(history)-12, 0):], "\n"))
	}
}

// TestDifferentialWindowVariants is TestDifferential for the sub-window
// counter, aligned and anchored, and the anchored fixed window; limits
// change within them and, now and then, to any algorithm.
func TestDifferentialWindowVariants(t *testing.T) {
	topologies(t, func(t *testing.T, c redis.UniversalClient) {
		cen := newCentral(t, c, syncer.Keyspace{})
		seed := uint64(2027)
		if v := os.Getenv("HYBRIDLIMIT_DIFF_SEED"); v != "" {
			seed, _ = strconv.ParseUint(v, 10, 64)
		}
		rng := rand.New(rand.NewPCG(seed, 13))
		windows := []time.Duration{time.Second, time.Minute, 7 * time.Millisecond, 3*time.Second + 18*time.Microsecond, 60 * time.Microsecond}
		variant := func(v int) local.Limit {
			p := local.Limit{Algorithm: local.SubWindowCounter, Quota: 1 + rng.Int64N(30), Window: windows[rng.IntN(len(windows))], Anchored: v != 0}
			if v == 2 {
				p.Algorithm = local.FixedWindow
				return p
			}
			var ks []int64
			for k := int64(1); k <= 64; k++ { // package local's bound on SubWindows
				if p.Window.Microseconds()%k == 0 {
					ks = append(ks, k)
				}
			}
			p.SubWindows = ks[rng.IntN(len(ks))]
			return p
		}
		sequences, steps := 45, 80
		if testing.Short() {
			sequences = 9
		}
		for seq := range sequences {
			v := seq % 3
			p := variant(v)
			differential(t, cen, rng, fmt.Sprintf("seed %d sequence %d", seed, seq), fmt.Sprintf("dv%d", seq), p, steps, func() local.Limit {
				// Mostly within the variants, now and then to any algorithm.
				np := variant(rng.IntN(3))
				if rng.IntN(2) == 0 {
					np = variant(v)
					np.Window, np.SubWindows = p.Window, p.SubWindows // the same sub-windows: counts kept
				}
				if rng.IntN(5) == 0 {
					np = local.Limit{Algorithm: localx.Algorithms()[rng.IntN(len(localx.Algorithms()))], Quota: 1 + rng.Int64N(30), Window: time.Second}
				}
				return np
			})
		}
	})
}

// TestSameBucketChange: a rule changed to the same rate and burst under
// another bucket algorithm or window keeps its state in Redis exactly, as
// local does (its fraction of a token included), and a change of rate
// carries the tokens over there as here.
func TestSameBucketChange(t *testing.T) {
	topologies(t, func(t *testing.T, c redis.UniversalClient) {
		cen := newCentral(t, c, syncer.Keyspace{})
		ctx := context.Background()
		mk := func(a local.Algorithm, n int64, w time.Duration, burst int64) local.Limit {
			return local.Limit{Algorithm: a, Quota: n, Window: w, Burst: burst}
		}
		from := mk(local.TokenBucket, 3, time.Second, 3) // an interval of 333,333⅓ µs
		for i, to := range []local.Limit{
			mk(local.GCRA, 3, time.Second, 3), mk(local.LeakyBucket, 6, 2*time.Second, 3), // the same bucket
			mk(local.GCRA, 4, time.Second, 3), mk(local.TokenBucket, 3, time.Second, 5), // another one
		} {
			name := fmt.Sprintf("same%d", i)
			lim := newLocal(t, localx.MustLimit(from))
			rule := mustRule(t, name, from)
			t0 := vectors.Base
			for _, step := range []struct {
				at, n  int64
				change bool
			}{{0, 2, false}, {100_000, 0, true}, {100_000, 1, false}, {500_000, 2, false}, {700_000, 1, false}, {2_000_000, 3, false}} {
				if step.change {
					rule = mustRule(t, name, to)
					require.NoError(t, lim.SetLimit(syncer.RuleLimit(rule).Params()))
				}
				at := time.UnixMicro(t0 + step.at)
				want := lim.AllowNAt(at, "k", step.n)
				got, err := syncer.AllowNAt(ctx, cen, at, rule, "k", step.n)
				require.NoError(t, err)
				require.Equal(t, localx.OutcomeOf(want), localx.OutcomeOf(got), "%v → %v, at +%dµs n=%d: redis, want local's decision", from, syncer.RuleLimit(rule), step.at, step.n)
			}
		}
	})
}
