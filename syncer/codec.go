package syncer

import (
	"fmt"

	"github.com/hybridlimit/hybridlimit/internal/lease"
)

// The typed request and reply codecs of the scripts: each encodes a request
// as the script's KEYS and ARGV, in the order its header (lua/*.lua) lists
// them, and decodes its reply with a length check. A reply of another shape
// (a script of another version, a corrupted reply) is an error wrapping
// ErrRedis, never a panic.

// leaseConsts are the lease scripts' arguments that are the node's, not the
// key's.
type leaseConsts struct {
	now       string // the script's time: "" for Redis's clock
	node      string // the node's name
	leaseTTL  int64  // how long a bucket share lives without renewal (µs)
	demandTTL int64  // how long a reported demand counts (µs)
}

// flagGlobal is lua/lease_window.lua's flag of a rule of global reach.
const flagGlobal = 2

// encodeLeaseWindow is the ARGV of lua/lease_window.lua for q under r:
// now, node, r's fingerprint, then q's numbers and r's packed in one
// argument; g is the region's side of a rule of global reach, nil for
// another.
func encodeLeaseWindow(q *lease.Request, c leaseConsts, r *Rule, g *globalArgs) []any {
	var flags, regions, keep int64
	if g != nil {
		flags, regions, keep = flagGlobal, g.regions, g.keep
	}
	return leaseArgs(c, r, int64(boolFlag(q.Release))|flags, q.Demand, q.WantCur, q.WantNext, q.Horizon,
		q.Prev.Window, q.Prev.Used, q.Cur.Window, q.Cur.Used, c.demandTTL, q.Nodes, q.GuessTTL, q.PaceSpan, q.WaitCur,
		regions, keep)
}

// globalArgs are lua/lease_window.lua's numbers of a rule of global reach.
type globalArgs struct {
	regions int64 // the regions as the global store counts them; 0: unknown
	keep    int64 // how long the store keeps a region's standing share (µs)
}

// leaseArgs is a lease script's ARGV: now, node, r's fingerprint, then the
// request's numbers and r's (packed once, in NewRule) in one argument.
func leaseArgs(c leaseConsts, r *Rule, q ...int64) []any {
	b := make([]byte, 0, 8*len(q)+len(r.lpack))
	b = append(appendNumbers(b, q...), r.lpack...)
	return []any{c.now, c.node, r.fp, b}
}

// leaseWindowLen is the length of lua/lease_window.lua's reply.
const leaseWindowLen = 13

// decodeLeaseWindow reads lua/lease_window.lua's reply: {now, current
// window, epoch, granted, used, R, granted next, R previous, revoked,
// exhausted, live, room, paced}.
func decodeLeaseWindow(v []int64) (lease.WindowReply, error) {
	if len(v) != leaseWindowLen {
		return lease.WindowReply{}, replyLenError("lease_window", len(v), leaseWindowLen)
	}
	return lease.WindowReply{
		Now: v[0], Window: v[1], Epoch: v[2], Granted: v[3], Used: v[4], Committed: v[5],
		NextGranted: v[6], PrevCommitted: v[7], Revoked: v[8] == 1, Exhausted: v[9] == 1,
		Live: v[10], Room: v[11], Paced: v[12] == 1,
	}, nil
}

// encodeLeaseBucket is the ARGV of lua/lease_bucket.lua for q under r:
// now, node, r's fingerprint, then q's numbers and r's packed in one
// argument.
func encodeLeaseBucket(q *lease.Request, c leaseConsts, r *Rule) []any {
	return leaseArgs(c, r, q.Seq, int64(boolFlag(q.Release)), q.Demand, q.Tokens, q.Debt,
		c.leaseTTL, c.demandTTL, q.Rate, q.Burst, q.Expiry, q.Nodes, q.Horizon, q.Allowance, q.Want, q.Return)
}

// leaseBucketLen is the length of lua/lease_bucket.lua's reply.
const leaseBucketLen = 12

// decodeLeaseBucket reads lua/lease_bucket.lua's reply: {now, epoch, rate,
// burst, expiry, tokens granted, pool tokens, pool rate, pool capacity,
// revoked, live, rationed}.
func decodeLeaseBucket(v []int64) (lease.BucketReply, error) {
	if len(v) != leaseBucketLen {
		return lease.BucketReply{}, replyLenError("lease_bucket", len(v), leaseBucketLen)
	}
	return lease.BucketReply{
		Now: v[0], Epoch: v[1], Rate: v[2], Burst: v[3], Expiry: v[4], Grant: v[5],
		Pool: v[6], PoolRate: v[7], PoolCap: v[8], Revoked: v[9] == 1, Live: v[10], Rationed: v[11] == 1,
	}, nil
}

// encodeSingle is the ARGV of r's single-rule script (the parts single and
// bucket_args, scripts.go) for a request of cost n at now: now, the cost,
// then the rule's parameters (a bucket's fingerprint and packed numbers).
func encodeSingle(now string, n int64, r *Rule) []any {
	rule := r.args
	if r.bucket {
		rule = r.bargs
	}
	args := make([]any, 0, 2+len(rule))
	args = append(args, now, n)
	return append(args, rule...)
}

// encodeMulti is the KEYS and ARGV of lua/multi.lua deciding groups at now:
// each group's state and log; now, then each group's cost and its rule's
// parameters.
func encodeMulti(now string, groups []*group) ([]string, []any) {
	keys := make([]string, 0, 2*len(groups))
	args := make([]any, 0, 1+len(groups)*(1+len(groups[0].rule.args)))
	args = append(args, now)
	for _, g := range groups {
		keys = append(keys, g.state, g.log)
		args = append(args, g.n)
		args = append(args, g.rule.args...)
	}
	return keys, args
}

// refundCall is the call of lua/refund.lua giving back g's reservation:
// KEYS its state and log; ARGV the time it was decided at, its cost, the
// bucket's reset count it returned, then the rule's parameters.
func refundCall(g *group) call {
	args := make([]any, 0, 3+len(g.rule.args))
	args = append(args, g.at, g.n, g.z)
	return call{scriptRefund, []string{g.state, g.log}, append(args, g.rule.args...)}
}

// registryRequest is a round's registration of the node (lua/registry.lua).
type registryRequest struct {
	Now   string // the script's time: "" for Redis's clock
	Node  string // the node's name
	Live  int64  // how long a node counts as live after its last round (µs)
	Leave bool   // the node leaves (Shutdown)
	Ahead int64  // how far ahead of now to score the node (µs): an idle node's next registration is that much later
}

// registryCall is the call of lua/registry.lua for q on the registry key,
// and on the key of the regions' count when regions is not empty.
func registryCall(key, regions string, q registryRequest) call {
	keys := []string{key}
	if regions != "" {
		keys = append(keys, regions)
	}
	return call{scriptRegistry, keys, []any{q.Now, q.Node, q.Live, boolFlag(q.Leave), q.Ahead}}
}

// registryReply is what lua/registry.lua answers.
type registryReply struct {
	Now     int64 // Redis time it ran at
	Live    int64 // the live nodes
	Regions int64 // the regions as the global store counts them (0: unknown, or not asked)
}

// decodeRegistry reads lua/registry.lua's reply: {now, live nodes}, and
// the regions when asked for them.
func decodeRegistry(v []int64, regions bool) (registryReply, error) {
	n := 2
	if regions {
		n = 3
	}
	if len(v) != n {
		return registryReply{}, replyLenError("registry", len(v), n)
	}
	r := registryReply{Now: v[0], Live: v[1]}
	if regions {
		r.Regions = v[2]
	}
	return r, nil
}

// decisionReply is a central script's decision: what the single-rule
// scripts pack, and what the multi-rule and refund scripts answer per rule.
type decisionReply struct {
	Reason    int64 // local.Reason: 0 admitted
	Remaining int64
	Reset     int64 // reset-after (µs)
	Retry     int64 // retry-after (µs)
	At        int64 // the time it decided at, as the state clamped it (µs)
	Resets    int64 // the bucket's reset count (0 for the others): a refund's check
}

func decisionOf(v []int64) decisionReply {
	return decisionReply{Reason: v[0], Remaining: v[1], Reset: v[2], Retry: v[3], At: v[4], Resets: v[5]}
}

// decodePacked reads a single-rule script's packed answer (see unpack).
func decodePacked(s string) (decisionReply, error) {
	v, ok := unpack(s)
	if !ok {
		return decisionReply{}, fmt.Errorf("%w: script answered %q, not a decision", ErrRedis, s)
	}
	return decisionOf(v[:]), nil
}

// decodeRefund reads lua/refund.lua's answer: the decision, as the state
// stands after the refund.
func decodeRefund(v []int64) (decisionReply, error) {
	if len(v) != decisionLen {
		return decisionReply{}, replyLenError("refund", len(v), decisionLen)
	}
	return decisionOf(v), nil
}

// decodeMulti reads lua/multi.lua's answer for n rules: {1 if all were
// admitted, then each rule's decision}.
func decodeMulti(v []int64, n int) (bool, []decisionReply, error) {
	if len(v) != 1+decisionLen*n {
		return false, nil, replyLenError("multi", len(v), 1+decisionLen*n)
	}
	ds := make([]decisionReply, n)
	for i := range ds {
		ds[i] = decisionOf(v[1+decisionLen*i : 1+decisionLen*(i+1)])
	}
	return v[0] == 1, ds, nil
}

func replyLenError(script string, got, want int) error {
	return fmt.Errorf("%w: %s script answered %d values, want %d", ErrRedis, script, got, want)
}

func boolFlag(b bool) int {
	if b {
		return 1
	}
	return 0
}
