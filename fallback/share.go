package fallback

import (
	"math"

	"github.com/hybridlimit/hybridlimit/internal/gossiphook"
)

// estimate is what this node may admit for one key while Redis is down
// (gossiphook.Estimate, which package hybrid reads).
type estimate = gossiphook.Estimate

// share returns node's share of a key from the demands of the members that
// hold a record for it (own included, so sum ≥ own) and the member count:
// (1 − reserve) × own/sum + reserve/members. The reserve is split evenly so
// a member whose demand has not reached us yet still has a little; the rest
// follows demand, so skewed traffic is not starved by an even split. With no
// demand known anywhere the split is even. Over all members the shares sum
// to at most 1.
func share(own, sum float64, members int, reserve float64) float64 {
	members = max(members, 1)
	even := 1 / float64(members)
	if !(sum > 0) {
		return even
	}
	s := (1-reserve)*own/sum + reserve*even
	return min(max(s, 0), 1)
}

// ewma returns the moving average of a rate after a step of dt seconds in
// which rate was measured, with a half-life of halfLife seconds.
func ewma(prev, rate, dt, halfLife float64) float64 {
	if dt <= 0 {
		return prev
	}
	a := 1 - math.Exp2(-dt/halfLife)
	return prev + a*(rate-prev)
}
