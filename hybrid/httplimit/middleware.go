package httplimit

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hybridlimit/hybridlimit/hybrid"
	"github.com/hybridlimit/hybridlimit/internal/config"
	"github.com/hybridlimit/hybridlimit/local"
	"github.com/hybridlimit/hybridlimit/syncer"
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
	ip           clientIP
	apiKeyHeader string
	clock        hybrid.Clock
	logger       *slog.Logger
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
	limit  hybrid.Limit
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
func newTarget(c *compiledRule, hr *hybrid.Rule, lim hybrid.Limit) *target {
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
// bad rule in cfg.Rules with a *RuleError.
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
		l: l, cfg: cfg, ip: newClientIP(cfg), clock: cfg.Clock, logger: cfg.Logger, reg: map[string]registered{},
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
	out := make([]Rule, len(m.cfg.Rules))
	for i, r := range m.cfg.Rules {
		r.Overrides = maps.Clone(r.Overrides)
		out[i] = r
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
// The error is a *RuleError naming the rule and the field, or one from
// the Limiter (Register).
func (m *Middleware) SetRules(rules []Rule) (err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	type want struct {
		c     *compiledRule
		name  string
		over  string // the override's tier or key, or "" for the base limit
		limit hybrid.Limit
		r     *Rule
	}
	var wants []want
	set := &ruleSet{rules: make([]*compiledRule, 0, len(rules))}
	ids := map[string]bool{}
	for i := range rules {
		r := &rules[i]
		c, base, over, err := compile(i, r)
		if err != nil {
			return err
		}
		if ids[r.ID] {
			return &RuleError{ID: r.ID, Field: "id", Reason: "used by two rules"}
		}
		ids[r.ID] = true
		set.rules = append(set.rules, c)
		wants = append(wants, want{c: c, name: r.ID, limit: base, r: r})
		for _, name := range slices.Sorted(maps.Keys(over)) {
			wants = append(wants, want{c: c, name: overrideName(r.ID, name), over: name, limit: over[name], r: r})
		}
	}
	// Register what is new, and check what is not, before changing anything.
	// On error, what this call registered goes again: no rule in force
	// uses it.
	var added []string
	defer func() {
		if err != nil {
			m.unregister(added)
		}
	}()
	var changed []want
	for _, w := range wants {
		reg, ok := m.reg[w.name]
		switch {
		case !ok:
			hr, err := m.l.Register(hybrid.Rule{Name: w.name, Limit: w.limit, Mode: w.r.Mode, Policy: w.r.Policy, Wait: w.r.Wait})
			if err != nil {
				return &RuleError{ID: w.r.ID, Field: "mode", Reason: "cannot register", Err: err}
			}
			reg = registered{rule: hr, limit: w.limit, mode: w.r.Mode, policy: w.r.Policy, wait: w.r.Wait}
			m.reg[w.name] = reg
			added = append(added, w.name)
		case reg.mode != w.r.Mode:
			return &RuleError{ID: w.r.ID, Field: "mode", Reason: fmt.Sprintf("was %s; a rule's mode cannot change under the same ID", reg.mode)}
		case reg.policy != w.r.Policy:
			return &RuleError{ID: w.r.ID, Field: "policy", Reason: fmt.Sprintf("was %s; a rule's policy cannot change under the same ID", reg.policy)}
		case reg.wait != w.r.Wait:
			return &RuleError{ID: w.r.ID, Field: "wait", Reason: fmt.Sprintf("was %s; a rule's wait cannot change under the same ID", reg.wait)}
		case reg.limit != w.limit:
			changed = append(changed, w)
		}
		t := newTarget(w.c, reg.rule, w.limit)
		if w.over == "" {
			w.c.base = t
		} else {
			if w.c.over == nil {
				w.c.over = map[string]*target{}
			}
			w.c.over[w.over] = t
		}
	}
	for _, w := range changed {
		reg := m.reg[w.name]
		if err := m.l.SetLimit(reg.rule, w.limit); err != nil {
			return &RuleError{ID: w.r.ID, Field: "max_requests", Reason: "cannot change the limit", Err: err}
		}
		reg.limit = w.limit
		m.reg[w.name] = reg
	}
	m.cfg.Rules = slices.Clone(rules)
	for i := range m.cfg.Rules {
		m.cfg.Rules[i].Overrides = maps.Clone(m.cfg.Rules[i].Overrides)
	}
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

// unregister unregisters the hybrid rules of names from the Limiter and
// forgets them. The caller holds mu.
func (m *Middleware) unregister(names []string) {
	for _, name := range names {
		if err := m.l.Unregister(m.reg[name].rule); err != nil {
			// Not registered any more: the application unregistered it
			// itself, or closed the Limiter.
			m.logger.Debug("httplimit: unregister a rule no longer used", "rule", name, "err", err)
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

// compile validates rule i and returns it compiled (without its hybrid
// rules), its limit, and its overridden limits.
func compile(i int, r *Rule) (*compiledRule, hybrid.Limit, map[string]hybrid.Limit, error) {
	id := r.ID
	if id == "" || len(id) > config.MaxRuleName {
		id = fmt.Sprintf("#%d", i)
	}
	bad := func(field, reason string, err error) (*compiledRule, hybrid.Limit, map[string]hybrid.Limit, error) {
		return nil, hybrid.Limit{}, nil, &RuleError{ID: id, Field: field, Reason: reason, Err: err}
	}
	if len(r.ID) > config.MaxRuleName {
		// Checked here: ValidRuleName's error would quote all of it.
		return bad("id", fmt.Sprintf("%s: not a rule name: longer than %d bytes", quoteShort(r.ID), config.MaxRuleName), nil)
	}
	if err := syncer.ValidRuleName(r.ID); err != nil {
		return bad("id", "not a rule name", err)
	}
	switch r.Key {
	case KeyIP, KeyUser, KeyAPIKey:
	default:
		return bad("key", quoteShort(string(r.Key))+": must be ip, user or api_key", nil)
	}
	endpoint := r.Endpoint
	if endpoint == "" {
		endpoint = "/"
	}
	pat, err := parsePattern(endpoint)
	if err != nil {
		return bad("endpoint", quoteShort(r.Endpoint)+": not a ServeMux pattern", err)
	}
	algo, err := local.ParseAlgorithm(r.Algorithm)
	if err != nil {
		// ParseAlgorithm's error quotes all of the name.
		return bad("algorithm", quoteShort(r.Algorithm), fmt.Errorf("%w: unknown algorithm", local.ErrInvalidLimit))
	}
	switch {
	case r.Limit <= 0:
		return bad("max_requests", fmt.Sprintf("%d: must be at least 1", r.Limit), nil)
	case r.Window <= 0:
		return bad("window", fmt.Sprintf("%v: must be positive", r.Window), nil)
	case r.Burst < 0:
		return bad("burst", fmt.Sprintf("%d: must not be negative", r.Burst), nil)
	case r.Cost < 0:
		return bad("cost", fmt.Sprintf("%d: must not be negative", r.Cost), nil)
	case r.Mode > hybrid.Hybrid:
		return bad("mode", fmt.Sprintf("%d: unknown", r.Mode), nil)
	case r.Policy > hybrid.Fallback:
		return bad("policy", fmt.Sprintf("%d: unknown", r.Policy), nil)
	case r.Wait > hybrid.WaitFirst:
		return bad("wait", fmt.Sprintf("%d: unknown", r.Wait), nil)
	}
	params := hybrid.Params{Algorithm: algo, Limit: r.Limit, Window: r.Window, Burst: r.Burst, SubWindows: r.SubWindows, Anchored: r.Anchored}
	lim, err := hybrid.NewLimit(params)
	if err != nil {
		return bad(limitField(err), "invalid", err)
	}
	var over map[string]hybrid.Limit
	for name, n := range r.Overrides {
		field := "overrides[" + quoteShort(name) + "]"
		if name == "" || n <= 0 {
			return bad(field, fmt.Sprintf("%d: needs a tier or key and a limit of at least 1", n), nil)
		}
		burst := r.Burst
		if burst > 0 {
			burst = max(1, burst*n/r.Limit) // the burst keeps its ratio to the limit
		}
		op := params
		op.Limit, op.Burst = n, burst
		ol, err := hybrid.NewLimit(op)
		if err != nil {
			return bad(field, "invalid", err)
		}
		if err := syncer.ValidRuleName(overrideName(r.ID, name)); err != nil {
			return bad(field, "the rule ID is too long for overrides", err)
		}
		if over == nil {
			over = map[string]hybrid.Limit{}
		}
		over[name] = ol
	}
	c := &compiledRule{
		id: r.ID, key: r.Key, pat: pat, tier: r.Tier, cost: max(r.Cost, 1), shadow: r.Shadow,
		window: int64((r.Window + time.Second - 1) / time.Second),
	}
	return c, lim, over, nil
}

// limitField returns the Rule field of a local.LimitError's field.
func limitField(err error) string {
	var le *local.LimitError
	if errors.As(err, &le) {
		switch le.Field {
		case "Limit", "rate":
			return "max_requests"
		case "Window":
			return "window"
		case "Burst":
			return "burst"
		case "Algorithm":
			return "algorithm"
		case "SubWindows":
			return "sub_windows"
		case "Anchored":
			return "anchored"
		}
	}
	return "max_requests"
}
