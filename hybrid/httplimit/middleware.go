package httplimit

import (
	"crypto/sha256"
	"encoding/hex"
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
	met          *metrics

	mu  sync.Mutex            // serializes SetRules; guards reg
	reg map[string]registered // every hybrid rule this Middleware registered, by name

	set   atomic.Pointer[ruleSet]
	pool  sync.Pool // of *scratch
	small []string  // smallInts()
}

// registered is a hybrid rule the Middleware registered and the figures it
// was asked for, which a later SetRules compares with its own.
type registered struct {
	rule   *hybrid.Rule
	limit  localx.Limit
	mode   hybrid.Mode
	policy hybrid.Policy
	wait   hybrid.Wait
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
		item: []string{string(appendItem(nil, c, n))},
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
		l: l, cfg: cfg, ip: newClientIP(cfg), reg: map[string]registered{},
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
// rule may not change its Mode, Policy or Wait under the same ID. Rules of
// different modes mix freely: a per-IP Local rule and a per-user Hybrid
// quota decide as one.
//
// The error is a *RuleError naming the rule and the field; its cause is
// the Limiter's error when the Limiter refused a rule (Register, SetLimit).
func (m *Middleware) SetRules(rules []Rule) (err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	valid, err := checkRules(rules)
	if err != nil {
		return err
	}
	set, wants := plan(rules, valid)
	// Register what is new, and check what is not, before changing anything.
	// On error, what this call registered goes again: no rule in force
	// uses it.
	var added []string
	defer func() {
		if err != nil {
			m.unregister(added)
		}
	}()
	changed, err := m.register(wants, &added)
	if err != nil {
		return err
	}
	for _, w := range changed {
		reg := m.reg[w.name]
		if err := m.l.SetLimit(reg.rule, w.limit.Params()); err != nil {
			return &RuleError{Index: w.index, ID: w.r.ID, Field: "max_requests", Reason: "cannot change the limit", Err: err}
		}
		reg.limit = w.limit
		m.reg[w.name] = reg
	}
	m.cfg.Rules = cloneRules(rules)
	m.set.Store(set)
	// The hybrid rules no rule in force uses any more go. A request that
	// matched them in the set just replaced is decided again on this one
	// (serve).
	used := make(map[string]bool, len(wants))
	for _, w := range wants {
		used[w.name] = true
	}
	var gone []string
	for name := range m.reg {
		if !used[name] {
			gone = append(gone, name)
		}
	}
	m.unregister(gone)
	return nil
}

// want is a hybrid rule a rule set needs: a rule's limit, or one of its
// overrides'.
type want struct {
	c     *compiledRule
	name  string // the hybrid rule's name
	over  string // the override's tier or key, or "" for the base limit
	limit localx.Limit
	r     *Rule
	index int // r's position in the set
}

// plan returns the rule set of rules, checked as valid, and the hybrid
// rules it needs; the targets of its compiled rules are set by register.
func plan(rules []Rule, valid []checked) (*ruleSet, []want) {
	set := &ruleSet{rules: make([]*compiledRule, 0, len(rules))}
	var wants []want
	for i, v := range valid {
		r := &rules[i]
		set.rules = append(set.rules, v.c)
		wants = append(wants, want{c: v.c, name: r.ID, limit: v.base, r: r, index: i})
		for _, name := range slices.Sorted(maps.Keys(v.over)) {
			wants = append(wants, want{c: v.c, name: overrideName(r.ID, name), over: name, limit: v.over[name], r: r, index: i})
		}
	}
	return set, wants
}

// register registers the hybrid rules of wants that are new, appending
// their names to added, checks those already registered against their
// rules, and gives each compiled rule its targets. It returns the wants
// whose limit changed, for SetLimit. The caller holds mu.
func (m *Middleware) register(wants []want, added *[]string) ([]want, error) {
	var changed []want
	for _, w := range wants {
		reg, ok := m.reg[w.name]
		bad := func(field, reason string, err error) ([]want, error) {
			return nil, &RuleError{Index: w.index, ID: w.r.ID, Field: field, Reason: reason, Err: err}
		}
		switch {
		case !ok:
			hr, err := m.l.Register(hybrid.Rule{Name: w.name, Limit: w.limit.Params(), Mode: w.r.Mode, Policy: w.r.Policy, Wait: w.r.Wait})
			if err != nil {
				return bad("mode", "cannot register", err)
			}
			reg = registered{rule: hr, limit: w.limit, mode: w.r.Mode, policy: w.r.Policy, wait: w.r.Wait}
			m.reg[w.name] = reg
			*added = append(*added, w.name)
		case reg.mode != w.r.Mode:
			return bad("mode", fmt.Sprintf("was %s; a rule's mode cannot change under the same ID", reg.mode), nil)
		case reg.policy != w.r.Policy:
			return bad("policy", fmt.Sprintf("was %s; a rule's policy cannot change under the same ID", reg.policy), nil)
		case reg.wait != w.r.Wait:
			return bad("wait", fmt.Sprintf("was %s; a rule's wait cannot change under the same ID", reg.wait), nil)
		case reg.limit != w.limit:
			changed = append(changed, w)
		}
		t := newTarget(w.c, reg.rule, w.limit)
		if w.over == "" {
			w.c.base = t
			continue
		}
		if w.c.over == nil {
			w.c.over = map[string]*target{}
		}
		w.c.over[w.over] = t
	}
	return changed, nil
}

// unregister unregisters the hybrid rules of names from the Limiter and
// forgets them. The caller holds mu.
func (m *Middleware) unregister(names []string) {
	for _, name := range names {
		if err := m.l.Unregister(m.reg[name].rule); err != nil {
			// Not registered any more: the application unregistered it
			// itself, or closed the Limiter.
			m.cfg.Logger.Debug("httplimit: unregister a rule no longer used", "rule", name, "err", err)
		}
		delete(m.reg, name)
	}
}

// overrideName names the hybrid rule of rule id's override for a tier or
// key: a digest, so that no API key reaches Redis key names or metrics.
func overrideName(id, name string) string {
	sum := sha256.Sum256([]byte(name))
	return id + ":o." + hex.EncodeToString(sum[:6])
}
