package lease

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/internal/localx"
	"github.com/hybridlimit/hybridlimit/local"
)

// TestShareAfterOutage: within an outage's hand-back, a bucket share Redis
// grants is cut to the failure policy's part (SetShare), with no tokens
// from the pool; the key asks for its whole share once the hand-back ends,
// and the next reply gives it. Without a policy's part, or outside the
// hand-back, the share is Redis's.
func TestShareAfterOutage(t *testing.T) {
	lim := localx.MustLimit(local.Limit{Algorithm: local.TokenBucket, Quota: 1000, Window: time.Second, Burst: 100})
	const out = int64(1_900_000_000_000_000) // the last round that found Redis unreachable
	interval := testParams.Interval.Microseconds()
	handBackEnd := out + recoverSpan*interval
	reply := func(now int64) *BucketReply {
		return &BucketReply{Now: now, Epoch: 1, Rate: 500, Burst: 50, Expiry: now + 10e6, Grant: 50, Pool: 50}
	}
	for _, tc := range []struct {
		name        string
		share       Share
		at          int64 // the reply's time
		rate, burst int64 // the share the key holds
		tokens      int64
	}{
		{"hand-back, the policy's part", func(*Lease) float64 { return 0.25 }, out + interval, 250, 25, 0},
		{"hand-back, the policy's part above Redis's", func(*Lease) float64 { return 0.75 }, out + interval, 500, 50, 0},
		{"hand-back, no part set", nil, out + interval, 500, 50, 0},
		{"after the hand-back", func(*Lease) float64 { return 0.25 }, handBackEnd, 500, 50, 50},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lr := testRule(lim)
			lr.SetOutage(nil, true)
			if tc.share != nil {
				lr.SetShare(tc.share)
			}
			lr.cluster.NoteOutage(out)
			k := Lease{flags: flagSynced, epoch: 1}
			k.ApplyBucket(lr, &Request{Bucket: true, SentAt: tc.at}, reply(tc.at), tc.at)
			assert.Equal(t, tc.rate, k.rate, "rate")
			assert.Equal(t, tc.burst, k.burst, "burst")
			assert.Equal(t, tc.tokens, k.tokens, "tokens from the pool")
		})
	}

	t.Run("the whole share once the hand-back ends", func(t *testing.T) {
		lr := testRule(lim)
		lr.SetOutage(nil, true)
		lr.SetShare(func(*Lease) float64 { return 0.25 })
		lr.cluster.NoteOutage(out)
		k := Lease{flags: flagSynced, epoch: 1}
		at := out + interval
		k.lastSync = at
		k.ApplyBucket(lr, &Request{Bucket: true, SentAt: at}, reply(at), at)
		require.Equal(t, int64(250), k.rate, "cut in the hand-back")
		// A busy key with tokens to spare and its share far from expiry
		// waits for nothing: due only once the hand-back is over.
		for _, now := range []int64{at + 3*interval, handBackEnd - interval/2} {
			_, _ = k.Decide(lr, now, 1)
			assert.False(t, k.Due(lr, now), "due at %d µs after the outage", now-out)
		}
		now := handBackEnd + interval/2
		_, _ = k.Decide(lr, now, 1)
		require.True(t, k.Due(lr, now), "due once the hand-back is over")
		q := k.Request(lr, now, false)
		k.Answered()
		// Redis grants up to the share's burst, beyond the tokens the
		// node said it held.
		v := reply(now)
		v.Grant = max(v.Burst-q.Tokens, 0)
		k.ApplyBucket(lr, &q, v, now)
		assert.Equal(t, int64(500), k.rate, "Redis's share")
		assert.Equal(t, int64(50), k.burst)
		k.Decide(lr, now+interval, 1)
		assert.False(t, k.Due(lr, now+interval), "nothing more to ask")
	})
}
