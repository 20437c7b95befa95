package syncer_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/internal/redistest"
	"github.com/hybridlimit/hybridlimit/local"
	"github.com/hybridlimit/hybridlimit/syncer"
)

// grace is what every TTL adds to its state's life.
const grace = time.Second

// ttlCase is an algorithm, the cost charged, and how long its state lives
// after that charge at now (µs since the epoch), from the algorithm's
// definition: the TTL must cover it, and exceed it by at most the grace.
type ttlCase struct {
	p    local.Limit
	n    int64
	life func(now int64) int64
}

var ttlCases = []ttlCase{
	// fixed window: until the window ends
	{local.Limit{Algorithm: local.FixedWindow, Quota: 5, Window: 10 * time.Second}, 2,
		func(now int64) int64 { w := int64(10e6); return now - now%w + w - now }},
	// counter: until the window after the current one ends
	{local.Limit{Algorithm: local.SlidingWindowCounter, Quota: 5, Window: 10 * time.Second}, 2,
		func(now int64) int64 { w := int64(10e6); return now - now%w + 2*w - now }},
	// log: a window after the newest entry
	{local.Limit{Algorithm: local.SlidingWindowLog, Quota: 5, Window: 10 * time.Second}, 2,
		func(int64) int64 { return 10e6 }},
	// buckets, fresh, 1 per second: TAT − now = n intervals
	{local.Limit{Algorithm: local.TokenBucket, Quota: 10, Window: 10 * time.Second, Burst: 5}, 2,
		func(int64) int64 { return 2e6 }},
	{local.Limit{Algorithm: local.LeakyBucket, Quota: 10, Window: 10 * time.Second, Burst: 5}, 3,
		func(int64) int64 { return 3e6 }},
	{local.Limit{Algorithm: local.GCRA, Quota: 10, Window: 10 * time.Second, Burst: 5}, 1,
		func(int64) int64 { return 1e6 }},
}

func pttl(t *testing.T, c redis.UniversalClient, key string) time.Duration {
	t.Helper()
	d, err := c.PTTL(context.Background(), key).Result()
	require.NoError(t, err, "PTTL %s", key)
	return d
}

// ruleKeys returns the Redis keys under prefix of the rule named name.
func ruleKeys(t *testing.T, c redis.UniversalClient, prefix, name string) []string {
	t.Helper()
	all, err := redistest.Keys(context.Background(), c, prefix)
	require.NoError(t, err)
	var keys []string
	for _, k := range all {
		if strings.Contains(k, ":{"+name+":") {
			keys = append(keys, k)
		}
	}
	return keys
}

// TestTTL: every key a decision writes has a TTL that covers its state's
// life and ends at most a grace second after it.
func TestTTL(t *testing.T) {
	topologies(t, func(t *testing.T, c redis.UniversalClient) {
		ctx := context.Background()
		prefix := redistest.Prefix(t)
		cen := newCentral(t, c, syncer.Keyspace{Prefix: prefix})
		for _, tc := range ttlCases {
			name := tc.p.Algorithm.String()
			t.Run(name, func(t *testing.T) {
				r := mustRule(t, name, tc.p)
				now := time.Now()
				d, err := syncer.AllowNAt(ctx, cen, now, r, "k", tc.n)
				require.NoError(t, err)
				require.True(t, d.Allowed(), "%+v", d)
				life := time.Duration(tc.life(now.UnixMicro())) * time.Microsecond
				keys := ruleKeys(t, c, prefix, name)
				want := 1
				if tc.p.Algorithm == local.SlidingWindowLog {
					want = 2
				}
				require.Len(t, keys, want, "the rule's keys")
				for _, k := range keys {
					// PTTL counts down from the call: at most the life plus
					// grace (and the rounding up to the ms), at least the
					// life (the grace covers the time since the call).
					got := pttl(t, c, k)
					assert.Positive(t, got, "%s: PTTL", k)
					assert.LessOrEqual(t, got, (life+grace).Round(time.Millisecond)+time.Millisecond, "%s: PTTL, want at most %v + %v", k, life, grace)
					assert.GreaterOrEqual(t, got, life.Truncate(time.Millisecond), "%s: PTTL, want at least %v", k, life)
				}
			})
		}
		// And nothing else under the prefix is without a TTL.
		all, err := redistest.Keys(ctx, c, prefix)
		require.NoError(t, err)
		assert.Len(t, all, len(ttlCases)+1, "keys under the prefix")
		for _, k := range all {
			assert.Positive(t, pttl(t, c, k), "%s: PTTL", k)
		}
	})
}

// TestTTLNotExtended: neither a refused request nor a zero-cost query
// writes: the keys' PTTL keeps counting down.
func TestTTLNotExtended(t *testing.T) {
	topologies(t, func(t *testing.T, c redis.UniversalClient) {
		ctx := context.Background()
		prefix := redistest.Prefix(t)
		cen := newCentral(t, c, syncer.Keyspace{Prefix: prefix})
		for _, tc := range ttlCases {
			name := tc.p.Algorithm.String()
			t.Run(name, func(t *testing.T) {
				r := mustRule(t, name, tc.p)
				now := time.Now()
				d, err := syncer.AllowNAt(ctx, cen, now, r, "k", syncer.RuleLimit(r).MaxCost())
				require.NoError(t, err)
				require.True(t, d.Allowed(), "%+v", d)
				keys := ruleKeys(t, c, prefix, name)
				before := map[string]time.Duration{}
				for _, k := range keys {
					before[k] = pttl(t, c, k)
				}
				const wait = 50 * time.Millisecond
				time.Sleep(wait)
				// At the same time as the charge: a write would set the
				// TTL the charge set, back up by the wait.
				d, err = syncer.AllowNAt(ctx, cen, now, r, "k", 1)
				require.NoError(t, err)
				require.False(t, d.Allowed(), "%+v, want a refusal", d)
				_, err = syncer.AllowNAt(ctx, cen, now, r, "k", 0)
				require.NoError(t, err)
				for _, k := range keys {
					assert.LessOrEqual(t, pttl(t, c, k), before[k]-wait+10*time.Millisecond, "%s: PTTL, %v earlier: a refusal or a query extended it", k, before[k])
				}
			})
		}
	})
}
