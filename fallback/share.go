package fallback

import "math"

// Estimate is what this node may admit for one key while Redis is down,
// from the last snapshot of gossiped records. It is a small value, returned
// without allocation.
type Estimate struct {
	// Known reports whether any node has gossiped a record for the key. When
	// it is false the other fields hold an even split: Share is 1/Members
	// and the counts are zero.
	Known bool
	// Window is the window id the counts are of (the caller's, as passed to
	// Observe; 0 for the bucket algorithms).
	Window int64
	// Own is this node's count in Window as it gossiped it as long ago as
	// the peers' latest records were queued, on average, so that Own and
	// the others' counts in Total are of about the same time.
	Own int64
	// Total is the sum of every node's count in Window in the snapshot, Own
	// included, and the counts of nodes that have died since.
	Total int64
	// Share is this node's demand-weighted share, in [0, 1], of what the
	// window has left (and of a bucket's rate and burst).
	Share float64
	// Members is the count of nodes the split assumes: memberlist's
	// members, suspected ones included, so it drops only once memberlist
	// declares a node dead or the node leaves.
	Members int
}

// Allowance returns how many this node may have admitted in total in the
// estimate's window for a limit of limit: its own count plus its share of
// what the window has left. Every node that works from the same snapshot
// gets allowances that sum to at most limit.
func (e Estimate) Allowance(limit int64) int64 {
	left := max(limit-e.Total, 0)
	return e.Own + int64(math.Floor(e.Share*float64(left)))
}

// AllowanceIn is Allowance for the caller's current window: when the
// snapshot's counts are of an earlier window (no record of window has
// arrived yet), nothing is counted in window and the node may admit its
// share of the whole limit.
func (e Estimate) AllowanceIn(window, limit int64) int64 {
	if e.Window != window {
		e.Own, e.Total = 0, 0
	}
	return e.Allowance(limit)
}

// Bucket returns this node's part of a token bucket's or GCRA's rate and
// burst: rate × share and burst × share. A burst below one admits no
// request of cost one at once; the rate still accrues.
func (e Estimate) Bucket(rate float64, burst int64) (nodeRate, nodeBurst float64) {
	return rate * e.Share, float64(burst) * e.Share
}

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
