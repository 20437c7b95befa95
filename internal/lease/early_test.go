package lease

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/internal/localx"
	"github.com/hybridlimit/hybridlimit/local"
)

// TestBucketAsksForThePool: a bucket key short of tokens asks for an early
// exchange unless its share is too small for one to matter (a burst within
// the allowance), its last reply brought nothing, and the pool, by that
// reply, has not refilled: over its limit, with the rate all held in
// shares, an early exchange would bring nothing. A missed renewal asks
// early in any case.
func TestBucketAsksForThePool(t *testing.T) {
	gcra := localx.MustLimit(local.Limit{Algorithm: local.GCRA, Quota: 100, Window: 10 * time.Second, Burst: 10})
	r := coldRule(t, gcra, 8, false)
	require.Equal(t, int64(1), r.allowance())
	const now = int64(1_900_000_000_000_000)
	const ttl = int64(500_000)
	for _, tc := range []struct {
		name                       string
		tokens, burst, pool, until int64
		dry                        bool
		admit, urgent              bool
	}{
		{"refused, dry, pool empty", 0, 1, 0, ttl, true, false, false},
		{"admitted, dry, pool empty", 1, 1, 0, ttl, true, true, false},
		{"refused, last reply brought tokens", 0, 1, 0, ttl, false, false, true},
		{"refused, dry, pool refilled", 0, 1, 1, ttl, true, false, true},
		{"admitted, dry, pool refilled", 1, 1, 1, ttl, true, true, true},
		{"refused, dry, burst above the allowance", 0, 2, 0, ttl, true, false, true},
		{"refused, dry, renewal missed", 0, 1, 0, 60_000, true, false, true},
		{"admitted, dry, renewal missed", 1, 1, 0, 60_000, true, true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// A share of an eighth of the rate, demand 125 per window (over
			// the limit); the pool refills at 20 per window up to 1.
			k := Lease{flags: flagSynced | flagSent, epoch: 1, rate: 12, burst: tc.burst, expiry: now + tc.until, tokens: tc.tokens,
				last: now, demand: 125, lastSync: now, lastUse: now, others: tc.pool, prate: 20, pcap: 1, pat: now}
			if tc.dry {
				k.flags |= flagDry
			}
			v, signal := k.Decide(r, now+1000, 1)
			require.Equal(t, tc.admit, v.Reason == local.ReasonOK, "reason %v", v.Reason)
			assert.Equal(t, tc.urgent, k.flags&flagUrgent != 0, "asks for an early exchange")
			assert.Equal(t, tc.urgent, k.Due(r, now+1000+r.minGap), "due a MinGap on")
			if tc.urgent {
				assert.True(t, signal.Sync(), "signals the syncer")
			}
		})
	}
}

// TestApplyBucketDry: a reply that neither grows the share nor grants
// tokens marks the key dry; one that does clears it.
func TestApplyBucketDry(t *testing.T) {
	gcra := localx.MustLimit(local.Limit{Algorithm: local.GCRA, Quota: 100, Window: 10 * time.Second, Burst: 10})
	r := coldRule(t, gcra, 8, false)
	const now = int64(1_900_000_000_000_000)
	for _, tc := range []struct {
		name  string
		reply BucketReply
		dry   bool
	}{
		{"nothing new", BucketReply{Now: now, Epoch: 1, Rate: 12, Burst: 1, Expiry: now + 5e5}, true},
		{"shrunk", BucketReply{Now: now, Epoch: 1, Rate: 10, Burst: 1, Expiry: now + 5e5}, true},
		{"a token", BucketReply{Now: now, Epoch: 1, Rate: 12, Burst: 1, Expiry: now + 5e5, Grant: 1}, false},
		{"grown", BucketReply{Now: now, Epoch: 1, Rate: 14, Burst: 1, Expiry: now + 5e5}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k := Lease{flags: flagSynced | flagSent | flagDry, epoch: 1, rate: 12, burst: 1, expiry: now + 1e5, last: now}
			if !tc.dry {
				k.flags |= flagDry // cleared by the reply
			} else {
				k.flags &^= flagDry
			}
			k.ApplyBucket(r, &Request{Bucket: true, SentAt: now}, &tc.reply, now)
			assert.Equal(t, tc.dry, k.flags&flagDry != 0, "dry")
		})
	}
}

// smallWindow is a fixed window of 100 per 10 s on 8 nodes, and a window's
// start and a time a tenth into it.
func smallWindow(t *testing.T) (r *Rule, start, now int64) {
	fixed := localx.MustLimit(local.Limit{Algorithm: local.FixedWindow, Quota: 100, Window: 10 * time.Second})
	r = coldRule(t, fixed, 8, false)
	start = int64(1_900_000_000) * r.w
	return r, start, start + r.w/10
}

// TestWindowKeepsSmallGrant: an idle key keeps what it holds unused, to
// end with its window without an exchange, when that is within its
// allowance and the window's room, by its last reply, leaves every node
// holding as much no one short; otherwise it gives it back.
func TestWindowKeepsSmallGrant(t *testing.T) {
	r, start, now := smallWindow(t)
	require.Equal(t, int64(1), r.allowance())
	for _, tc := range []struct {
		name    string
		granted int64
		room    int64
		due     bool
	}{
		{"ample room", 2, 90, false},
		{"room for every node's grant", 2, 8, false},
		{"room short of every node's grant", 2, 7, true},
		{"no reply in the window", 2, -1, true},
		{"above the allowance", 4, 90, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k := Lease{flags: flagSynced | flagSent, epoch: 1, wid: start, granted: tc.granted, used: 1, acked: 1, room: tc.room,
				lastSync: now, lastUse: now, span: r.w}
			idle := now + r.idleRelease + r.interval
			assert.Equal(t, tc.due, k.Due(r, idle), "due to give its grant back")
			if tc.due {
				q := k.Request(r, idle, false)
				assert.True(t, q.Release, "gives it back")
			}
		})
	}
}

// TestGuessSeenLater: a window grant made on a guess asks for the exchange
// that measures the key's demand while the scripts count the guess (2 ×
// MinGap); a key seen again later uses it as an ordinary grant.
func TestGuessSeenLater(t *testing.T) {
	r, start, now := smallWindow(t)
	for _, tc := range []struct {
		name   string
		after  int64
		urgent bool
	}{
		{"a MinGap on", r.minGap, true},
		{"a second on", 1e6, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k := Lease{flags: flagSynced | flagSent | flagGuess, epoch: 1, wid: start, granted: 5, used: 1, acked: 1, room: 80,
				lastSync: now, lastUse: now, span: r.w}
			v, signal := k.Decide(r, now+tc.after, 1)
			require.Equal(t, local.ReasonOK, v.Reason)
			assert.Equal(t, tc.urgent, signal.Sync(), "signals the syncer")
			assert.Equal(t, tc.urgent, k.flags&flagUrgent != 0, "asks for an early exchange")
		})
	}
}
