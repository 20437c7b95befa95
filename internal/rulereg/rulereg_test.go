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
	"github.com/hybridlimit/hybridlimit/internal/redistest"
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

// TestApplyGlobal: a rule's reach cannot change under the same name, as
// its mode cannot, whichever way; the refusal comes before the Limiter is
// asked, and a Limiter without Config.Global refuses a rule of global
// reach, the error on the global field.
func TestApplyGlobal(t *testing.T) {
	l, err := hybrid.New(hybrid.Config{})
	require.NoError(t, err)
	t.Cleanup(func() { l.Close() })
	r := rulereg.New(l, slog.New(slog.DiscardHandler), "test")

	g := want(t, "g", 1, 0)
	g.Global = true
	_, err = r.Apply([]rulereg.Want{g})
	var e *rulereg.Error
	require.ErrorAs(t, err, &e)
	assert.Equal(t, "global", e.Field)
	assert.Equal(t, "cannot register", e.Reason)
	assert.ErrorIs(t, err, hybrid.ErrInvalidRule)
	require.Error(t, e.Err)
	assert.Contains(t, e.Err.Error(), "Config.Global")
	assert.Zero(t, l.Stats().Rules)

	_, err = r.Apply([]rulereg.Want{want(t, "g", 1, 0)})
	require.NoError(t, err)
	_, err = r.Apply([]rulereg.Want{g})
	require.ErrorAs(t, err, &e)
	assert.Equal(t, "global", e.Field)
	assert.Equal(t, "was false; a rule's global cannot change under the same ID", e.Reason)
	assert.NoError(t, e.Err, "refused before the Limiter is asked")
	assert.Equal(t, 1, l.Stats().Rules)
}

// TestApplyGlobalRedis: on a Limiter with Config.Global, a rule of global
// reach registers, keeps its hybrid rule across versions, takes a new
// limit in place, and cannot stop being global under the same name.
func TestApplyGlobalRedis(t *testing.T) {
	addr := redistest.Addr(t)
	l, err := hybrid.New(hybrid.Config{
		Redis: redistest.Client(t, addr), Global: redistest.Client(t, addr), Region: "eu-west",
		Keyspace: hybrid.Keyspace{Prefix: redistest.Prefix(t)}, Logger: slog.New(slog.DiscardHandler),
	})
	require.NoError(t, err)
	t.Cleanup(func() { l.Close() })
	r := rulereg.New(l, slog.New(slog.DiscardHandler), "test")

	g := want(t, "g", 10, 0)
	g.Global = true
	first, err := r.Apply([]rulereg.Want{g})
	require.NoError(t, err)
	assert.True(t, first[0].Global)
	assert.Equal(t, hybrid.Hybrid, first[0].Mode, "the Limiter's default mode")

	g = want(t, "g", 20, 0)
	g.Global = true
	again, err := r.Apply([]rulereg.Want{g})
	require.NoError(t, err)
	assert.Same(t, first[0], again[0], "the same hybrid rule, its limit set in place")

	_, err = r.Apply([]rulereg.Want{want(t, "g", 20, 0)})
	var e *rulereg.Error
	require.ErrorAs(t, err, &e)
	assert.Equal(t, "global", e.Field)
	assert.Contains(t, e.Reason, "was true")
	assert.Equal(t, 1, l.Stats().Rules)
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
