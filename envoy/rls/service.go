package rls

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/metric"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/hybridlimit/hybridlimit/hybrid"
	"github.com/hybridlimit/hybridlimit/local"
)

// Bounds on a request, so that one request cannot hold the service long.
const (
	// maxRequestDescriptors is the most descriptors a request may carry.
	maxRequestDescriptors = 64
	// maxOverrideRules caps the rules made for requests' limit overrides
	// (one per unit and requests_per_unit); past it an override is
	// ignored and the configuration decides.
	maxOverrideRules = 256
)

// Header names of response_headers_to_add: those of
// draft-ietf-httpapi-ratelimit-headers, as hybrid/httplimit sends them.
const (
	headerPolicy     = "ratelimit-policy"
	headerRateLimit  = "ratelimit"
	headerRetryAfter = "retry-after"
)

// Config configures a Service. Every field documents its default.
type Config struct {
	// Limiter decides. Required. The Service registers a rule with it per
	// limit of its configuration, and unregisters them when the
	// configuration drops them and on Close; the Limiter itself stays the
	// caller's to close, after the Service.
	Limiter *hybrid.Limiter
	// Clock tells the time of duration_until_reset for fixed windows (the
	// Limiter reads its own clock for decisions). Default: time.Now.
	Clock local.Clock
	// Logger receives configuration changes and decisions' errors.
	// Default slog.Default().
	Logger *slog.Logger
	// ShadowMode answers OK overall whatever the descriptors' statuses
	// (envoyproxy/ratelimit's global shadow mode). Default false.
	ShadowMode bool
	// DisableHeaders leaves response_headers_to_add empty. Default false:
	// ratelimit-policy and ratelimit are sent, and retry-after when the
	// overall code is OVER_LIMIT.
	DisableHeaders bool
	// MeterProvider receives the hybridlimit.envoy.hits counter: the hits
	// (hits_addend) of the descriptors a limit decided, by domain, limit
	// (the configuration's key, domain.key_value.key…, or with
	// detailed_metric the request's) and result (within_limit, over_limit,
	// or shadow_over_limit). Default: the global one
	// (otel.GetMeterProvider()).
	MeterProvider metric.MeterProvider
}

type wallClock struct{}

func (wallClock) Now() time.Time { return time.Now() }

// Service is an Envoy rate limit service (envoy.service.ratelimit.v3's
// RateLimitService) deciding with a hybrid.Limiter, on a configuration in
// envoyproxy/ratelimit's format that Apply replaces as it changes. Its
// methods are safe for concurrent use.
type Service struct {
	rlsv3.UnimplementedRateLimitServiceServer

	cfg  Config
	snap atomic.Pointer[snapshot]

	mu        sync.Mutex // serializes Apply, Close and the override rules' registration
	rules     map[string]registered
	hits      metric.Int64Counter
	overrides sync.Map // overrideKey → *limit
	nOverride int
	closed    bool
}

// registered is a rule the Service registered, and what it was registered
// with.
type registered struct {
	rule *hybrid.Rule
	spec limitSpec
}

var _ rlsv3.RateLimitServiceServer = (*Service)(nil)

// New returns a Service deciding with cfg.Limiter. It holds no
// configuration until Apply: every descriptor is then answered OK
// without a limit, as an unknown domain is.
func New(cfg Config) (*Service, error) {
	if cfg.Limiter == nil {
		return nil, fmt.Errorf("%w: Limiter: required", ErrInvalidConfig)
	}
	if cfg.Clock == nil {
		cfg.Clock = wallClock{}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.MeterProvider == nil {
		cfg.MeterProvider = otel.GetMeterProvider()
	}
	hits, err := hitsCounter(cfg.MeterProvider)
	if err != nil {
		return nil, err
	}
	s := &Service{cfg: cfg, rules: map[string]registered{}, hits: hits}
	s.snap.Store(&snapshot{})
	return s, nil
}

// Apply replaces the Service's configuration with files (one domain each):
// it registers a rule with the Limiter for each new limit, moves a
// changed limit (SetLimit) or registers it again when its algorithm,
// mode, policy, wait or reach (RateLimit.Global) changed, and unregisters
// the limits the files no longer hold, once requests decide with the new
// configuration. A limit
// keeps its rule, and its counts, while its place in the tree (its full
// key) stays. On error nothing changes.
func (s *Service) Apply(files []*File) error {
	next, err := build(files)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return errClosed
	}
	keep := map[string]registered{}
	var failed error
	next.limits(func(l *limit) {
		if l.ruleName == "" || failed != nil {
			return
		}
		if r, ok := keep[l.ruleName]; ok {
			l.rule = r.rule // two limits cannot share a full key; defensive
			return
		}
		r, err := s.ruleFor(l)
		if err != nil {
			failed = err
			return
		}
		l.rule = r.rule
		keep[l.ruleName] = r
	})
	if failed != nil {
		// Unregister the rules registered for next alone.
		for name, r := range keep {
			if old, ok := s.rules[name]; !ok || old.rule != r.rule {
				s.cfg.Limiter.Unregister(r.rule)
			}
		}
		return failed
	}
	s.snap.Store(next)
	for name, r := range s.rules {
		if k, ok := keep[name]; !ok || k.rule != r.rule {
			s.cfg.Limiter.Unregister(r.rule)
		}
	}
	s.rules = keep
	n := 0
	next.limits(func(*limit) { n++ })
	s.cfg.Logger.Info("rls: configuration applied", "domains", len(files), "limits", n, "rules", len(keep))
	return nil
}

// ruleFor returns the registered rule of l: the one it had, moved to its
// limit if only that changed, or a new one.
func (s *Service) ruleFor(l *limit) (registered, error) {
	sp := l.spec
	if old, ok := s.rules[l.ruleName]; ok {
		// The name holds the algorithm, mode, policy, wait and reach: only
		// the limit may have changed.
		if old.spec.limit != sp.limit {
			if err := s.cfg.Limiter.SetLimit(old.rule, sp.limit); err != nil {
				return registered{}, fileError(l.fullKey, "%v", err)
			}
		}
		return registered{rule: old.rule, spec: sp}, nil
	}
	r, err := s.cfg.Limiter.Register(hybrid.Rule{Name: l.ruleName, Limit: sp.limit, Mode: sp.mode, Policy: sp.policy, Wait: sp.wait, Global: sp.global})
	if err != nil {
		return registered{}, fileError(l.fullKey, "%v", err)
	}
	return registered{rule: r, spec: sp}, nil
}

var errClosed = errors.New("rls: service closed")

// Close unregisters the Service's rules from the Limiter, which stays
// open. Requests afterwards are answered OK without limits. Close starts
// nothing and stops nothing else (the Service runs no goroutine); it is
// idempotent.
func (s *Service) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	s.snap.Store(&snapshot{})
	for _, r := range s.rules {
		s.cfg.Limiter.Unregister(r.rule)
	}
	s.overrides.Range(func(k, v any) bool {
		s.cfg.Limiter.Unregister(v.(*limit).rule)
		return true
	})
	s.rules = nil
	return nil
}

// decided is a descriptor's place in a request's decision.
type decided struct {
	l     *limit
	key   string
	cost  int64
	d     hybrid.Decision
	over  bool  // this limit refused
	state uint8 // what answers the descriptor: one of the state… constants
}

const (
	stateNone      uint8 = iota // no limit: OK
	stateUnlimited              // unlimited: OK, remaining MaxUint32
	stateReplaced               // replaced by another limit: OK, not counted
	stateDeny                   // requests_per_unit 0: OVER_LIMIT
	stateDecided                // decided by the Limiter
)

// ShouldRateLimit decides a request's descriptors, as
// envoy.service.ratelimit.v3.RateLimitService says, each under the limit
// its entries match in the request's domain.
//
// Each descriptor's cost is its hits_addend if set, else the request's,
// else 1. The descriptors whose limits are not in shadow mode are decided
// as one (hybrid.Limiter.AllowMulti): all are charged, or none, so a
// request refused by one limit does not use up the others (envoyproxy/
// ratelimit charges every descriptor, refused or not). Those in shadow mode
// are decided and charged each on its own and answer OK. A descriptor
// without a limit answers OK without current_limit; an unlimited one OK
// with limit_remaining 4294967295; one whose limit is replaced by another
// matched limit (replaces) OK, uncounted. A limit whose requests_per_unit
// is 0 refuses every request.
//
// The overall code is OVER_LIMIT when a descriptor is (but under
// Config.ShadowMode). Decisions made without Redis, by the limits' failure
// policies, are ordinary ones. The error is an InvalidArgument status for
// an empty domain, no descriptors or more than 64, or a descriptor
// without entries.
func (s *Service) ShouldRateLimit(ctx context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	descs := req.GetDescriptors()
	switch {
	case req.GetDomain() == "":
		return nil, status.Error(codes.InvalidArgument, "rls: the domain must not be empty")
	case len(descs) == 0:
		return nil, status.Error(codes.InvalidArgument, "rls: no descriptors")
	case len(descs) > maxRequestDescriptors:
		return nil, status.Errorf(codes.InvalidArgument, "rls: more than %d descriptors", maxRequestDescriptors)
	}
	for _, d := range descs {
		if len(d.GetEntries()) == 0 {
			return nil, status.Error(codes.InvalidArgument, "rls: a descriptor without entries")
		}
	}
	var buf [8]decided
	ds := buf[:0]
	if len(descs) > len(buf) {
		ds = make([]decided, 0, len(descs))
	}
	ds = ds[:len(descs)]
	var err error
	for range 2 {
		// A rule unregistered by an Apply between the snapshot's load and
		// the decision: decide again on the new snapshot.
		if err = s.decide(ctx, s.snap.Load(), req, ds); !errors.Is(err, hybrid.ErrUnknownRule) {
			break
		}
	}
	if err != nil && !errors.Is(err, hybrid.ErrUnknownRule) {
		// The decisions are still the policies' (ErrRedis): log and answer.
		s.cfg.Logger.Warn("rls: decision", "domain", req.GetDomain(), "error", err)
	}
	s.count(ctx, req, ds)
	return s.respond(ds), nil
}

// decide fills ds with req's decisions under snap.
func (s *Service) decide(ctx context.Context, snap *snapshot, req *rlsv3.RateLimitRequest, ds []decided) error {
	s.classify(snap, req, ds)
	var rbuf [8]hybrid.Request
	var ibuf [8]int
	reqs, at := rbuf[:0], ibuf[:0]
	denied := false
	for i := range ds {
		x := &ds[i]
		if x.state == stateDeny && !x.l.shadow {
			denied = true
		}
		if x.state == stateDecided && !x.l.shadow {
			x.key = requestKey(req.GetDomain(), req.GetDescriptors()[i])
			reqs = append(reqs, hybrid.Request{Rule: x.l.rule, Key: x.key, N: x.cost})
			at = append(at, i)
		}
	}
	var firstErr error
	if len(reqs) > 0 {
		var obuf [8]hybrid.Decision
		out := obuf[:0]
		if len(reqs) > len(obuf) {
			out = make([]hybrid.Decision, len(reqs))
		}
		out = out[:len(reqs)]
		if denied {
			// A limit of 0 refuses the request: the others are checked,
			// not charged.
			for j := range reqs {
				reqs[j].N = 0
			}
		}
		_, firstErr = s.cfg.Limiter.AllowMulti(ctx, reqs, out)
		for j, i := range at {
			ds[i].d = out[j]
			ds[i].over = !out[j].Allowed() && out[j].Reason() != local.ReasonOK
		}
	}
	for i := range ds {
		x := &ds[i]
		if x.state != stateDecided || !x.l.shadow {
			continue
		}
		// In shadow mode: decided and charged on its own.
		x.key = requestKey(req.GetDomain(), req.GetDescriptors()[i])
		d, err := s.cfg.Limiter.AllowN(ctx, x.l.rule, x.key, x.cost)
		if err != nil && firstErr == nil {
			firstErr = err
		}
		x.d, x.over = d, !d.Allowed()
	}
	return firstErr
}

// classify sets each descriptor's limit, cost and state: no limit,
// unlimited, replaced, refused by a limit of 0, or to decide.
func (s *Service) classify(snap *snapshot, req *rlsv3.RateLimitRequest, ds []decided) {
	hits := int64(req.GetHitsAddend())
	if hits == 0 {
		hits = 1
	}
	var replaced map[string]bool
	for i, d := range req.GetDescriptors() {
		l := s.limitOf(snap, req.GetDomain(), d)
		cost := hits
		if h := d.GetHitsAddend(); h != nil {
			cost = int64(min(h.GetValue(), math.MaxInt32))
		}
		if d.GetIsNegativeHits() {
			cost = 0 // a refund: not supported; checked, not charged
		}
		ds[i] = decided{l: l, cost: cost}
		switch {
		case l == nil:
			ds[i].state = stateNone
		case l.spec.unlimited:
			ds[i].state = stateUnlimited
		default:
			ds[i].state = stateDecided
			for _, name := range l.replaces {
				if replaced == nil {
					replaced = map[string]bool{}
				}
				replaced[name] = true
			}
		}
	}
	for i := range ds {
		x := &ds[i]
		switch {
		case x.state != stateDecided:
		case x.l.name != "" && replaced[x.l.name]:
			x.state = stateReplaced
		case x.l.rule == nil:
			x.state, x.over = stateDeny, true
		}
	}
}

// limitOf is the limit of descriptor d: its limit override's if it has
// one, else the configuration's.
func (s *Service) limitOf(snap *snapshot, domain string, d *commonv3.RateLimitDescriptor) *limit {
	o := d.GetLimit()
	if o == nil {
		return snap.match(domain, d)
	}
	if _, known := snap.domains[domain]; !known {
		return nil
	}
	return s.override(rlsv3.RateLimitResponse_RateLimit_Unit(o.GetUnit()), o.GetRequestsPerUnit(), snap.match(domain, d))
}

// override returns the limit of a request's limit override, registering
// its rule the first time; past maxOverrideRules, fallback.
func (s *Service) override(unit rlsv3.RateLimitResponse_RateLimit_Unit, rpu uint32, fallback *limit) *limit {
	key := uint64(unit)<<32 | uint64(rpu)
	if v, ok := s.overrides.Load(key); ok {
		return v.(*limit)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if v, ok := s.overrides.Load(key); ok {
		return v.(*limit)
	}
	if s.closed || s.nOverride >= maxOverrideRules {
		return fallback
	}
	name := "override." + rlsv3.RateLimitResponse_RateLimit_Unit_name[int32(unit)]
	full := name + "." + strconv.FormatUint(uint64(rpu), 10)
	r := RateLimit{Unit: rlsv3.RateLimitResponse_RateLimit_Unit_name[int32(unit)], RequestsPerUnit: rpu}
	spec, err := r.spec(full)
	if err != nil {
		return fallback
	}
	l := &limit{spec: spec, fullKey: full, proto: &rlsv3.RateLimitResponse_RateLimit{RequestsPerUnit: rpu, Unit: unit}}
	l.itemName = sfString(full)
	l.policyItem = l.itemName + ";q=" + strconv.FormatUint(uint64(rpu), 10) + ";w=" + strconv.FormatInt(int64(spec.window/time.Second), 10)
	if rpu > 0 {
		l.ruleName = ruleName(full, spec)
		reg, err := s.cfg.Limiter.Register(hybrid.Rule{Name: l.ruleName, Limit: spec.limit})
		if err != nil {
			s.cfg.Logger.Warn("rls: limit override", "limit", full, "error", err)
			return fallback
		}
		l.rule = reg
	}
	s.nOverride++
	s.overrides.Store(key, l)
	return l
}

// requestKey is the Limiter's key of descriptor d in domain: the domain
// and each entry's key and value, length-prefixed so that no two
// descriptors share one.
func requestKey(domain string, d *commonv3.RateLimitDescriptor) string {
	n := len(domain) + 4
	for _, e := range d.GetEntries() {
		n += len(e.GetKey()) + len(e.GetValue()) + 8
	}
	b := make([]byte, 0, n)
	b = appendField(b, domain)
	for _, e := range d.GetEntries() {
		b = appendField(appendField(b, e.GetKey()), e.GetValue())
	}
	return string(b)
}

func appendField(b []byte, s string) []byte {
	b = strconv.AppendInt(b, int64(len(s)), 10)
	b = append(b, ':')
	return append(b, s...)
}

// respond builds the response of decisions ds.
func (s *Service) respond(ds []decided) *rlsv3.RateLimitResponse {
	now := s.cfg.Clock.Now()
	resp := &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OK, Statuses: make([]*rlsv3.RateLimitResponse_DescriptorStatus, len(ds))}
	head := -1 // the descriptor the ratelimit header tells of
	var headReset time.Duration
	var retry time.Duration
	for i := range ds {
		x := &ds[i]
		st := &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_OK}
		resp.Statuses[i] = st
		switch x.state {
		case stateNone, stateReplaced:
			continue
		case stateUnlimited:
			st.LimitRemaining = math.MaxUint32
			continue
		}
		st.CurrentLimit = x.l.proto
		reset := x.reset(now)
		st.DurationUntilReset = durationpb.New(reset)
		if x.state == stateDecided {
			st.LimitRemaining = uint32(min(max(x.d.Remaining(), 0), math.MaxUint32))
		}
		if x.over {
			st.LimitRemaining = 0
			if !x.l.shadow {
				st.Code = rlsv3.RateLimitResponse_OVER_LIMIT
				resp.OverallCode = rlsv3.RateLimitResponse_OVER_LIMIT
				retry = max(retry, reset)
			}
		}
		if x.l.shadow {
			continue
		}
		// The headline: the longest refusal, else the least remaining.
		switch {
		case head < 0:
			head, headReset = i, reset
		case st.Code == rlsv3.RateLimitResponse_OVER_LIMIT:
			if resp.Statuses[head].Code != rlsv3.RateLimitResponse_OVER_LIMIT || reset > headReset {
				head, headReset = i, reset
			}
		case resp.Statuses[head].Code == rlsv3.RateLimitResponse_OK && st.LimitRemaining < resp.Statuses[head].LimitRemaining:
			head, headReset = i, reset
		}
	}
	if s.cfg.ShadowMode {
		resp.OverallCode = rlsv3.RateLimitResponse_OK
	}
	if !s.cfg.DisableHeaders && head >= 0 {
		resp.ResponseHeadersToAdd = s.headers(ds, resp, head, headReset, retry)
	}
	return resp
}

// headers returns the response's ratelimit-policy, ratelimit and, when
// over the limit, retry-after headers, as hybrid/httplimit writes them.
func (s *Service) headers(ds []decided, resp *rlsv3.RateLimitResponse, head int, headReset, retry time.Duration) []*corev3.HeaderValue {
	var policy []byte
	for i := range ds {
		x := &ds[i]
		if x.l == nil || x.l.proto == nil || x.l.shadow || x.state == stateReplaced {
			continue
		}
		if len(policy) > 0 {
			policy = append(policy, ", "...)
		}
		policy = append(policy, x.l.policyItem...)
	}
	rl := make([]byte, 0, 64)
	rl = append(rl, ds[head].l.itemName...)
	rl = append(rl, ";r="...)
	rl = strconv.AppendUint(rl, uint64(resp.Statuses[head].LimitRemaining), 10)
	rl = append(rl, ";t="...)
	rl = strconv.AppendInt(rl, seconds(headReset), 10)
	h := []*corev3.HeaderValue{{Key: headerPolicy, Value: string(policy)}, {Key: headerRateLimit, Value: string(rl)}}
	if resp.OverallCode == rlsv3.RateLimitResponse_OVER_LIMIT {
		h = append(h, &corev3.HeaderValue{Key: headerRetryAfter, Value: strconv.FormatInt(max(seconds(retry), 1), 10)})
	}
	return h
}

// seconds rounds d up to whole seconds.
func seconds(d time.Duration) int64 { return int64((d + time.Second - 1) / time.Second) }

// reset is the descriptor's duration_until_reset at now: for a fixed
// window, the time to its end (the windows aligned to the Unix epoch, as
// envoyproxy/ratelimit's); for the other algorithms, when a refusal may be
// retried, or when an admitted key is back to its full limit.
func (x *decided) reset(now time.Time) time.Duration {
	sp := &x.l.spec
	if sp.limit.Algorithm == hybrid.FixedWindow || x.state == stateDeny {
		w := sp.window
		return w - time.Duration(now.UnixNano()%int64(w))
	}
	if x.over {
		return max(x.d.RetryAfter(), 0)
	}
	return max(x.d.ResetAfter(), 0)
}
