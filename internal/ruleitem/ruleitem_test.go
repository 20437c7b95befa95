package ruleitem_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/hybrid"
	"github.com/hybridlimit/hybridlimit/internal/clocktest"
	"github.com/hybridlimit/hybridlimit/internal/ruleitem"
)

type item struct {
	name string
	ruleitem.Item
}

func (it *item) RuleItem() *ruleitem.Item { return &it.Item }

// TestDecideAndHeadline: enforced items are decided together, all or
// nothing; shadow items apart; the headline is the refusing rule with the
// longest wait, or the admitting one with the least left.
func TestDecideAndHeadline(t *testing.T) {
	clk := clocktest.New(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	l, err := hybrid.New(hybrid.Config{Clock: clk})
	require.NoError(t, err)
	t.Cleanup(func() { l.Close() })
	reg := func(name string, quota int64, window time.Duration) *hybrid.Rule {
		r, err := l.Register(hybrid.Rule{Name: name, Limit: hybrid.Limit{Algorithm: hybrid.FixedWindow, Quota: quota, Window: window}})
		require.NoError(t, err)
		return r
	}
	minute, second := reg("minute", 3, time.Minute), reg("second", 1, time.Second)
	items := []item{
		{"minute", ruleitem.Item{Req: hybrid.Request{Rule: minute, Key: "k", N: 1}}},
		{"second", ruleitem.Item{Req: hybrid.Request{Rule: second, Key: "k", N: 1}}},
	}
	var b ruleitem.Batch
	ctx := context.Background()

	ok, err := ruleitem.Decide(ctx, l, items, &b, false)
	require.NoError(t, err)
	require.True(t, ok)
	assert.Equal(t, "second", items[ruleitem.Headline(items, true)].name, "0 left of 1")

	ok, err = ruleitem.Decide(ctx, l, items, &b, false)
	require.NoError(t, err)
	require.False(t, ok)
	h := ruleitem.Headline(items, false)
	assert.Equal(t, "second", items[h].name, "the only refusing rule")
	assert.Equal(t, int64(1), items[h].Reset())
	assert.True(t, ruleitem.QuotaRefused(items))
	assert.False(t, ruleitem.Degraded(items, false))

	clk.Add(time.Second)
	ok, err = ruleitem.Decide(ctx, l, items, &b, false)
	require.NoError(t, err)
	assert.True(t, ok, "minute was not charged for the refusal: 2 of 3 used")
	ok, _ = ruleitem.Decide(ctx, l, items[:1], &b, false)
	assert.True(t, ok, "3 of 3")
	ok, _ = ruleitem.Decide(ctx, l, items[:1], &b, false)
	assert.False(t, ok, "a fourth")
	ok, _ = ruleitem.Decide(ctx, l, items, &b, true)
	assert.True(t, ok, "no shadow item: admitted")
	b.Clear()
}

// TestFields: the structured-field items as the draft writes them.
func TestFields(t *testing.T) {
	assert.Equal(t, `"api";q=100;w=60`, string(ruleitem.AppendPolicy(nil, "api", 100, 60)))
	assert.Equal(t, `"api";r=7;t=3`, string(ruleitem.AppendRateLimit(nil, "api", 7, 3)))
	assert.Equal(t, int64(0), ruleitem.Seconds(0))
	assert.Equal(t, int64(1), ruleitem.Seconds(time.Nanosecond))
	assert.Equal(t, int64(2), ruleitem.Seconds(1500*time.Millisecond))
}

// TestChoose: an override for the key wins over one for the tier, which
// wins over the base; a rule for another tier does not apply; the tier is
// asked only when the rule needs it.
func TestChoose(t *testing.T) {
	base, gold, vip := new(int), new(int), new(int)
	over := map[string]*int{"gold": gold, "k-vip": vip}
	asked := 0
	tierOf := func(tier string) func() string { return func() string { asked++; return tier } }
	for _, c := range []struct {
		name, ruleTier, key, tier string
		over                      map[string]*int
		want                      *int
		ok                        bool
	}{
		{"no tier, no overrides", "", "k", "gold", nil, base, true},
		{"the key's override", "", "k-vip", "gold", over, vip, true},
		{"the tier's override", "", "k", "gold", over, gold, true},
		{"no override applies", "", "k", "silver", over, base, true},
		{"the rule's tier", "gold", "k", "gold", nil, base, true},
		{"another tier", "gold", "k", "silver", nil, nil, false},
	} {
		got, ok := ruleitem.Choose(base, c.ruleTier, c.over, c.key, tierOf(c.tier))
		assert.Equal(t, c.ok, ok, c.name)
		assert.Same(t, c.want, got, c.name)
	}
	assert.Equal(t, 5, asked, "the tier asked by every case but the first")
}
