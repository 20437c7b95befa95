package lease

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/internal/localx"
	"github.com/hybridlimit/hybridlimit/local"
)

// TestRescaleOnLimitChange: a bucket share granted under one limit is, from
// the first decision under a lowered limit, the same fraction of the new
// rate and burst: a lowered limit holds at once, not a round trip later,
// and the share is rescaled once, not again at each decision. A raised
// rate or burst waits for the exchange under it.
func TestRescaleOnLimitChange(t *testing.T) {
	gcra := func(limit, burst int64) *Rule {
		return testRule(localx.MustLimit(local.Limit{Algorithm: local.GCRA, Quota: limit, Window: time.Second, Burst: burst}))
	}
	const now = int64(1_900_000_000_000_000)
	for _, tc := range []struct {
		name                string
		to                  *Rule
		rate, burst, tokens int64
		admitted            int
	}{
		{"lowered", gcra(100, 10), 50, 5, 4, 4},
		{"raised: kept until the exchange", gcra(4000, 400), 500, 50, 40, 40},
		{"rate lowered, burst raised", gcra(500, 200), 250, 50, 40, 40},
	} {
		t.Run(tc.name, func(t *testing.T) {
			from := gcra(1000, 100)
			k := Lease{flags: flagSynced, epoch: 1, rule: from, rate: 500, burst: 50, expiry: now + 1e6,
				tokens: 40, last: now, lastSync: now, lastUse: now}
			admitted := 0
			for range 1000 {
				v, signal := k.Decide(tc.to, now, 1)
				require.NotZero(t, signal&SignalSync, "a changed limit asks for an exchange")
				if admitted == 0 {
					assert.Equal(t, tc.rate, k.rate, "the share's rate, the same fraction of the new limit")
					assert.Equal(t, tc.burst, k.burst, "the share's burst, the same fraction of the new burst")
				}
				if v.Reason != local.ReasonOK {
					break
				}
				admitted++
			}
			assert.Equal(t, tc.admitted, admitted, "admitted from the rescaled tokens before the exchange")
			assert.Equal(t, tc.rate, k.rate, "rescaled once, not at each decision")
		})
	}
}

// TestMulDiv: the product may pass 2^63; the first factor counts up to the
// divisor at most.
func TestMulDiv(t *testing.T) {
	assert.Equal(t, int64(50), mulDiv(500, 100, 1000))
	assert.Equal(t, int64(1)<<62, mulDiv(1<<62, 1<<62, 1<<62), "a product past 2^63")
	assert.Equal(t, int64(7), mulDiv(20, 7, 10), "a share above the whole counts as the whole")
	assert.Zero(t, mulDiv(0, 7, 10))
}
