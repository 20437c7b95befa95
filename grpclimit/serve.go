package grpclimit

import (
	"context"
	"errors"
	"math/rand/v2"
	"net"
	"net/netip"
	"strings"
	"time"
	"unsafe"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/hybridlimit/hybridlimit/hybrid"
	"github.com/hybridlimit/hybridlimit/hybrid/httplimit"
	"github.com/hybridlimit/hybridlimit/internal/clientip"
	"github.com/hybridlimit/hybridlimit/internal/ruleitem"
)

// The response header metadata keys, draft-ietf-httpapi-ratelimit-headers'
// fields as httplimit writes them with RateLimitHeaders set.
const (
	mdPolicy    = "ratelimit-policy"
	mdRateLimit = "ratelimit"
)

// ErrorInfo's domain and reason in an Unavailable refusal's details.
const (
	errorDomain        = "hybridlimit"
	reasonUnavailable  = "RATE_LIMITER_UNAVAILABLE"
	unavailableRulesMD = "rules"
)

// UnaryServerInterceptor returns the interceptor of unary calls: a call
// the rules refuse gets a status error (codes.ResourceExhausted with
// google.rpc.RetryInfo and google.rpc.QuotaFailure; codes.Unavailable when
// only FailClosed rules refused, Redis unable to decide) and never reaches
// the handler; every decided call gets the ratelimit-policy and ratelimit
// header metadata unless Config.DisableHeaders.
func (ic *Interceptor) UnaryServerInterceptor() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		md, err := ic.check(call{ctx: ctx, method: info.FullMethod})
		if md != nil {
			grpc.SetHeader(ctx, md) //nolint:errcheck // only fails once headers are sent, which they cannot be yet
		}
		if err != nil {
			return nil, err
		}
		return handler(ctx, req)
	}
}

// StreamServerInterceptor returns the interceptor of streams, which
// decides a stream once, when it opens, as UnaryServerInterceptor decides
// a call; a refused stream never reaches the handler.
func (ic *Interceptor) StreamServerInterceptor() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		md, err := ic.check(call{ctx: ss.Context(), method: info.FullMethod})
		if md != nil {
			ss.SetHeader(md) //nolint:errcheck // only fails once headers are sent, which they cannot be yet
		}
		if err != nil {
			return err
		}
		return handler(srv, ss)
	}
}

// UnaryClientInterceptor returns an interceptor of a client's unary calls,
// for a client that keeps to a limit itself (a quota of a service it
// calls, a backend it must not overload): a call the rules refuse is not
// sent, and fails with the status error a server's interceptor would
// return. On the client, ip rules count by the connection's target
// (grpc.ClientConn.Target: a limit per backend), api_key rules by the
// outgoing metadata's API key, and user rules by UserFunc. No header
// metadata is set.
func (ic *Interceptor) UnaryClientInterceptor() grpc.UnaryClientInterceptor {
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		if _, err := ic.check(call{ctx: ctx, method: method, client: true, target: cc.Target()}); err != nil {
			return err
		}
		return invoker(ctx, method, req, reply, cc, opts...)
	}
}

// StreamClientInterceptor returns the interceptor of a client's streams,
// which decides a stream before it opens, as UnaryClientInterceptor
// decides a call.
func (ic *Interceptor) StreamClientInterceptor() grpc.StreamClientInterceptor {
	return func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
		if _, err := ic.check(call{ctx: ctx, method: method, client: true, target: cc.Target()}); err != nil {
			return nil, err
		}
		return streamer(ctx, desc, cc, method, opts...)
	}
}

// item is one matched rule of a call and its decision.
type item struct {
	c *compiledRule
	t *target // c's limit that decides the call: its own or an override
	ruleitem.Item
}

// RuleItem returns its ruleitem.Item, for ruleitem's functions.
func (it *item) RuleItem() *ruleitem.Item { return &it.Item }

// scratch is one call's working memory, pooled so that a call allocates
// none of it.
type scratch struct {
	items []item
	batch ruleitem.Batch
	buf   []byte
}

// call holds what a call's keys are made of, each looked up once and only
// when a rule needs it.
type call struct {
	ctx                    context.Context
	method                 string
	client                 bool   // an outgoing call: keyed by target and outgoing metadata
	target                 string // the client connection's target
	ip, apiKey, user, tier string
	haveIP, haveKey        bool
	haveUser, okUser       bool
	haveTier               bool
}

// check decides a call. It returns the header metadata to send (nil for
// none) and the status error of a refusal (nil to serve).
func (ic *Interceptor) check(q call) (metadata.MD, error) {
	set := ic.set.Load()
	if set == nil || len(set.rules) == 0 {
		return nil, nil
	}
	sc := ic.pool.Get().(*scratch)
	md, err := ic.limit(q, set, sc)
	ic.pool.Put(sc)
	return md, err
}

// limit decides call q on set. sc is not used after it returns.
func (ic *Interceptor) limit(q call, set *ruleSet, sc *scratch) (metadata.MD, error) {
	sc.items = sc.items[:0]
	ctx, fullMethod := q.ctx, q.method
	var cost int64
	if ic.cfg.Cost != nil {
		cost = ic.cfg.Cost(ctx, fullMethod)
	}
	for _, c := range set.rules {
		if !c.method.match(fullMethod) {
			continue
		}
		key, ok := ic.key(&q, c.key)
		if !ok {
			continue
		}
		t, ok := ruleitem.Choose(c.base, c.tier, c.over, key, func() string { return ic.tier(&q) })
		if !ok {
			continue
		}
		n := c.cost
		if cost > 0 {
			n = cost
		}
		sc.items = append(sc.items, item{c: c, t: t, Item: ruleitem.Item{Req: hybrid.Request{Rule: t.rule, Key: key, N: n}, Shadow: c.shadow || ic.cfg.Shadow}})
	}
	if len(sc.items) == 0 {
		return nil, nil
	}
	defer func() { clear(sc.items); sc.batch.Clear() }() // keep no call's keys in the pool
	admitted, decided := ic.decide(ctx, set, sc, false)
	if !decided {
		if now := ic.set.Load(); now != set {
			// SetRules unregistered a rule of set, which this call
			// matched: it is decided on the rules in force instead.
			return ic.limit(call{ctx: ctx, method: fullMethod, client: q.client, target: q.target}, now, sc)
		}
		return nil, nil // the Limiter was misused (logged): the call passes
	}
	if admitted {
		if ok, _ := ic.decide(ctx, set, sc, true); !ok {
			ic.met.ShadowRefused.Add(ctx, 1)
		}
	}
	var md metadata.MD
	if !ic.cfg.DisableHeaders && !q.client {
		md = ic.headers(sc, admitted)
	}
	if admitted {
		ic.met.Admitted.Add(ctx, 1)
		return md, nil
	}
	ic.met.Refused.Add(ctx, 1)
	return md, ic.refusal(sc)
}

// key returns the key of a rule of type t, and false when the call has
// none.
func (ic *Interceptor) key(q *call, t httplimit.KeyType) (string, bool) {
	switch t {
	case httplimit.KeyIP:
		if !q.haveIP {
			q.haveIP = true
			if q.client {
				q.ip = q.target
			} else {
				q.ip = ic.clientKey(q.ctx)
			}
		}
		return q.ip, q.ip != ""
	case httplimit.KeyAPIKey:
		return ic.apiKey(q), q.apiKey != ""
	default:
		if !q.haveUser {
			q.haveUser = true
			if ic.cfg.UserFunc != nil {
				q.user, q.okUser = ic.cfg.UserFunc(q.ctx, q.method)
			}
		}
		return q.user, q.okUser && q.user != ""
	}
}

// clientKey returns the key of the call's client address ("" without a
// peer): the peer's, or what trusted proxies forwarded.
func (ic *Interceptor) clientKey(ctx context.Context) string {
	p, ok := peer.FromContext(ctx)
	if !ok || p.Addr == nil {
		return ""
	}
	if tcp, ok := p.Addr.(*net.TCPAddr); ok {
		// Parsed from the socket's address, not from its text, which
		// net.TCPAddr.String allocates.
		pa := tcp.AddrPort().Addr().Unmap().WithZone("")
		if ic.ip.Believes(pa) {
			return ic.ip.Key(ic.ip.From(pa, "", ic.forwarded(ctx, pa)))
		}
		// The key is the peer's own: the same for every call of the
		// connection.
		if key, ok := ic.peers.get(tcp); ok {
			return key
		}
		key := ic.ip.Key(pa, "")
		ic.peers.put(tcp, key)
		return key
	}
	s := p.Addr.String()
	a, text, ok := clientip.ParseHost(s)
	if !ok {
		return s // not an IP (a Unix socket): the peer's own name
	}
	return ic.ip.Key(ic.ip.From(a, text, ic.forwarded(ctx, a)))
}

// forwarded returns the forwarding metadata of a call from peer pa, when
// the Resolver reads it; nil otherwise, read nowhere.
func (ic *Interceptor) forwarded(ctx context.Context, pa netip.Addr) map[string][]string {
	if !ic.ip.Believes(pa) {
		return nil
	}
	h := map[string][]string{forwardedFor: metadata.ValueFromIncomingContext(ctx, forwardedFor)}
	if ic.ip.Header != "" {
		h[ic.ip.Header] = metadata.ValueFromIncomingContext(ctx, ic.ip.Header)
	}
	return h
}

func (ic *Interceptor) apiKey(q *call) string {
	if !q.haveKey {
		q.haveKey = true
		var v []string
		if q.client {
			md, _ := metadata.FromOutgoingContext(q.ctx)
			v = md[ic.cfg.APIKeyHeader]
		} else {
			v = metadata.ValueFromIncomingContext(q.ctx, ic.cfg.APIKeyHeader)
		}
		if len(v) > 0 {
			q.apiKey = v[0]
		}
	}
	return q.apiKey
}

// tier returns the call's tier: its API key's.
func (ic *Interceptor) tier(q *call) string {
	if !q.haveTier {
		q.haveTier = true
		if k := ic.apiKey(q); k != "" {
			if ic.cfg.TierFunc != nil {
				q.tier = ic.cfg.TierFunc(k)
			} else {
				q.tier = ic.cfg.Tiers[k]
			}
		}
	}
	return q.tier
}

// decide decides the shadow items, or the enforced ones, all or nothing,
// and writes their decisions. It reports whether they were admitted, and
// whether they were decided at all: false when the Limiter reports misuse
// (logged), which lets the call pass, or a rule of set that SetRules has
// unregistered since (not logged).
func (ic *Interceptor) decide(ctx context.Context, set *ruleSet, sc *scratch, shadow bool) (admitted, decided bool) {
	admitted, err := ruleitem.Decide(ctx, ic.l, sc.items, &sc.batch, shadow)
	switch {
	case errors.Is(err, hybrid.ErrUnknownRule):
		if ic.set.Load() != set {
			return true, false // the rules changed under the call
		}
		ic.met.Errors.Add(ctx, 1)
		ic.cfg.Logger.Error("grpclimit: the limiter could not decide; the call passes", "err", err)
		return true, false
	case err != nil:
		// Redis answered with an error: the decisions are the failure
		// policies', served as they say. The Limiter logs it.
		ic.met.Errors.Add(ctx, 1)
	}
	if ruleitem.Degraded(sc.items, shadow) {
		ic.met.Degraded.Add(ctx, 1)
	}
	return admitted, true
}

// headers returns the ratelimit-policy and ratelimit metadata of the
// decided items, nil when no decided item has figures. A single policy
// item is shared from the rule set; the other values are one string.
func (ic *Interceptor) headers(sc *scratch, admitted bool) metadata.MD {
	hi := ruleitem.Headline(sc.items, admitted)
	if hi < 0 {
		return nil
	}
	h := &sc.items[hi]
	b := sc.buf[:0]
	var one *item
	count := 0
	for i := range sc.items {
		if it := &sc.items[i]; it.Decided(admitted) && it.Figures() {
			one = it
			count++
		}
	}
	shared := count == 1 && one.D.Capacity() == one.t.limit
	if !shared {
		first := true
		for i := range sc.items {
			it := &sc.items[i]
			if !it.Decided(admitted) || !it.Figures() {
				continue
			}
			if !first {
				b = append(b, ", "...)
			}
			first = false
			if it.D.Capacity() == it.t.limit {
				b = append(b, it.t.item[0]...)
			} else {
				b = ruleitem.AppendPolicy(b, it.c.id, it.D.Capacity(), it.c.window)
			}
		}
	}
	policyEnd := len(b)
	b = ruleitem.AppendRateLimit(b, h.c.id, h.D.Remaining(), h.Reset())
	sc.buf = b
	// One allocation for both values' bytes and their slices, when they
	// fit; the bytes are never written again, so the strings may point
	// into them.
	var str string
	var vals []string
	if len(b) <= len(valueBlock{}.buf) {
		blk := new(valueBlock)
		copy(blk.buf[:], b)
		str, vals = unsafe.String(&blk.buf[0], len(b)), blk.vals[:]
	} else {
		str, vals = string(b), make([]string, 2)
	}
	vals[0], vals[1] = str[:policyEnd], str[policyEnd:]
	md := metadata.MD{mdRateLimit: vals[1:2:2]}
	if shared {
		md[mdPolicy] = one.t.item
	} else {
		md[mdPolicy] = vals[0:1:1]
	}
	return md
}

// valueBlock holds a call's header values, their bytes and the backing
// array of their one-element slices: 128 bytes, enough for a ratelimit
// value and two or three policy items.
type valueBlock struct {
	vals [2]string
	buf  [96]byte
}

// retryDelay returns the RetryInfo delay: the longest wait among the
// violated enforced rules, jittered; at least a second for a FailClosed
// refusal made without Redis (whose decision says nothing of when Redis
// answers again), as httplimit's Retry-After, and at least a millisecond.
func (ic *Interceptor) retryDelay(sc *scratch) time.Duration {
	var d time.Duration
	for i := range sc.items {
		if it := &sc.items[i]; !it.Shadow && it.Violated() {
			d = max(d, it.D.RetryAfter())
			if it.Unavailable() {
				d = max(d, time.Second)
			}
		}
	}
	if ic.cfg.RetryJitter > 0 {
		d += rand.N(ic.cfg.RetryJitter + 1)
	}
	return max(d, time.Millisecond)
}

// refusal returns the status error of a refused call: ResourceExhausted
// with RetryInfo and a QuotaFailure naming each violated rule; or, when
// only FailClosed rules refused, unable to reach Redis, Unavailable with
// RetryInfo and an ErrorInfo naming them.
func (ic *Interceptor) refusal(sc *scratch) error {
	retry := &errdetails.RetryInfo{RetryDelay: durationpb.New(ic.retryDelay(sc))}
	var violations []*errdetails.QuotaFailure_Violation
	var unavailable []string
	for i := range sc.items {
		it := &sc.items[i]
		if it.Shadow || !it.Violated() {
			continue
		}
		if it.Unavailable() {
			unavailable = append(unavailable, it.c.id)
			continue
		}
		violations = append(violations, &errdetails.QuotaFailure_Violation{
			Subject:     string(it.c.key),
			Description: "rate limit " + it.c.id + " exceeded",
			QuotaId:     it.c.id,
			QuotaValue:  it.D.Capacity(),
		})
	}
	var st *status.Status
	var err error
	if len(violations) > 0 {
		st, err = status.New(codes.ResourceExhausted, "grpclimit: rate limit exceeded").
			WithDetails(retry, &errdetails.QuotaFailure{Violations: violations})
	} else {
		st, err = status.New(codes.Unavailable, "grpclimit: the rate limiter cannot decide: its shared store is unavailable").
			WithDetails(retry, &errdetails.ErrorInfo{Reason: reasonUnavailable, Domain: errorDomain, Metadata: map[string]string{unavailableRulesMD: strings.Join(unavailable, ",")}})
	}
	if err != nil {
		return status.Error(codes.ResourceExhausted, "grpclimit: rate limit exceeded") // details that do not marshal: never with these types
	}
	return st.Err()
}
