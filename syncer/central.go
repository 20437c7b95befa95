package syncer

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hybridlimit/hybridlimit/internal/config"
	"github.com/hybridlimit/hybridlimit/internal/localx"
	"github.com/hybridlimit/hybridlimit/internal/synchook"
	"github.com/hybridlimit/hybridlimit/local"
)

// Defaults of CentralConfig: docs/operating.md#defaults lists them, and
// TestDefaults holds that table against them.
const defaultTimeout = config.Timeout

// CentralConfig configures a Central. Every zero field takes the default it
// documents (docs/operating.md#defaults lists them all).
type CentralConfig struct {
	// Client reaches Redis: a *redis.Client (one server, or Sentinel
	// through redis.NewFailoverClient), a *redis.ClusterClient, or another
	// redis.UniversalClient. Required.
	//
	// A go-redis client ignores contexts' deadlines on its sockets unless
	// its options set ContextTimeoutEnabled; a call to a paused Redis would
	// then hang until ReadTimeout whatever the caller's deadline. New
	// rejects a *redis.Client, *redis.ClusterClient or *redis.Ring without
	// it.
	Client redis.UniversalClient
	// Keyspace names the keys; see Keyspace. Every process sharing limits
	// must use the same one. Default: prefix "hl".
	Keyspace Keyspace
	// Timeout bounds each call: its deadline is its context's or Timeout
	// from its start, whichever comes first. A call whose context is
	// cancelled while it waits for Redis returns at that deadline, with the
	// context's error. Default 250ms.
	Timeout time.Duration
}

// withDefaults returns c with each zero field that has a default set to it.
func (c CentralConfig) withDefaults() CentralConfig {
	c.Keyspace = c.Keyspace.withDefaults()
	if c.Timeout == 0 {
		c.Timeout = defaultTimeout
	}
	return c
}

// validate reports c's first bad field, c having its defaults, in an error
// wrapping ErrInvalidConfig that names it. It builds nothing.
func (c CentralConfig) validate() error {
	if err := checkRedis(c.Client, c.Keyspace, "calls to Redis"); err != nil {
		return err
	}
	if c.Timeout < 0 {
		return invalidConfig("Timeout", c.Timeout, "must be positive")
	}
	return nil
}

// Central decides every request with one atomic script in Redis: exact
// across any number of processes, at the cost of a round trip per decision.
// It is the mode for small or security-critical limits, and the ground the
// hybrid mode stands on. A Central holds no goroutines and is safe for
// concurrent use.
//
// Each algorithm of package local has a Lua twin that makes the same
// decisions from the same state (the shared vectors and a randomized
// differential test hold them equal). Scripts read Redis's clock
// (redis.call('TIME')), so the processes' clocks need not agree.
type Central struct {
	client  redis.UniversalClient
	ks      Keyspace
	timeout time.Duration
	cluster bool // keys of different hash tags may live on different nodes
}

// NewCentral returns a Central for cfg. It works on a copy of cfg with its
// zero fields set to their defaults, and reports a bad field with an error
// wrapping ErrInvalidConfig.
func NewCentral(cfg CentralConfig) (*Central, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	ks := cfg.Keyspace
	ks.Secret = append([]byte(nil), ks.Secret...)
	_, single := cfg.Client.(*redis.Client)
	return &Central{client: cfg.Client, ks: ks, timeout: cfg.Timeout, cluster: !single}, nil
}

// checkRedis validates what NewCentral and newSyncer share: a client whose
// deadlines bound what (the calls it makes), and a keyspace.
func checkRedis(c redis.UniversalClient, ks Keyspace, what string) error {
	if c == nil {
		return invalidConfig("Client", c, "required")
	}
	if enabled, known := contextTimeouts(c); known && !enabled {
		return invalidConfig("Client", fmt.Sprintf("%T", c), "set ContextTimeoutEnabled in its options, or deadlines will not bound "+what)
	}
	return ks.validate()
}

// invalidConfig is the error of a bad Config field.
func invalidConfig(field string, value any, reason string) error {
	return config.Invalid(ErrInvalidConfig, field, value, reason)
}

func contextTimeouts(c redis.UniversalClient) (enabled, known bool) {
	switch c := c.(type) {
	case *redis.Client:
		return c.Options().ContextTimeoutEnabled, true
	case *redis.ClusterClient:
		return c.Options().ContextTimeoutEnabled, true
	case *redis.Ring:
		return c.Options().ContextTimeoutEnabled, true
	}
	return false, false
}

// preload loads every script into Redis (every master, on a Cluster), so the
// first decisions run by SHA. It is optional: a node without a script gets
// it on first use.
// failed returns err, a failed call's, having the client reload a
// Cluster's slots if Redis was out of reach.
func (c *Central) failed(err error) error {
	reloadSlots(c.client, err)
	return err
}

func (c *Central) preload(ctx context.Context) error {
	ctx, cancel := c.bound(ctx)
	defer cancel()
	for _, s := range scripts {
		if err := run(ctx, func(ctx context.Context) error { return s.Load(ctx, c.client).Err() }); err != nil {
			return wrap(ctx, "preload", err)
		}
	}
	return nil
}

// Ping checks that Redis can decide, every master of a Cluster, within ctx
// and Timeout: each answers, and takes a write (a key under the keyspace's
// prefix that lives 2s, probeTTL), so that a server that answers but cannot
// write, out of memory, after a failed save or a replica, reports
// unavailable. The error wraps ErrUnavailable or ErrRedis.
func (c *Central) Ping(ctx context.Context) error {
	ctx, cancel := c.bound(ctx)
	defer cancel()
	err := run(ctx, func(ctx context.Context) error {
		cc, ok := c.client.(*redis.ClusterClient)
		if !ok {
			return c.client.Set(ctx, c.ks.prefix()+":probe", 1, probeTTL).Err()
		}
		shards, err := cc.ClusterShards(ctx).Result()
		if err != nil {
			return err
		}
		// A key in each shard's first range of slots: the Cluster client
		// sends each to the shard's master.
		for _, sh := range shards {
			if len(sh.Slots) == 0 {
				continue
			}
			r := sh.Slots[0]
			if err := cc.Set(ctx, c.ks.prefix()+":probe:{"+tagInSlots(int(r.Start), int(r.End))+"}", 1, probeTTL).Err(); err != nil {
				return err
			}
		}
		return nil
	})
	return c.failed(wrap(ctx, "ping", err))
}

// probeTTL is how long Ping's probe keys live.
const probeTTL = 2 * time.Second

// tagInSlots returns a hash tag whose Cluster slot is from start to end.
func tagInSlots(start, end int) string {
	for i := 0; ; i++ {
		tag := strconv.Itoa(i)
		if s := slot("{" + tag + "}"); s >= start && s <= end {
			return tag
		}
	}
}

// bound caps ctx's deadline at Timeout from now.
func (c *Central) bound(ctx context.Context) (context.Context, context.CancelFunc) {
	if d, ok := ctx.Deadline(); ok && time.Until(d) <= c.timeout {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, c.timeout)
}

// AllowN decides a request of cost n for key under rule, at Redis's time,
// and charges n if it is admitted. A negative cost, or one above what the
// rule can ever admit, is decided without asking Redis (see local.Decision).
// The error, when Redis cannot decide, wraps ErrUnavailable or ErrRedis.
func (c *Central) AllowN(ctx context.Context, rule *Rule, key string, n int64) (local.Decision, error) {
	return c.allow(ctx, "", rule, key, n)
}

// allowNAt is AllowN with the time passed to the script instead of read
// from Redis's clock, for simulations on a virtual clock. The state clamps
// it as local does: a time earlier than one the key has stored counts as
// that time.
func (c *Central) allowNAt(ctx context.Context, now time.Time, rule *Rule, key string, n int64) (local.Decision, error) {
	return c.allow(ctx, timeArg(now), rule, key, n)
}

// timeArg is t as a script's time argument: µs since the epoch, in decimal.
func timeArg(t time.Time) string { return strconv.FormatInt(max(t.UnixMicro(), 0), 10) }

// precheck decides the costs no state can admit.
func precheck(r *Rule, n int64) (local.Decision, bool) {
	switch {
	case n < 0:
		return localx.Outcome{Reason: local.ReasonInvalidCost, Capacity: r.limit.MaxCost()}.Decision(), true
	case n > r.limit.MaxCost():
		return localx.Outcome{Reason: local.ReasonCostTooHigh, Capacity: r.limit.MaxCost()}.Decision(), true
	}
	return local.Decision{}, false
}

func (c *Central) allow(ctx context.Context, now string, r *Rule, key string, n int64) (local.Decision, error) {
	d, _, err := c.decide(ctx, now, r, key, n)
	return d, err
}

// decide is allow that also returns the time the script decided at
// (Redis's clock, or now, as the state clamped it).
func (c *Central) decide(ctx context.Context, now string, r *Rule, key string, n int64) (local.Decision, int64, error) {
	if d, done := precheck(r, n); done {
		return d, 0, nil
	}
	ctx, cancel := c.bound(ctx)
	defer cancel()
	var packed string
	keys, args := singleCall(&c.ks, now, r, key, n)
	err := run(ctx, func(ctx context.Context) (err error) {
		packed, err = scriptFor(r).Run(ctx, c.client, keys, args...).Text()
		return err
	})
	if err != nil {
		return local.Decision{}, 0, c.failed(wrap(ctx, "decide", err))
	}
	d, err := decodePacked(packed)
	if err != nil {
		return local.Decision{}, 0, err
	}
	return decision(r, d), d.At, nil
}

// singleCall is the keys and arguments of r's single-rule script.
func singleCall(ks *Keyspace, now string, r *Rule, key string, n int64) ([]string, []any) {
	return ks.scriptKeys(r, key), encodeSingle(now, n, r)
}

// decisionLen is the length of a script's answer: {reason, remaining,
// reset µs, retry µs, the time it decided at, the bucket's reset count (0
// for the others)}.
const decisionLen = 6

// unpack reads a single-rule script's answer: its decisionLen numbers packed
// into one string, each an integer below 2^53 as a little-endian IEEE
// double (Lua's struct.pack('<d')), which it holds exactly. It reports
// false for anything else.
func unpack(s string) (v [decisionLen]int64, ok bool) {
	if len(s) != 8*decisionLen {
		return v, false
	}
	for i := range v {
		var u uint64
		for j := 8*i + 7; j >= 8*i; j-- {
			u = u<<8 | uint64(s[j])
		}
		f := math.Float64frombits(u)
		if f != math.Trunc(f) || math.Abs(f) > 1<<53 {
			return v, false
		}
		v[i] = int64(f)
	}
	return v, true
}

// decision is a script's decision under r as a local.Decision.
func decision(r *Rule, d decisionReply) local.Decision {
	return localx.Outcome{
		Allowed:    d.Reason == 0,
		Reason:     local.Reason(d.Reason),
		Capacity:   r.limit.MaxCost(),
		Remaining:  d.Remaining,
		ResetAfter: time.Duration(d.Reset) * time.Microsecond,
		RetryAfter: time.Duration(d.Retry) * time.Microsecond,
	}.Decision()
}

// request is one rule of a multi-rule decision.
type request = synchook.Request[*Rule]

// allowMulti decides several requests as one, at the time now, or Redis's
// for the zero Time: all are admitted and charged, or none is charged. It
// writes one Decision per request into out (at least as long as reqs) and
// reports whether all were admitted; the Decisions follow
// local.AllowMultiAt's conventions.
//
// When every key lives in one slot (one Redis server, or a Cluster with
// Keyspace.SharedKeyTag and one user key) it is a single script and exact.
// Otherwise each rule is reserved by its own script, in one pipelined
// exchange per node, and the reservations are refunded if any rule refused:
// never more admitted than the limits allow, but a concurrent request may be
// refused because of a reservation about to be refunded.
func (c *Central) allowMulti(ctx context.Context, now time.Time, reqs []request, out []local.Decision) (bool, error) {
	return c.allowMultiGroups(ctx, multiTime(now), reqs, out, nil)
}

// multiTime is now as a script's time argument, or "" (Redis's clock) for
// the zero Time.
func multiTime(now time.Time) string {
	if now.IsZero() {
		return ""
	}
	return timeArg(now)
}

// charge is what a multi-rule decision charged in Redis, to be refunded if
// the caller's own decision over other rules refuses (the hybrid limiter
// decides central and hybrid rules as one).
type charge struct {
	c      *Central
	groups []*group
}

var _ synchook.Charge = (*charge)(nil)

// allowMultiCharge is allowMulti that also returns what it charged when it
// admitted, nil otherwise: Refund gives it back.
func (c *Central) allowMultiCharge(ctx context.Context, now time.Time, reqs []request, out []local.Decision) (synchook.Charge, bool, error) {
	ch := &charge{c: c}
	ok, err := c.allowMultiGroups(ctx, multiTime(now), reqs, out, &ch.groups)
	if !ok || err != nil {
		return nil, ok, err
	}
	return ch, true, nil
}

// Refund gives back what the decision charged: each rule's cost is refunded
// where it is still there, as a refused multi-rule decision does.
func (ch *charge) Refund(ctx context.Context) error {
	if ch == nil || len(ch.groups) == 0 {
		return nil
	}
	ctx, cancel := ch.c.bound(ctx)
	defer cancel()
	refunds := make([]call, 0, len(ch.groups))
	for _, g := range ch.groups {
		if g.n > 0 {
			refunds = append(refunds, refundCall(g))
		}
	}
	err := run(ctx, func(ctx context.Context) error {
		_, err := runPipelined(ctx, ch.c.client, ch.c.client.Pipeline, refunds)
		return err
	})
	ch.groups = nil
	return wrap(ctx, "refund", err)
}

// group is the requests of a multi-rule decision that name one state: the
// same rule and key, decided together with the sum of their costs.
type group struct {
	rule       *Rule
	key        string // a user key of the group (all name one state)
	state, log string
	n          int64
	reqs       []int
	at, z      int64 // of a reservation: the time it was decided at, the bucket's reset count
}

// allowMultiGroups is allowMulti; charged, when not nil, receives the groups
// charged by an admitted decision, with the time and reset count of each
// charge, for a later refund.
func (c *Central) allowMultiGroups(ctx context.Context, now string, reqs []request, out []local.Decision, charged *[]*group) (bool, error) {
	if len(out) < len(reqs) {
		panic("syncer: allowMulti: out is shorter than reqs")
	}
	if len(reqs) == 0 {
		return true, nil
	}
	// Costs no state can admit are refused without asking, each for
	// itself; the others are grouped by state.
	ok := true
	var groups []*group
	byState := map[string]*group{}
	for i, q := range reqs {
		if d, done := precheck(q.Rule, q.N); done {
			out[i], ok = d, false
			continue
		}
		state, log := c.ks.ruleKeys(q.Rule, q.Key)
		g := byState[state]
		if g == nil {
			g = &group{rule: q.Rule, key: q.Key, state: state, log: log}
			byState[state] = g
			groups = append(groups, g)
		}
		g.reqs = append(g.reqs, i)
		g.n += q.N
	}
	for _, g := range groups {
		if g.n > g.rule.limit.MaxCost() { // the same key twice, over its limit together
			ok = false
			for _, i := range g.reqs {
				out[i] = localx.Outcome{Reason: local.ReasonCostTooHigh, Capacity: g.rule.limit.MaxCost()}.Decision()
			}
			g.reqs = nil
		}
	}
	if len(groups) == 0 {
		return false, nil
	}
	if !ok { // refused before asking: charge nothing, report the others' state
		for _, g := range groups {
			g.n = 0
		}
	}
	ctx, cancel := c.bound(ctx)
	defer cancel()
	oneSlot := true
	for _, g := range groups[1:] {
		oneSlot = oneSlot && slot(g.state) == slot(groups[0].state)
	}
	var err error
	switch {
	case charged != nil && ok:
		// To be refundable, every group is charged by its own script, with
		// the time and reset count a refund needs.
		ok, err = c.reserveAll(ctx, now, groups, out)
		if ok && err == nil {
			*charged = groups
		}
	case !c.cluster || oneSlot:
		ok, err = c.multiScript(ctx, now, groups, ok, out)
	case !ok:
		_, err = c.eachScript(ctx, now, groups, out)
	default:
		ok, err = c.reserveAll(ctx, now, groups, out)
	}
	if err != nil {
		return false, err
	}
	if !ok {
		for i := range reqs {
			out[i] = localx.Refused(out[i])
		}
	}
	return ok, nil
}

func (g *group) fill(d local.Decision, out []local.Decision) {
	for _, i := range g.reqs {
		out[i] = d
	}
}

// multiScript decides every group in one script: exact, for keys that may
// share a script. With ok false (a cost was refused before asking), the
// groups' costs are 0 and it only reads their state.
func (c *Central) multiScript(ctx context.Context, now string, groups []*group, ok bool, out []local.Decision) (bool, error) {
	keys, args := encodeMulti(now, groups)
	var res []int64
	err := run(ctx, func(ctx context.Context) (err error) {
		res, err = scriptMulti.Run(ctx, c.client, keys, args...).Int64Slice()
		return err
	})
	if err != nil {
		return false, c.failed(wrap(ctx, "decide", err))
	}
	admitted, ds, err := decodeMulti(res, len(groups))
	if err != nil {
		return false, err
	}
	for i, g := range groups {
		g.fill(decision(g.rule, ds[i]), out)
	}
	return ok && admitted, nil
}

// eachScript decides every group with its own script, in one pipelined
// exchange per node, and returns the answers (nil for a group whose script
// did not answer a decision).
func (c *Central) eachScript(ctx context.Context, now string, groups []*group, out []local.Decision) ([]*decisionReply, error) {
	calls := make([]call, len(groups))
	for i, g := range groups {
		calls[i] = call{script: scriptFor(g.rule)}
		calls[i].keys, calls[i].args = singleCall(&c.ks, now, g.rule, g.key, g.n)
	}
	vals := make([]*decisionReply, len(groups))
	var perr error
	err := run(ctx, func(ctx context.Context) error {
		cmds, err := runPipelined(ctx, c.client, c.client.Pipeline, calls)
		perr = err
		for i, cmd := range cmds {
			if s, cerr := cmd.Text(); cerr == nil {
				if d, derr := decodePacked(s); derr == nil {
					vals[i] = &d
				} else if perr == nil {
					perr = derr
				}
			}
		}
		return nil
	})
	if err != nil {
		return nil, c.failed(wrap(ctx, "decide", err))
	}
	for i, g := range groups {
		if vals[i] != nil {
			g.fill(decision(g.rule, *vals[i]), out)
		}
	}
	if perr != nil && !errors.Is(perr, ErrRedis) {
		perr = c.failed(wrap(ctx, "decide", perr))
	}
	if perr != nil {
		return vals, perr
	}
	return vals, nil
}

// reserveAll charges every group with its own script, in one pipelined
// exchange per node, and refunds the charged ones if any refused.
func (c *Central) reserveAll(ctx context.Context, now string, groups []*group, out []local.Decision) (bool, error) {
	vals, err := c.eachScript(ctx, now, groups, out)
	if vals == nil && err != nil {
		// The exchange was abandoned (ctx ended): what it charged, if
		// anything, is not known and stays charged. Never over-admission.
		return false, err
	}
	// Whatever happened, find what was charged: an error must not leave a
	// reservation behind.
	ok := err == nil
	var charged []*group
	for i, g := range groups {
		v := vals[i]
		if v == nil {
			ok = false
			continue
		}
		g.at, g.z = v.At, v.Resets
		if v.Reason == 0 && g.n > 0 {
			charged = append(charged, g)
		}
		ok = ok && v.Reason == 0
	}
	if ok || len(charged) == 0 {
		return ok, err
	}
	refunds := make([]call, len(charged))
	for i, g := range charged {
		refunds[i] = refundCall(g)
	}
	after := make([]*decisionReply, len(charged))
	rerr := run(ctx, func(ctx context.Context) error {
		cmds, err := runPipelined(ctx, c.client, c.client.Pipeline, refunds)
		for i, cmd := range cmds {
			if v, cerr := cmd.Int64Slice(); cerr == nil {
				if d, derr := decodeRefund(v); derr == nil {
					after[i] = &d
				}
			}
		}
		return err
	})
	if rerr != nil {
		if err == nil {
			err = wrap(ctx, "refund", rerr)
		}
		return false, err
	}
	for i, g := range charged {
		// The refund answers the rule's state after it, without this
		// request: what a refused multi reports.
		if after[i] != nil {
			g.fill(decision(g.rule, *after[i]), out)
		}
	}
	return false, err
}
