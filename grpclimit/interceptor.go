package grpclimit

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/hybridlimit/hybridlimit/hybrid"
	"github.com/hybridlimit/hybridlimit/hybrid/httplimit"
	"github.com/hybridlimit/hybridlimit/internal/clientip"
	"github.com/hybridlimit/hybridlimit/internal/ruleitem"
	"github.com/hybridlimit/hybridlimit/internal/rulereg"
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
	met *ruleitem.Metrics

	mu  sync.Mutex        // serializes SetRules; guards reg and cfg.Rules
	reg *rulereg.Registry // every hybrid rule this Interceptor registered

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
	ic := &Interceptor{l: l, cfg: cfg, ip: newClientIP(cfg), reg: rulereg.New(l, cfg.Logger, "grpclimit")}
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
// rule may not change its Mode, Policy, Wait or Global under the same ID.
// Rule IDs name hybrid rules: they must not be used by another
// Interceptor or Middleware on the same Limiter.
//
// The error is a *httplimit.RuleError naming the rule and the field.
func (ic *Interceptor) SetRules(rules []httplimit.Rule) error {
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
	hrs, err := ic.reg.Apply(wants.reg)
	if err != nil {
		var e *rulereg.Error
		if errors.As(err, &e) {
			return &httplimit.RuleError{Index: e.Index, ID: e.ID, Field: e.Field, Reason: e.Reason, Err: e.Err}
		}
		return err
	}
	for i, w := range wants.reg {
		c, n := wants.c[i], w.Limit.MaxCost()
		t := &target{rule: hrs[i], limit: n, item: []string{string(ruleitem.AppendPolicy(nil, c.id, n, c.window))}}
		if over := wants.over[i]; over != "" {
			if c.over == nil {
				c.over = map[string]*target{}
			}
			c.over[over] = t
			continue
		}
		c.base = t
	}
	ic.cfg.Rules = cloneRules(rules)
	ic.set.Store(set)
	ic.reg.Prune(wants.reg) // the hybrid rules no rule in force uses
	return nil
}
