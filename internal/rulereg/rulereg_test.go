package rulereg_test

import (
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/hybrid"
	"github.com/hybridlimit/hybridlimit/internal/localx"
	"github.com/hybridlimit/hybridlimit/internal/rulereg"
	"github.com/hybridlimit/hybridlimit/local"
)

func want(t *testing.T, name string, quota int64, mode hybrid.Mode) rulereg.Want {
	t.Helper()
	lim, err := localx.NewLimit(local.Limit{Algorithm: local.FixedWindow, Quota: quota, Window: time.Minute})
	require.NoError(t, err)
	return rulereg.Want{Name: name, Limit: lim, Mode: mode, ID: name}
}

// TestApply: a rule kept keeps its hybrid rule, a changed limit is set in
// place, a change of mode is refused without changing anything, and Prune
// unregisters what a set no longer uses.
func TestApply(t *testing.T) {
	l, err := hybrid.New(hybrid.Config{})
	require.NoError(t, err)
	t.Cleanup(func() { l.Close() })
	r := rulereg.New(l, slog.New(slog.DiscardHandler), "test")

	first, err := r.Apply([]rulereg.Want{want(t, "a", 1, 0), want(t, "b", 1, 0)})
	require.NoError(t, err)
	require.Len(t, first, 2)
	assert.Equal(t, 2, l.Stats().Rules)

	ws := []rulereg.Want{want(t, "a", 5, 0)}
	again, err := r.Apply(ws)
	require.NoError(t, err)
	assert.Same(t, first[0], again[0], "the same hybrid rule, its limit set in place")
	r.Prune(ws)
	assert.Equal(t, 1, l.Stats().Rules, "b unregistered")

	_, err = r.Apply([]rulereg.Want{want(t, "c", 1, 0), want(t, "a", 5, hybrid.Central)})
	var e *rulereg.Error
	require.True(t, errors.As(err, &e), err)
	assert.Equal(t, "mode", e.Field)
	assert.Equal(t, 1, l.Stats().Rules, "c, registered before a was refused, is gone")
}

// TestOverrides: an override's name hides its tier or key, and its burst
// keeps the rule's ratio.
func TestOverrides(t *testing.T) {
	assert.Equal(t, rulereg.OverrideName("r", "gold"), rulereg.OverrideName("r", "gold"))
	assert.NotContains(t, rulereg.OverrideName("r", "secret-key"), "secret")
	o := rulereg.OverrideLimit(local.Limit{Algorithm: local.GCRA, Quota: 10, Burst: 20, Window: time.Second}, 5)
	assert.Equal(t, int64(5), o.Quota)
	assert.Equal(t, int64(10), o.Burst)
	o = rulereg.OverrideLimit(local.Limit{Algorithm: local.GCRA, Quota: 10, Burst: 1, Window: time.Second}, 2)
	assert.Equal(t, int64(1), o.Burst, "at least 1")
}
