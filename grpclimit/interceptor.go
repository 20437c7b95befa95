package grpclimit

import (
	"fmt"
	"maps"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/hybridlimit/hybridlimit/hybrid"
	"github.com/hybridlimit/hybridlimit/hybrid/httplimit"
	"github.com/hybridlimit/hybridlimit/internal/clientip"
)

// Interceptor limits gRPC calls by its rules, over a hybrid.Limiter. Build
// one with New and install its UnaryServerInterceptor and
// StreamServerInterceptor on a grpc.Server. It is safe for concurrent
// use; SetRules replaces its rules while it serves.
//
// Every rule whose method pattern matches a call applies to it, keyed by
// its key type; a rule whose key the call lacks (no API key metadata, no
// user) does not apply. The enforced rules are decided together, all or
// nothing (hybrid.Limiter.AllowMulti); shadow rules are decided after
// them, when they admit, and never refuse. A stream is decided once, when
// it opens.
type Interceptor struct {
	l   *hybrid.Limiter
	cfg Config
	ip  clientip.Resolver
	met *metrics

	mu  sync.Mutex            // serializes SetRules; guards reg and cfg.Rules
	reg map[string]registered // every hybrid rule this Interceptor registered, by name

	set   atomic.Pointer[ruleSet]
	pool  sync.Pool // of *scratch
	peers peerCache
}

// New returns an Interceptor deciding with l, configured by cfg. It works
// on a copy of cfg with its zero fields set to their defaults (and its
// own copies of TrustedProxies and Tiers), never changing the caller's. A
// bad field is reported with an error wrapping ErrInvalidConfig (naming
// it); a bad rule in cfg.Rules with a *httplimit.RuleError, as SetRules
// reports it.
func New(l *hybrid.Limiter, cfg Config) (*Interceptor, error) {
	if l == nil {
		return nil, fmt.Errorf("%w: Limiter <nil>: required", ErrInvalidConfig)
	}
	cfg.TrustedProxies = slices.Clone(cfg.TrustedProxies)
	cfg.Tiers = maps.Clone(cfg.Tiers)
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	ic := &Interceptor{l: l, cfg: cfg, ip: newClientIP(cfg), reg: map[string]registered{}}
	var err error
	if ic.met, err = newMetrics(cfg.MeterProvider); err != nil {
		return nil, fmt.Errorf("%w: MeterProvider: %w", ErrInvalidConfig, err)
	}
	ic.pool.New = func() any { return new(scratch) }
	ic.cfg.Rules = nil
	if err := ic.SetRules(cfg.Rules); err != nil {
		return nil, err
	}
	return ic, nil
}

// Rules returns a copy of the rules in force.
func (ic *Interceptor) Rules() []httplimit.Rule {
	ic.mu.Lock()
	defer ic.mu.Unlock()
	return cloneRules(ic.cfg.Rules)
}

// cloneRules returns a copy of rules that shares no map with them.
func cloneRules(rules []httplimit.Rule) []httplimit.Rule {
	out := slices.Clone(rules)
	for i := range out {
		out[i].Overrides = maps.Clone(out[i].Overrides)
	}
	return out
}

// SetRules validates rules and puts them in force at once, in place of the
// current ones; on error the current ones stay. It takes the rules of
// httplimit.ParseRules, httplimit.WatchFile and httplimit.WatchRedis as
// they are (pass it as their apply function), with a method pattern in
// each Endpoint. As with httplimit.Middleware.SetRules, a rule whose limit
// is unchanged keeps its counters, a changed limit keeps consumption, a
// removed rule's hybrid rules are unregistered from the Limiter, and a
// rule may not change its Mode, Policy or Wait under the same ID. Rule IDs
// name hybrid rules: they must not be used by another Interceptor or
// Middleware on the same Limiter.
//
// The error is a *httplimit.RuleError naming the rule and the field.
func (ic *Interceptor) SetRules(rules []httplimit.Rule) (err error) {
	ic.mu.Lock()
	defer ic.mu.Unlock()
	methods, err := checkRules(rules)
	if err != nil {
		return err
	}
	set, wants, err := plan(rules, methods)
	if err != nil {
		return err
	}
	var added []string
	defer func() {
		if err != nil {
			ic.unregister(added) // no rule in force uses them
		}
	}()
	changed, err := ic.register(wants, &added)
	if err != nil {
		return err
	}
	for _, w := range changed {
		reg := ic.reg[w.name]
		if err := ic.l.SetLimit(reg.rule, w.limit.Params()); err != nil {
			return &httplimit.RuleError{Index: w.index, ID: w.r.ID, Field: "max_requests", Reason: "cannot change the limit", Err: err}
		}
		reg.limit = w.limit
		ic.reg[w.name] = reg
	}
	ic.cfg.Rules = cloneRules(rules)
	ic.set.Store(set)
	used := make(map[string]bool, len(wants))
	for _, w := range wants {
		used[w.name] = true
	}
	var gone []string
	for name := range ic.reg {
		if !used[name] {
			gone = append(gone, name)
		}
	}
	ic.unregister(gone)
	return nil
}
