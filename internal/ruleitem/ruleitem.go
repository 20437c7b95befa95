// Package ruleitem decides the rules a request matched, all or nothing,
// and reads their decisions as the rate-limit fields tell them: the one
// logic of httplimit's and grpclimit's requests. A request's matched rules
// are Items, held inside the caller's own item type (which adds its rule
// and target) and reached through Holder.
package ruleitem

import (
	"context"
	"strconv"
	"time"

	"github.com/hybridlimit/hybridlimit/hybrid"
	"github.com/hybridlimit/hybridlimit/local"
)

// Item is one matched rule of a request and its decision.
type Item struct {
	Req    hybrid.Request
	Shadow bool
	D      hybrid.Decision
}

// Holder is a pointer to a caller's item, which holds an Item.
type Holder[T any] interface {
	*T
	RuleItem() *Item
}

// Violated reports whether it refused the request, or would have.
func (it *Item) Violated() bool {
	return !it.D.Allowed() && it.D.Reason() != local.ReasonOK
}

// Unavailable reports whether it is a refusal made without Redis by a
// FailClosed rule: no limit decided it.
func (it *Item) Unavailable() bool {
	return !it.D.Allowed() && it.D.Reason() == local.ReasonUnavailable
}

// Figures reports whether its decision has figures of a limit: not one of
// FailOpen or FailClosed, made without Redis and without a limit.
func (it *Item) Figures() bool {
	return !(it.D.Degraded() && it.D.Reason() == local.ReasonUnavailable)
}

// Decided reports whether it has a decision: shadow items are decided only
// when the enforced ones admit.
func (it *Item) Decided(admitted bool) bool { return admitted || !it.Shadow }

// Reset returns the t of an item: the seconds until its quota is whole
// again, or for a violated item until the refused request would be
// admitted (at least 1), so that a retry delay in seconds is never below
// it.
func (it *Item) Reset() int64 {
	if it.Violated() {
		return max(Seconds(it.D.RetryAfter()), 1)
	}
	return Seconds(it.D.ResetAfter())
}

// Seconds returns d in whole seconds, rounded up.
func Seconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Second - 1) / time.Second)
}

// Batch is the room Decide works in, kept from one request to the next.
type Batch struct {
	reqs []hybrid.Request
	out  []hybrid.Decision
}

// Clear drops the requests' keys, so that a pooled Batch keeps none.
func (b *Batch) Clear() { clear(b.reqs) }

// Decide decides the items whose Shadow is shadow, all or nothing
// (hybrid.Limiter.AllowMulti; AllowN for one), and writes their
// decisions. It reports whether they were admitted (true for none), and
// the Limiter's error.
func Decide[T any, P Holder[T]](ctx context.Context, l *hybrid.Limiter, items []T, b *Batch, shadow bool) (bool, error) {
	b.reqs, b.out = b.reqs[:0], b.out[:0]
	first := -1
	for i := range items {
		if it := P(&items[i]).RuleItem(); it.Shadow == shadow {
			if first < 0 {
				first = i
			}
			b.reqs = append(b.reqs, it.Req)
		}
	}
	switch len(b.reqs) {
	case 0:
		return true, nil
	case 1:
		it := P(&items[first]).RuleItem()
		var err error
		it.D, err = l.AllowN(ctx, it.Req.Rule, it.Req.Key, it.Req.N)
		return it.D.Allowed(), err
	}
	if cap(b.out) < len(b.reqs) {
		b.out = make([]hybrid.Decision, len(b.reqs))
	}
	b.out = b.out[:len(b.reqs)]
	admitted, err := l.AllowMulti(ctx, b.reqs, b.out)
	j := 0
	for i := range items {
		if it := P(&items[i]).RuleItem(); it.Shadow == shadow {
			it.D = b.out[j]
			j++
		}
	}
	return admitted, err
}

// Degraded reports whether a failure policy made one of the decisions of
// the items whose Shadow is shadow.
func Degraded[T any, P Holder[T]](items []T, shadow bool) bool {
	for i := range items {
		if it := P(&items[i]).RuleItem(); it.Shadow == shadow && it.D.Degraded() {
			return true
		}
	}
	return false
}

// Headline returns the index of the item the single-policy fields
// describe: on a refusal the violated rule with the longest wait;
// otherwise the one with the least remaining (the longest reset among
// equals); -1 when no decided item has figures (FailOpen or FailClosed
// decided them all).
func Headline[T any, P Holder[T]](items []T, admitted bool) int {
	best := -1
	var b *Item
	for i := range items {
		it := P(&items[i]).RuleItem()
		if !it.Decided(admitted) || !it.Figures() {
			continue
		}
		switch {
		case b == nil:
		case !admitted:
			if !it.Violated() || b.Violated() && it.D.RetryAfter() <= b.D.RetryAfter() {
				continue
			}
		case it.D.Remaining() > b.D.Remaining() ||
			it.D.Remaining() == b.D.Remaining() && it.D.ResetAfter() <= b.D.ResetAfter():
			continue
		}
		best, b = i, it
	}
	return best
}

// QuotaRefused reports whether an enforced rule refused the request for
// its limit; false when only FailClosed rules, unable to reach Redis, did.
func QuotaRefused[T any, P Holder[T]](items []T) bool {
	for i := range items {
		if it := P(&items[i]).RuleItem(); !it.Shadow && it.Violated() && !it.Unavailable() {
			return true
		}
	}
	return false
}

// AppendName appends a rule ID as a Structured Field string; IDs are rule
// names, which need no escaping.
func AppendName(b []byte, id string) []byte {
	b = append(b, '"')
	b = append(b, id...)
	return append(b, '"')
}

// AppendPolicy appends rule id's RateLimit-Policy item for limit q and a
// window of w seconds: "id";q=q;w=w.
func AppendPolicy(b []byte, id string, q, w int64) []byte {
	b = AppendName(b, id)
	b = append(b, ";q="...)
	b = strconv.AppendInt(b, q, 10)
	b = append(b, ";w="...)
	return strconv.AppendInt(b, w, 10)
}

// AppendRateLimit appends rule id's RateLimit item: "id";r=r;t=t.
func AppendRateLimit(b []byte, id string, r, t int64) []byte {
	b = AppendName(b, id)
	b = append(b, ";r="...)
	b = strconv.AppendInt(b, r, 10)
	b = append(b, ";t="...)
	return strconv.AppendInt(b, t, 10)
}

// Choose returns the limit a matched rule decides key with: its override
// for the key, else for the caller's tier, else base; ok is false when the
// rule is for another tier (ruleTier set, and not the caller's). tier
// tells the caller's tier; it is asked only when the rule names a tier or
// has overrides.
func Choose[T any](base *T, ruleTier string, over map[string]*T, key string, tier func() string) (limit *T, ok bool) {
	if ruleTier == "" && over == nil {
		return base, true
	}
	t := tier()
	if ruleTier != "" && t != ruleTier {
		return nil, false
	}
	if o := over[key]; o != nil {
		return o, true
	}
	if o := over[t]; o != nil && t != "" {
		return o, true
	}
	return base, true
}
