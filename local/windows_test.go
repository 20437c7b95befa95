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

func TestWindowVariantsRejected(t *testing.T) {
	for _, c := range []struct {
		name  string
		p     local.Limit
		field string
	}{
		{"no whole µs per sub-window", local.Limit{Algorithm: local.SubWindowCounter, Quota: 5, Window: 7 * time.Microsecond, SubWindows: 2}, "SubWindows"},
		{"default that does not divide", local.Limit{Algorithm: local.SubWindowCounter, Quota: 5, Window: 7*time.Millisecond + time.Microsecond}, "SubWindows"},
		{"too many sub-windows", local.Limit{Algorithm: local.SubWindowCounter, Quota: 5, Window: time.Hour, SubWindows: local.MaxSubWindows + 1}, "SubWindows"},
		{"negative sub-windows", local.Limit{Algorithm: local.SubWindowCounter, Quota: 5, Window: time.Hour, SubWindows: -1}, "SubWindows"},
		{"sub-windows on the counter", local.Limit{Algorithm: local.SlidingWindowCounter, Quota: 5, Window: time.Hour, SubWindows: 6}, "SubWindows"},
		{"burst on the sub-window counter", local.Limit{Algorithm: local.SubWindowCounter, Quota: 5, Window: time.Hour, Burst: 2}, "Burst"},
		{"sub-window counter past 2^51", local.Limit{Algorithm: local.SubWindowCounter, Quota: 1<<51 + 1, Window: time.Hour}, "Quota"},
		{"anchored log", local.Limit{Algorithm: local.SlidingWindowLog, Quota: 5, Window: time.Hour, Anchored: true}, "Anchored"},
		{"anchored bucket", local.Limit{Algorithm: local.GCRA, Quota: 5, Window: time.Hour, Anchored: true}, "Anchored"},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := c.p.Validate()
			require.ErrorIs(t, err, local.ErrInvalidConfig)
			var fe *config.FieldError
			require.ErrorAs(t, err, &fe)
			assert.Equal(t, c.field, fe.Field, "%v", err)
		})
	}
}

func TestWindowVariantsAccepted(t *testing.T) {
	for _, c := range []struct {
		p            local.Limit
		k, sub       int64
		anchored     bool
		name, parsed string
	}{
		{local.Limit{Algorithm: local.SubWindowCounter, Quota: 100, Window: time.Hour}, local.DefaultSubWindows, 360e6, false, "sub_window_counter 100/1h in 10", ""},
		{local.Limit{Algorithm: local.SubWindowCounter, Quota: 100, Window: time.Hour, SubWindows: 60, Anchored: true}, 60, 60e6, true, "sub_window_counter 100/1h in 60 anchored", ""},
		{local.Limit{Algorithm: local.SubWindowCounter, Quota: 1, Window: 64 * time.Microsecond, SubWindows: 64}, 64, 1, false, "sub_window_counter 1/64µs in 64", ""},
		{local.Limit{Algorithm: local.FixedWindow, Quota: 3, Window: time.Minute, Anchored: true}, 0, 0, true, "fixed_window 3/1m anchored", ""},
	} {
		lim, err := localx.NewLimit(c.p)
		require.NoError(t, err)
		sub, k := lim.Counter()
		assert.Equal(t, c.k, lim.SubWindows())
		assert.Equal(t, c.k, k)
		assert.Equal(t, c.sub, sub)
		assert.Equal(t, c.anchored, lim.Anchored())
		assert.Equal(t, c.name, lim.String())
	}
	a, err := parseAlgorithm("Sub-Window Counter")
	require.NoError(t, err)
	assert.Equal(t, local.SubWindowCounter, a)
}

// TestSubWindowNoAllocations: a key with requests in every sub-window
// decides without allocating once its ring holds them.
func TestSubWindowNoAllocations(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	for _, anchored := range []bool{false, true} {
		lim := local.Limit{Algorithm: local.SubWindowCounter, Quota: 1 << 20, Window: time.Minute, SubWindows: 60, Anchored: anchored}
		l := newLimiter(t, lim, local.Config{})
		now := t0
		for range 200 {
			now = now.Add(300 * time.Millisecond)
			require.True(t, l.AllowNAt(now, "hot", 1).Allowed())
		}
		a := testing.AllocsPerRun(1000, func() {
			now = now.Add(300 * time.Millisecond)
			l.AllowNAt(now, "hot", 1)
		})
		assert.Zero(t, a, "anchored %v", anchored)
	}
}

// TestWindowVariantsSetLimit: a sub-window counter keeps its counts under
// a new limit on the same sub-windows and starts afresh on others; an
// anchored fixed window keeps its start.
func TestWindowVariantsSetLimit(t *testing.T) {
	sub := func(limit, k int64, anchored bool) local.Limit {
		return local.Limit{Algorithm: local.SubWindowCounter, Quota: limit, Window: time.Minute, SubWindows: k, Anchored: anchored}
	}
	for _, c := range []struct {
		name     string
		from, to local.Limit
		want     int64 // remaining at once after the change, for a cost of 0
	}{
		{"same sub-windows, higher limit", sub(10, 6, false), sub(20, 6, false), 14},
		{"same sub-windows, lower limit", sub(10, 6, false), sub(5, 6, false), 0},
		{"other sub-windows", sub(10, 6, false), sub(10, 3, false), 10},
		{"anchored now", sub(10, 6, false), sub(10, 6, true), 10},
	} {
		t.Run(c.name, func(t *testing.T) {
			l := newLimiter(t, c.from, local.Config{})
			require.True(t, l.AllowNAt(t0.Add(time.Second), "k", 6).Allowed())
			require.NoError(t, l.SetLimit(c.to))
			assert.Equal(t, c.want, l.AllowNAt(t0.Add(2*time.Second), "k", 0).Remaining())
		})
	}
	t.Run("anchored fixed window", func(t *testing.T) {
		fixed := func(limit int64, w time.Duration) local.Limit {
			return local.Limit{Algorithm: local.FixedWindow, Quota: limit, Window: w, Anchored: true}
		}
		l := newLimiter(t, fixed(3, time.Minute), local.Config{})
		start := t0.Add(10 * time.Second)
		require.True(t, l.AllowNAt(start, "k", 2).Allowed())
		require.NoError(t, l.SetLimit(fixed(5, 2*time.Minute)))
		d := l.AllowNAt(start.Add(30*time.Second), "k", 3)
		require.True(t, d.Allowed())
		assert.Equal(t, 90*time.Second, d.ResetAfter(), "the window still starts at the first request")
		assert.False(t, l.AllowNAt(start.Add(2*time.Minute-time.Microsecond), "k", 1).Allowed())
		assert.True(t, l.AllowNAt(start.Add(2*time.Minute), "k", 5).Allowed())
	})
}
