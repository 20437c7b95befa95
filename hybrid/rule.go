package hybrid

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/hybridlimit/hybridlimit/internal/localx"
	"github.com/hybridlimit/hybridlimit/local"
)

// Mode is where a rule's decisions are made. The zero Mode takes the
// Limiter's default: Hybrid with Redis, Local without.
type Mode uint8

const (
	// modeDefault is the zero Mode: the Limiter's default.
	modeDefault Mode = iota
	// Local decides on this node alone: no network, each node its own
	// limit (a cluster of N admits up to N × the limit).
	Local
	// Central decides every request with one atomic script in Redis: exact
	// across the cluster, a round trip per decision.
	Central
	// Hybrid decides locally against leases of the global budget that a
	// background syncer exchanges with Redis: nanoseconds per decision, the
	// limit held across the cluster (see docs/accuracy.md for the bounds).
	Hybrid
)

var modeNames = [...]string{"default", "local", "central", "hybrid"}

// String returns the mode's name.
func (m Mode) String() string {
	if int(m) < len(modeNames) {
		return modeNames[m]
	}
	return fmt.Sprintf("Mode(%d)", uint8(m))
}

// Policy is what a rule does when Redis cannot decide: unreachable, too
// slow, or not answering for the key. In hybrid mode it applies to keys
// whose lease ran out and could not be renewed; a lease held is used to its
// end. A policy's decision comes with a nil error and Decision.Degraded
// true. The zero Policy takes the Limiter's default: Gossip with
// Config.Gossip, FailLocal without.
type Policy uint8

const (
	// policyDefault is the zero Policy: the Limiter's default.
	policyDefault Policy = iota
	// FailOpen admits: availability over the limit.
	FailOpen
	// FailClosed rejects (ReasonUnavailable: Redis could not decide, and
	// nothing is admitted without it): the limit over availability. A
	// Hybrid rule under it gives a key no cold-start allowance, as
	// WaitFirst does: nothing is admitted that Redis did not grant;
	// for security-critical limits such as logins.
	FailClosed
	// FailLocal decides on this node with the limit divided by the number of
	// nodes last seen: the cluster keeps about the limit while Redis is down,
	// if traffic is spread evenly over the nodes.
	FailLocal
	// Gossip decides on this node from the counts the nodes gossip
	// (Config.Gossip): a window rule's key may admit its node's own count
	// plus its demand-weighted share of what the window has left; a bucket
	// rule's key, that share of the rate and of the burst. Skewed traffic
	// keeps about the limit, where FailLocal would starve the busy nodes.
	// Without Config.Gossip it is FailLocal.
	Gossip
)

var policyNames = [...]string{"default", "fail_open", "fail_closed", "fail_local", "gossip"}

// String returns the policy's name.
func (p Policy) String() string {
	if int(p) < len(policyNames) {
		return policyNames[p]
	}
	return fmt.Sprintf("Policy(%d)", uint8(p))
}

// Wait is whether a hybrid rule's request that only an exchange with Redis
// can decide (its key's lease used up, or not there yet, and Redis may have
// more) waits for that exchange or is refused at once. The zero Wait is
// WaitInFlight (WaitNever under the simulation's manual sync, where no loop
// runs the exchanges a request would wait for).
type Wait uint8

const (
	// waitDefault is the zero Wait: WaitInFlight.
	waitDefault Wait = iota
	// WaitNever never waits: a key's first requests on a node are decided
	// at once within the cold-start allowance (SyncConfig.Epsilon), and
	// past it, until the lease arrives, refused (ReasonLimited, RetryAfter
	// about one round trip). For hot paths where a decision's nanoseconds
	// matter more than a refusal an exact limiter would not make.
	WaitNever
	// WaitInFlight decides a key's first requests on a node within the
	// cold-start allowance, and past it waits for the exchange the key has
	// under way with Redis, about one round trip, bounded by the request's
	// context and Config.Timeout (the failure policy decides what Redis
	// did not answer in time). It never waits while Redis is known
	// unavailable. A burst on a new key, a retry at RetryAfter, a limit
	// raised: what an exact limiter admits is admitted. The default.
	WaitInFlight
	// WaitFirst makes a key exact from its first request on a node: no
	// cold-start allowance, and every request without a lease waits for it
	// as under WaitInFlight. For limits where exactness matters more than a
	// round trip, such as logins.
	WaitFirst
)

var waitNames = [...]string{"default", "never", "in_flight", "first"}

// String returns the wait's name, as rules files write it.
func (w Wait) String() string {
	if int(w) < len(waitNames) {
		return waitNames[w]
	}
	return fmt.Sprintf("Wait(%d)", uint8(w))
}

// Rule is a named limit and how to run it. Register it with
// Limiter.Register, which validates it and returns the *Rule that
// decisions take; the fields of a registered Rule must not change (use
// Limiter.SetLimit). Limiter.Unregister removes it.
//
// Rule is the only rule type a Limiter's user handles: Register builds from
// it what its mode runs on (syncer's central and lease rules among them).
type Rule struct {
	// Name identifies the rule: in Redis key names, metrics and logs. 1 to
	// 128 bytes of letters, digits and -_.:/. Required.
	Name string
	// Limit is the rule's limit: its algorithm and parameters (requests per
	// window, burst). Required; Register validates it.
	Limit Limit
	// Mode is where decisions are made. Default: the Limiter's. In the
	// *Rule Register returns, it is the mode the rule runs in.
	Mode Mode
	// Policy is what happens when Redis cannot decide. Default: the
	// Limiter's.
	Policy Policy
	// KeyTTL keeps a key's state at least this long after its last request,
	// even once it is back to its initial state (which is when keys are
	// otherwise forgotten). Default 0. It never shortens a state's life.
	KeyTTL time.Duration
	// Wait is whether a Hybrid rule's request waits for an exchange with
	// Redis that may admit it (see Wait), in Allow, AllowN and AllowMulti.
	// Default WaitInFlight. A request whose context ends while it waits is
	// refused with ReasonNoLease. Other modes ignore it.
	Wait Wait
	// Global holds the limit across every region (Config.Global), not only
	// across this region's cluster: a Hybrid rule of the fixed window whose
	// regions lease parts of one limit from the global store. Its nodes
	// have no cold-start allowance (nothing is admitted beyond the
	// region's part; a key new everywhere opens in each region at
	// L ÷ regions), and a request waits (Wait) only while the region's
	// part has room: once it is spent, more comes across regions, and the
	// request is refused at once. Default false: the limit is this region's cluster's, as it is
	// without regions. Register refuses it without Config.Global, in
	// another mode or for another algorithm.
	Global bool

	state *ruleState // set by Register on the Rule it returns, before returning it
}

// ruleState is a registered rule: what every mode shares, and the mode
// that decides its requests.
type ruleState struct {
	l *Limiter
	// owner is l while the rule is registered, nil once unregistered:
	// what Limiter.state checks, in the one load a decision spends on it.
	owner     atomic.Pointer[Limiter]
	name      string
	requested Mode // as registered (Hybrid may run Central)
	policy    Policy
	wait      Wait  // Rule.Wait, its default resolved
	global    bool  // Rule.Global
	keyTTL    int64 // µs

	limit  atomic.Pointer[localx.Limit]
	counts *counters
	mode   modeRule
}

// modeRule is a rule's mode: localRule, centralRule or hybridRule, each
// with its own state and, for the distributed ones, its failure policy.
// Register builds one per rule; the Limiter reaches the modes only through
// it, but for AllowMulti, which groups its requests by the mode's type
// (Limiter.batch), so that the batch stays on the stack.
type modeRule interface {
	// kind is the mode the rule runs in.
	kind() Mode
	// allow decides a request of cost n for key at now (µs) and charges it
	// if admitted.
	allow(ctx context.Context, now int64, key string, n int64) (local.Decision, error)
	// setLimit moves the mode's state to a new limit.
	setLimit(lim localx.Limit) error
	// sweep forgets the keys back in their initial state at now.
	sweep(now time.Time) int
	// stats counts the keys the mode holds.
	stats() local.Stats
	// close stops what the mode runs.
	close()
}
