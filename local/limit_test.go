package local_test

import (
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/local"
)

func TestNewLimitRejects(t *testing.T) {
	const day = 24 * time.Hour
	for _, c := range []struct {
		name  string
		p     local.Params
		field string
	}{
		{"no algorithm", local.Params{Limit: 1, Window: time.Second}, "Algorithm"},
		{"unknown algorithm", local.Params{Algorithm: 99, Limit: 1, Window: time.Second}, "Algorithm"},
		{"zero limit", local.Params{Algorithm: local.FixedWindow, Window: time.Second}, "Limit"},
		{"negative limit", local.Params{Algorithm: local.GCRA, Limit: -5, Window: time.Second}, "Limit"},
		{"zero window", local.Params{Algorithm: local.FixedWindow, Limit: 1}, "Window"},
		{"negative window", local.Params{Algorithm: local.FixedWindow, Limit: 1, Window: -time.Second}, "Window"},
		{"sub-microsecond window", local.Params{Algorithm: local.FixedWindow, Limit: 1, Window: 1500 * time.Nanosecond}, "Window"},
		{"absurd window", local.Params{Algorithm: local.SlidingWindowCounter, Limit: 1, Window: 367 * day}, "Window"},
		{"burst on a window algorithm", local.Params{Algorithm: local.FixedWindow, Limit: 1, Window: time.Second, Burst: 2}, "Burst"},
		{"burst on the log", local.Params{Algorithm: local.SlidingWindowLog, Limit: 1, Window: time.Second, Burst: 2}, "Burst"},
		{"burst on the counter", local.Params{Algorithm: local.SlidingWindowCounter, Limit: 1, Window: time.Second, Burst: 2}, "Burst"},
		{"negative burst", local.Params{Algorithm: local.TokenBucket, Limit: 1, Window: time.Second, Burst: -1}, "Burst"},
		{"log too long", local.Params{Algorithm: local.SlidingWindowLog, Limit: local.MaxLogLimit + 1, Window: time.Second}, "Limit"},
		{"fixed window past 2^51", local.Params{Algorithm: local.FixedWindow, Limit: 1<<51 + 1, Window: time.Second}, "Limit"},
		// A window of 999,999µs has no round step: 999,999 steps × 10^10 > 2^51.
		{"counter product past 2^51", local.Params{Algorithm: local.SlidingWindowCounter, Limit: 1e10, Window: 999999 * time.Microsecond}, "Limit"},
		// One per 366 days is an interval of 3.16·10^13µs; × 10^6 > 2^51.
		{"bucket product past 2^51", local.Params{Algorithm: local.TokenBucket, Limit: 1, Window: 366 * day, Burst: 1e6}, "Burst"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := local.NewLimit(c.p)
			require.ErrorIs(t, err, local.ErrInvalidLimit)
			var le *local.LimitError
			require.ErrorAs(t, err, &le)
			assert.Equal(t, c.field, le.Field, "err = %v, want a *LimitError for %s", err, c.field)
		})
	}
}

func TestNewLimitAccepts(t *testing.T) {
	for _, c := range []struct {
		p                   local.Params
		maxCost, steps, per int64
	}{
		{local.Params{Algorithm: local.FixedWindow, Limit: 1 << 51, Window: time.Second}, 1 << 51, 0, 0},
		{local.Params{Algorithm: local.SlidingWindowLog, Limit: local.MaxLogLimit, Window: local.MaxWindow}, local.MaxLogLimit, 0, 0},
		// A round day moves in 10s steps, which admits limits up to ~2.6·10^11.
		{local.Params{Algorithm: local.SlidingWindowCounter, Limit: 2.6e11, Window: 24 * time.Hour}, 2.6e11, 8640, 0},
		{local.Params{Algorithm: local.SlidingWindowCounter, Limit: 7, Window: time.Minute}, 7, 6000, 0},
		{local.Params{Algorithm: local.SlidingWindowCounter, Limit: 7, Window: 7 * time.Microsecond}, 7, 7, 0},
		// 10,000 per second is one per 100µs: the rate is reduced by the gcd.
		{local.Params{Algorithm: local.GCRA, Limit: 10000, Window: time.Second}, 10000, 0, 1},
		{local.Params{Algorithm: local.TokenBucket, Limit: 2, Window: time.Second, Burst: 10}, 10, 0, 1},
		{local.Params{Algorithm: local.LeakyBucket, Limit: 3, Window: time.Second}, 3, 0, 3},
	} {
		l, err := local.NewLimit(c.p)
		if !assert.NoError(t, err, "%+v", c.p) {
			continue
		}
		_, steps := l.Counter()
		per, _, _ := l.Emission()
		assert.Equal(t, [3]int64{c.maxCost, c.steps, c.per}, [3]int64{l.MaxCost(), steps, per}, "%v: max cost, steps, per", l)
	}
}

func TestNewRateLimit(t *testing.T) {
	for _, c := range []struct {
		rate   float64
		limit  int64
		window time.Duration
	}{
		{100, 100, time.Second},
		{0.5, 1, 2 * time.Second},
		{2.5, 5, 2 * time.Second},
		{1.0 / 3, 1, 3 * time.Second},
		{1.0 / 3600, 1, time.Hour},
		{1e9, 1e9, time.Second},
	} {
		l, err := local.NewRateLimit(local.TokenBucket, c.rate, 1)
		if !assert.NoError(t, err, "rate %v", c.rate) {
			continue
		}
		assert.Equal(t, c.limit, l.Limit(), "rate %v: limit", c.rate)
		assert.Equal(t, c.window, l.Window(), "rate %v: window", c.rate)
	}
	for _, rate := range []float64{math.NaN(), math.Inf(1), math.Inf(-1), 0, -1, 1e13, 1e-12} {
		_, err := local.NewRateLimit(local.GCRA, rate, 1)
		var le *local.LimitError
		if assert.ErrorAs(t, err, &le, "rate %v", rate) {
			assert.Equal(t, "rate", le.Field, "rate %v: err = %v, want a *LimitError for rate", rate, err)
		}
	}
	_, err := local.NewRateLimit(local.FixedWindow, 1, 1)
	var le *local.LimitError
	require.ErrorAs(t, err, &le, "window algorithm")
	assert.Equal(t, "Algorithm", le.Field, "window algorithm: err = %v, want a *LimitError for Algorithm", err)
}

func TestAlgorithmText(t *testing.T) {
	for _, a := range local.Algorithms() {
		b, err := a.MarshalText()
		require.NoError(t, err, "%v", a)
		var back local.Algorithm
		assert.NoError(t, back.UnmarshalText(b), "%v: round trip", a)
		assert.Equal(t, a, back, "%v: round trip", a)
	}
	for in, want := range map[string]local.Algorithm{
		"Token-Bucket": local.TokenBucket, " gcra ": local.GCRA, "sliding window log": local.SlidingWindowLog,
	} {
		got, err := local.ParseAlgorithm(in)
		assert.NoError(t, err, "ParseAlgorithm(%q)", in)
		assert.Equal(t, want, got, "ParseAlgorithm(%q)", in)
	}
	for _, in := range []string{"", "leaky", "token_bucket2", "\x00"} {
		_, err := local.ParseAlgorithm(in)
		assert.ErrorIs(t, err, local.ErrInvalidLimit, "ParseAlgorithm(%q)", in)
	}
	_, err := local.Algorithm(0).MarshalText()
	assert.Error(t, err, "the zero Algorithm marshalled")
}

func FuzzParseAlgorithm(f *testing.F) {
	for _, a := range local.Algorithms() {
		f.Add(a.String())
	}
	f.Add("Sliding-Window Counter")
	f.Fuzz(func(t *testing.T, s string) {
		a, err := local.ParseAlgorithm(s)
		if err != nil {
			return
		}
		again, err := local.ParseAlgorithm(a.String())
		require.NoError(t, err, "%q parsed as %v, which does not round-trip", s, a)
		assert.Equal(t, a, again, "%q parsed as %v, which does not round-trip", s, a)
	})
}
