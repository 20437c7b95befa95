package lease

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/internal/localx"
	"github.com/hybridlimit/hybridlimit/local"
)

// testParams are a syncer's defaults at a 100ms interval.
var testParams = Params{
	Interval: 100 * time.Millisecond, Horizon: 200 * time.Millisecond, MinGap: 10 * time.Millisecond,
	PaceGap: 2 * time.Millisecond, Safety: 10 * time.Millisecond, IdleRelease: 300 * time.Millisecond,
	Epsilon: 0.05,
}

// windowRule is the lease rule of alg at 1,000 per second, on a cluster of
// one node.
func windowRule(alg local.Algorithm) *Rule {
	return testRule(localx.MustLimit(local.Limit{Algorithm: alg, Quota: 1000, Window: time.Second}))
}

// testRule is the lease rule of lim under testParams, on a cluster of one
// node.
func testRule(lim localx.Limit) *Rule {
	r, err := NewRule(lim, testParams, NewCluster(1), nil)
	if err != nil {
		panic(err)
	}
	return r
}

// TestApplyClockAhead: a node whose estimate of Redis's clock runs a little
// ahead sends, just after a window boundary by its clock, an exchange that
// Redis runs just before it, in a window whose budget is spent. The reply's
// "exhausted" speaks of that window, the node's previous one: the node's
// new window must not be refused for it.
func TestApplyClockAhead(t *testing.T) {
	lr := windowRule(local.FixedWindow)
	const w = int64(1e6)
	start := int64(1_900_000_000) * w // a window's start, node time = Redis time (offset 0)
	for _, tc := range []struct {
		name      string
		rnow      int64 // Redis's time in the reply
		exhausted bool
		cur, prev bool // the node's flags after it
	}{
		{"ahead, previous window exhausted", start - 300, true, false, true},
		{"ahead, previous window open", start - 300, false, false, false},
		{"same window, exhausted", start + 400, true, true, false},
		{"same window, open", start + 400, false, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var k Lease
			k.flags = flagSynced
			now := start + 500 // 0.5ms into the node's window
			k.Decide(lr, now, 1)
			require.Equal(t, start, k.wid, "the node's window")
			q := &Request{SentAt: now, Cur: Report{Window: k.wid, Used: k.used}}
			k.ApplyWindow(lr, q, &WindowReply{
				Now: tc.rnow, Window: tc.rnow - tc.rnow%w, Epoch: 1, Committed: 1000, NextGranted: 100,
				PrevCommitted: 1000, Exhausted: tc.exhausted, Live: 1,
			}, now)
			assert.Equal(t, tc.cur, k.flags&flagExhausted != 0, "the node's window exhausted")
			assert.Equal(t, tc.prev, k.flags&flagExhaustedPrev != 0, "its previous window exhausted")
		})
	}
}

// TestDecideOffsetBack: a reply may move a key's offset back across a
// window boundary the lease has already crossed. A decision then still
// counts in the lease's window, and its reset-after says so: it must not
// run to the end of the window before, whose grant it did not use.
func TestDecideOffsetBack(t *testing.T) {
	for _, alg := range []local.Algorithm{local.FixedWindow, local.SlidingWindowCounter} {
		t.Run(alg.String(), func(t *testing.T) {
			lr := windowRule(alg)
			const w = int64(1e6)
			start := int64(1_900_000_000) * w
			var k Lease
			k.flags = flagSynced
			k.Decide(lr, start+200, 1) // 0.2ms into a window, offset 0
			k.granted = 100
			k.offset = -500 // a reply moves the offset back: node time start+300 reads as start-200
			v, _ := k.Decide(lr, start+300, 1)
			require.Equal(t, start, k.wid, "the lease's window")
			require.Equal(t, local.ReasonOK, v.Reason)
			// The window the decision names: the boundary nearest to now + reset.
			end := start + 300 + k.offset + v.Reset
			assert.Equal(t, start+w, (end+w/2)/w*w, "the window the reset-after names ends at the lease's end")
			assert.LessOrEqual(t, v.Reset, w)
			assert.LessOrEqual(t, v.Remaining, int64(1000), "remaining within the limit")
		})
	}
}

// TestApplyBucket: a bucket reply sets the share and the tokens granted,
// counts the debt sent as reported, asks for an exchange at the next
// regular round, not an early one, when the share shrank (Redis keeps the
// old one committed until told) or tokens above the burst go back to the
// pool, and drops the tokens held when Redis's state was lost (a new
// epoch) or revoked.
func TestApplyBucket(t *testing.T) {
	lr := testRule(localx.MustLimit(local.Limit{Algorithm: local.TokenBucket, Quota: 1000, Window: time.Second, Burst: 100}))
	const now = int64(1_900_000_000_000_000)
	held := func() Lease {
		return Lease{flags: flagSynced, epoch: 1, rate: 500, burst: 50, expiry: now + 1e6, tokens: 20, last: now, debt: 3, lastSync: now, lastUse: now}
	}
	for _, tc := range []struct {
		name   string
		reply  BucketReply
		tokens int64
		shrunk bool
	}{
		{"renewed", BucketReply{Now: now, Epoch: 1, Rate: 500, Burst: 50, Expiry: now + 2e6, Grant: 10, Pool: 40}, 30, false},
		{"shrunk", BucketReply{Now: now, Epoch: 1, Rate: 250, Burst: 25, Expiry: now + 2e6, Pool: 40}, 20, true},
		{"new epoch", BucketReply{Now: now, Epoch: 2, Rate: 500, Burst: 50, Expiry: now + 2e6, Grant: 10, Pool: 40}, 10, false},
		{"revoked", BucketReply{Now: now, Epoch: 1, Rate: 500, Burst: 50, Expiry: now + 2e6, Grant: 5, Pool: 40, Revoked: true}, 5, false},
		{"grant above the burst", BucketReply{Now: now, Epoch: 1, Rate: 500, Burst: 50, Expiry: now + 2e6, Grant: 90, Pool: 40}, 50, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k := held()
			q := &Request{Bucket: true, SentAt: now, Debt: 3}
			k.ApplyBucket(lr, q, &tc.reply, now)
			assert.Equal(t, tc.tokens, k.tokens, "tokens")
			assert.Zero(t, k.flags&flagUrgent, "asks for no early exchange")
			assert.False(t, k.Due(lr, now+testParams.MinGap.Microseconds()), "not due a MinGap on")
			assert.Equal(t, tc.shrunk, k.Due(lr, now+testParams.Interval.Microseconds()), "due at the next regular round")
			assert.Equal(t, tc.reply.Rate, k.rate)
			assert.Equal(t, tc.reply.Burst, k.burst)
			assert.Equal(t, tc.reply.Expiry, k.expiry)
			assert.Equal(t, tc.reply.Pool, k.others)
			assert.Equal(t, int64(3), k.debtSent, "the debt sent counts as reported")
			assert.Equal(t, tc.reply.Epoch, k.epoch)
		})
	}
}

// TestLostTokensGoBack: what a bucket share made that the node cannot keep
// (its tokens when the share ends, its refill toward a token, tokens above
// a smaller burst) goes back to the pool in whole tokens at the next
// exchange, the remainder kept for the one after.
func TestLostTokensGoBack(t *testing.T) {
	lr := testRule(localx.MustLimit(local.Limit{Algorithm: local.TokenBucket, Quota: 10, Window: time.Second, Burst: 10}))
	const now = int64(1_900_000_000_000_000)
	w := time.Second.Microseconds()
	k := Lease{flags: flagSynced, epoch: 1, rate: 4, burst: 3, expiry: now + 1e6, tokens: 2, rem: w / 2, last: now, lastSync: now, lastUse: now}
	// The share ends: 2 tokens and half a token's refill.
	k.ApplyBucket(lr, &Request{Bucket: true, SentAt: now}, &BucketReply{Now: now, Epoch: 1, Expiry: now, Pool: 0}, now)
	require.Zero(t, k.tokens)
	require.True(t, k.Due(lr, now+testParams.Interval.Microseconds()), "due to hand the tokens back")
	q := k.Request(lr, now+testParams.Interval.Microseconds(), false)
	assert.Equal(t, int64(2), q.Return, "the whole tokens")
	assert.Equal(t, w/2, k.lost, "the half token kept for later")
	k.Answered()
	// A smaller burst: the tokens above it go back too.
	k = Lease{flags: flagSynced, epoch: 1, rate: 4, burst: 5, expiry: now + 1e6, tokens: 5, last: now, lastSync: now, lastUse: now}
	k.ApplyBucket(lr, &Request{Bucket: true, SentAt: now}, &BucketReply{Now: now, Epoch: 1, Rate: 2, Burst: 2, Expiry: now + 1e6}, now)
	assert.Equal(t, int64(2), k.tokens)
	q = k.Request(lr, now+testParams.Interval.Microseconds(), false)
	assert.Equal(t, int64(3), q.Return, "above the new burst")
}
