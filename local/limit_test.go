package local_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/internal/config"
	"github.com/hybridlimit/hybridlimit/internal/localx"
	"github.com/hybridlimit/hybridlimit/local"
)

func TestLimitValidate(t *testing.T) {
	const day = 24 * time.Hour
	for _, c := range []struct {
		name  string
		p     local.Limit
		field string
	}{
		{"no algorithm", local.Limit{Quota: 1, Window: time.Second}, "Algorithm"},
		{"unknown algorithm", local.Limit{Algorithm: 99, Quota: 1, Window: time.Second}, "Algorithm"},
		{"zero limit", local.Limit{Algorithm: local.FixedWindow, Window: time.Second}, "Quota"},
		{"negative limit", local.Limit{Algorithm: local.GCRA, Quota: -5, Window: time.Second}, "Quota"},
		{"zero window", local.Limit{Algorithm: local.FixedWindow, Quota: 1}, "Window"},
		{"negative window", local.Limit{Algorithm: local.FixedWindow, Quota: 1, Window: -time.Second}, "Window"},
		{"sub-microsecond window", local.Limit{Algorithm: local.FixedWindow, Quota: 1, Window: 1500 * time.Nanosecond}, "Window"},
		{"absurd window", local.Limit{Algorithm: local.SlidingWindowCounter, Quota: 1, Window: 367 * day}, "Window"},
		{"burst on a window algorithm", local.Limit{Algorithm: local.FixedWindow, Quota: 1, Window: time.Second, Burst: 2}, "Burst"},
		{"burst on the log", local.Limit{Algorithm: local.SlidingWindowLog, Quota: 1, Window: time.Second, Burst: 2}, "Burst"},
		{"burst on the counter", local.Limit{Algorithm: local.SlidingWindowCounter, Quota: 1, Window: time.Second, Burst: 2}, "Burst"},
		{"negative burst", local.Limit{Algorithm: local.TokenBucket, Quota: 1, Window: time.Second, Burst: -1}, "Burst"},
		{"log too long", local.Limit{Algorithm: local.SlidingWindowLog, Quota: local.MaxLogLimit + 1, Window: time.Second}, "Quota"},
		{"fixed window past 2^51", local.Limit{Algorithm: local.FixedWindow, Quota: 1<<51 + 1, Window: time.Second}, "Quota"},
		// A window of 999,999µs has no round step: 999,999 steps × 10^10 > 2^51.
		{"counter product past 2^51", local.Limit{Algorithm: local.SlidingWindowCounter, Quota: 1e10, Window: 999999 * time.Microsecond}, "Quota"},
		// One per 366 days is an interval of 3.16·10^13µs; × 10^6 > 2^51.
		{"bucket product past 2^51", local.Limit{Algorithm: local.TokenBucket, Quota: 1, Window: 366 * day, Burst: 1e6}, "Burst"},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := c.p.Validate()
			require.ErrorIs(t, err, local.ErrInvalidConfig)
			var fe *config.FieldError
			require.ErrorAs(t, err, &fe)
			assert.Equal(t, c.field, fe.Field, "err = %v, want an error for %s", err, c.field)
			_, err = local.New(c.p, exampleConfig)
			assert.Equal(t, c.p.Validate(), err, "New's error")
		})
	}
}

func TestLimitAccepts(t *testing.T) {
	for _, c := range []struct {
		p                   local.Limit
		maxCost, steps, per int64
	}{
		{local.Limit{Algorithm: local.FixedWindow, Quota: 1 << 51, Window: time.Second}, 1 << 51, 0, 0},
		{local.Limit{Algorithm: local.SlidingWindowLog, Quota: local.MaxLogLimit, Window: local.MaxWindow}, local.MaxLogLimit, 0, 0},
		// A round day moves in 10s steps, which admits limits up to ~2.6·10^11.
		{local.Limit{Algorithm: local.SlidingWindowCounter, Quota: 2.6e11, Window: 24 * time.Hour}, 2.6e11, 8640, 0},
		{local.Limit{Algorithm: local.SlidingWindowCounter, Quota: 7, Window: time.Minute}, 7, 6000, 0},
		{local.Limit{Algorithm: local.SlidingWindowCounter, Quota: 7, Window: 7 * time.Microsecond}, 7, 7, 0},
		// 10,000 per second is one per 100µs: the rate is reduced by the gcd.
		{local.Limit{Algorithm: local.GCRA, Quota: 10000, Window: time.Second}, 10000, 0, 1},
		{local.Limit{Algorithm: local.TokenBucket, Quota: 2, Window: time.Second, Burst: 10}, 10, 0, 1},
		{local.Limit{Algorithm: local.LeakyBucket, Quota: 3, Window: time.Second}, 3, 0, 3},
	} {
		l, err := localx.NewLimit(c.p)
		if !assert.NoError(t, err, "%+v", c.p) {
			continue
		}
		_, steps := l.Counter()
		per, _, _ := l.Emission()
		assert.Equal(t, [3]int64{c.maxCost, c.steps, c.per}, [3]int64{l.MaxCost(), steps, per}, "%v: max cost, steps, per", l)
	}
}

func TestAlgorithmText(t *testing.T) {
	for _, a := range localx.Algorithms() {
		b, err := a.MarshalText()
		require.NoError(t, err, "%v", a)
		var back local.Algorithm
		assert.NoError(t, back.UnmarshalText(b), "%v: round trip", a)
		assert.Equal(t, a, back, "%v: round trip", a)
	}
	for in, want := range map[string]local.Algorithm{
		"Token-Bucket": local.TokenBucket, " gcra ": local.GCRA, "sliding window log": local.SlidingWindowLog,
	} {
		got, err := parseAlgorithm(in)
		assert.NoError(t, err, "UnmarshalText(%q)", in)
		assert.Equal(t, want, got, "UnmarshalText(%q)", in)
	}
	for _, in := range []string{"", "leaky", "token_bucket2", "\x00"} {
		_, err := parseAlgorithm(in)
		assert.ErrorIs(t, err, local.ErrInvalidConfig, "UnmarshalText(%q)", in)
	}
	_, err := local.Algorithm(0).MarshalText()
	assert.Error(t, err, "the zero Algorithm marshalled")
}

func FuzzAlgorithmText(f *testing.F) {
	for _, a := range localx.Algorithms() {
		f.Add(a.String())
	}
	f.Add("Sliding-Window Counter")
	f.Fuzz(func(t *testing.T, s string) {
		a, err := parseAlgorithm(s)
		if err != nil {
			return
		}
		again, err := parseAlgorithm(a.String())
		require.NoError(t, err, "%q parsed as %v, which does not round-trip", s, a)
		assert.Equal(t, a, again, "%q parsed as %v, which does not round-trip", s, a)
	})
}

// parseAlgorithm is Algorithm.UnmarshalText as a function.
func parseAlgorithm(s string) (local.Algorithm, error) {
	var a local.Algorithm
	err := a.UnmarshalText([]byte(s))
	return a, err
}
