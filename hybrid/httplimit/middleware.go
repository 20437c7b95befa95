package httplimit

import (
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/hybridlimit/hybridlimit/hybrid"
	"github.com/hybridlimit/hybridlimit/internal/clientip"
	"github.com/hybridlimit/hybridlimit/internal/localx"
	"github.com/hybridlimit/hybridlimit/internal/ruleitem"
	"github.com/hybridlimit/hybridlimit/internal/rulereg"
)

// Middleware limits HTTP requests by its rules, over a hybrid.Limiter.
// Build one with New and wrap handlers with Handler. It is safe for
// concurrent use; SetRules replaces its rules while it serves.
//
// Every rule whose pattern matches a request applies to it (unlike a
// ServeMux, which picks one pattern), keyed by its key type; a rule whose
// key the request lacks (no API key header, no user) does not apply. The
// enforced rules are decided together, all or nothing
// (hybrid.Limiter.AllowMulti); shadow rules are decided after them, when
// they admit, and never refuse.
type Middleware struct {
	l            *hybrid.Limiter
	cfg          Config
	ip           clientip.Resolver
	apiKeyHeader string
	met          *ruleitem.Metrics

	mu  sync.Mutex        // serializes SetRules; guards reg
	reg *rulereg.Registry // every hybrid rule this Middleware registered

	set   atomic.Pointer[ruleSet]
	pool  sync.Pool // of *scratch
	small []string  // smallInts()
}

// ruleSet is the rules in force: SetRules builds a new one and swaps it in.
type ruleSet struct {
	rules []*compiledRule
}

// compiledRule is a Rule ready to match and decide requests.
type compiledRule struct {
	id     string
	key    KeyType
	pat    pattern
	tier   string
	cost   int64
	shadow bool
	window int64              // the window in whole seconds, rounded up, for RateLimit-Policy's w
	base   *target            // the rule's limit
	over   map[string]*target // overridden limits, by single key or tier; nil without
}

// target is a hybrid rule a compiled rule decides with, and the header
// values that do not change from one request to the next, formatted once
// per rule set.
type target struct {
	rule  *hybrid.Rule
	limit int64    // the decisions' Limit the values are formatted for
	xLim  []string // X-RateLimit-Limit's value
	item  []string // this limit's RateLimit-Policy item: "id";q=limit;w=window
}

// newTarget returns the target of rule c deciding by hr, whose limit is lim.
// Its slices have one element and no spare capacity, so that they can be
// shared by every response's header: net/http only reads a response's
// header values, and an append to one (Header.Add) copies it.
func newTarget(c *compiledRule, hr *hybrid.Rule, lim localx.Limit) *target {
	n := lim.MaxCost()
	return &target{
		rule: hr, limit: n,
		xLim: []string{strconv.FormatInt(n, 10)},
		item: []string{string(ruleitem.AppendPolicy(nil, c.id, n, c.window))},
	}
}

// New returns a Middleware deciding with l, configured by cfg. It works on
// a copy of cfg with its zero fields set to their defaults (and its own
// copies of TrustedProxies and Tiers), never changing the caller's. A bad
// field is reported with an error wrapping ErrInvalidConfig (naming it); a
// bad rule in cfg.Rules with a *RuleError, as SetRules reports it.
func New(l *hybrid.Limiter, cfg Config) (*Middleware, error) {
	if l == nil {
		return nil, fmt.Errorf("%w: Limiter <nil>: required", ErrInvalidConfig)
	}
	cfg.TrustedProxies = slices.Clone(cfg.TrustedProxies)
	cfg.Tiers = maps.Clone(cfg.Tiers)
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	m := &Middleware{
		l: l, cfg: cfg, ip: newClientIP(cfg), reg: rulereg.New(l, cfg.Logger, "httplimit"),
		apiKeyHeader: http.CanonicalHeaderKey(cfg.APIKeyHeader),
	}
	var err error
	if m.met, err = newMetrics(cfg.MeterProvider); err != nil {
		return nil, fmt.Errorf("%w: MeterProvider: %w", ErrInvalidConfig, err)
	}
	m.pool.New = func() any { return new(scratch) }
	m.small = smallInts()
	m.cfg.Rules = nil
	if err := m.SetRules(cfg.Rules); err != nil {
		return nil, err
	}
	return m, nil
}

// Rules returns a copy of the rules in force.
func (m *Middleware) Rules() []Rule {
	m.mu.Lock()
	defer m.mu.Unlock()
	return cloneRules(m.cfg.Rules)
}

// cloneRules returns a copy of rules that shares no map with them.
func cloneRules(rules []Rule) []Rule {
	out := slices.Clone(rules)
	for i := range out {
		out[i].Overrides = maps.Clone(out[i].Overrides)
	}
	return out
}

// SetRules validates rules and puts them in force at once, in place of the
// current ones; on error the current ones stay. A rule whose limit is
// unchanged keeps its hybrid rule, and so its counters; a changed limit
// goes through hybrid.Limiter.SetLimit, which keeps consumption. The hybrid
// rules of a rule removed (its limit and each override's) are unregistered
// from the Limiter (hybrid.Limiter.Unregister): their memory and metric
// series go, and what their Hybrid keys admitted is reported to Redis by
// the syncer's next round. Added again later, a rule starts from what
// Redis still holds of it (Central and Hybrid modes) or afresh (Local). A
// rule may not change its Mode, Policy, Wait or Global under the same ID.
// Rules of different modes mix freely: a per-IP Local rule and a per-user
// Hybrid quota decide as one.
//
// The error is a *RuleError naming the rule and the field; its cause is
// the Limiter's error when the Limiter refused a rule (Register, SetLimit).
func (m *Middleware) SetRules(rules []Rule) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	valid, err := checkRules(rules)
	if err != nil {
		return err
	}
	set, wants := plan(rules, valid)
	hrs, err := m.reg.Apply(wants.reg)
	if err != nil {
		return ruleErrorOf(err)
	}
	for i, w := range wants.reg {
		t := newTarget(wants.c[i], hrs[i], w.Limit)
		if over := wants.over[i]; over != "" {
			c := wants.c[i]
			if c.over == nil {
				c.over = map[string]*target{}
			}
			c.over[over] = t
			continue
		}
		wants.c[i].base = t
	}
	m.cfg.Rules = cloneRules(rules)
	m.set.Store(set)
	// The hybrid rules no rule in force uses any more go. A request that
	// matched them in the set just replaced is decided again on this one
	// (serve).
	m.reg.Prune(wants.reg)
	return nil
}

// ruleErrorOf returns the *RuleError of a *rulereg.Error.
func ruleErrorOf(err error) error {
	var e *rulereg.Error
	if !errors.As(err, &e) {
		return err
	}
	return &RuleError{Index: e.Index, ID: e.ID, Field: e.Field, Reason: e.Reason, Err: e.Err}
}

// wants are the hybrid rules a rule set needs (reg), each with its
// compiled rule (c) and the override it is, or "" for the base limit
// (over), at the same index.
type wants struct {
	reg  []rulereg.Want
	c    []*compiledRule
	over []string
}

// plan returns the rule set of rules, checked as valid, and the hybrid
// rules it needs; SetRules gives its compiled rules their targets.
func plan(rules []Rule, valid []checked) (*ruleSet, wants) {
	set := &ruleSet{rules: make([]*compiledRule, 0, len(rules))}
	var ws wants
	add := func(c *compiledRule, r *Rule, i int, name, over string, lim localx.Limit) {
		ws.reg = append(ws.reg, rulereg.Want{Name: name, Limit: lim, Mode: r.Mode, Policy: r.Policy, Wait: r.Wait, Global: r.Global, Index: i, ID: r.ID})
		ws.c = append(ws.c, c)
		ws.over = append(ws.over, over)
	}
	for i, v := range valid {
		r := &rules[i]
		set.rules = append(set.rules, v.c)
		add(v.c, r, i, r.ID, "", v.base)
		for _, name := range slices.Sorted(maps.Keys(v.over)) {
			add(v.c, r, i, rulereg.OverrideName(r.ID, name), name, v.over[name])
		}
	}
	return set, ws
}
