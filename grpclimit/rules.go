package grpclimit

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"time"

	"github.com/hybridlimit/hybridlimit/hybrid"
	"github.com/hybridlimit/hybridlimit/hybrid/httplimit"
	"github.com/hybridlimit/hybridlimit/internal/localx"
	"github.com/hybridlimit/hybridlimit/local"
)

// ruleSet is the rules in force: SetRules builds a new one and swaps it in.
type ruleSet struct {
	rules []*compiledRule
}

// compiledRule is a rule ready to match and decide calls.
type compiledRule struct {
	id     string
	key    httplimit.KeyType
	method method
	tier   string
	cost   int64
	shadow bool
	window int64              // the window in whole seconds, rounded up, for ratelimit-policy's w
	base   *target            // the rule's limit
	over   map[string]*target // overridden limits, by single key or tier; nil without
}

// target is a hybrid rule a compiled rule decides with, and its
// ratelimit-policy item, formatted once per rule set.
type target struct {
	rule  *hybrid.Rule
	limit int64    // the decisions' Capacity the item is formatted for
	item  []string // "id";q=limit;w=window, shared by every call's header (never written)
}

// checkRules validates rules as httplimit does, by its one validator
// (httplimit.ParseRules reads them back from a rules document), then their
// endpoints as method patterns. The error is a *httplimit.RuleError.
func checkRules(rules []httplimit.Rule) ([]method, error) {
	doc, err := rulesDocument(rules)
	if err != nil {
		return nil, err
	}
	if _, err := httplimit.ParseRules(doc); err != nil {
		return nil, err
	}
	methods := make([]method, len(rules))
	for i := range rules {
		if methods[i], err = parseMethod(rules[i].Endpoint); err != nil {
			return nil, &httplimit.RuleError{Index: i, ID: rules[i].ID, Field: "endpoint", Reason: strconv.Quote(rules[i].Endpoint) + ": " + err.Error()}
		}
	}
	return methods, nil
}

// docRule is a Rule as a rules document spells it (docs/rules.md).
type docRule struct {
	ID          string           `json:"id"`
	Key         string           `json:"key"`
	Algorithm   string           `json:"algorithm,omitempty"`
	MaxRequests int64            `json:"max_requests"`
	Window      string           `json:"window,omitempty"`
	Burst       int64            `json:"burst,omitempty"`
	SubWindows  int64            `json:"sub_windows,omitempty"`
	Anchored    bool             `json:"anchored,omitempty"`
	Tier        string           `json:"tier,omitempty"`
	Cost        int64            `json:"cost,omitempty"`
	Mode        string           `json:"mode,omitempty"`
	Policy      string           `json:"policy,omitempty"`
	Wait        string           `json:"wait,omitempty"`
	Shadow      bool             `json:"shadow,omitempty"`
	Overrides   map[string]int64 `json:"overrides,omitempty"`
}

// rulesDocument returns rules as a JSON rules document; a zero enum is
// left out, as a rules file leaves out a default.
func rulesDocument(rules []httplimit.Rule) ([]byte, error) {
	out := make([]docRule, len(rules))
	for i, r := range rules {
		d := docRule{
			ID: r.ID, Key: string(r.Key), MaxRequests: r.Quota, // the endpoint is a method pattern: checkRules checks it
			Burst: r.Burst, SubWindows: r.SubWindows, Anchored: r.Anchored, Tier: r.Tier, Cost: r.Cost,
			Shadow: r.Shadow, Overrides: r.Overrides,
		}
		if r.Algorithm != 0 {
			d.Algorithm = r.Algorithm.String()
		}
		if r.Window != 0 {
			d.Window = r.Window.String()
		}
		if r.Mode != 0 {
			d.Mode = r.Mode.String()
		}
		if r.Policy != 0 {
			d.Policy = r.Policy.String()
		}
		if r.Wait != 0 {
			d.Wait = r.Wait.String()
		}
		out[i] = d
	}
	return json.Marshal(struct {
		Version int       `json:"version"`
		Rules   []docRule `json:"rules"`
	}{1, out})
}

// want is a hybrid rule a rule set needs: a rule's limit, or one of its
// overrides'.
type want struct {
	c     *compiledRule
	name  string // the hybrid rule's name
	over  string // the override's tier or key, or "" for the base limit
	limit localx.Limit
	r     *httplimit.Rule
	index int
}

// plan returns the rule set of rules, valid, and the hybrid rules it
// needs; register gives its compiled rules their targets.
func plan(rules []httplimit.Rule, methods []method) (*ruleSet, []want, error) {
	set := &ruleSet{rules: make([]*compiledRule, 0, len(rules))}
	var wants []want
	for i := range rules {
		r := &rules[i]
		c := &compiledRule{
			id: r.ID, key: r.Key, method: methods[i], tier: r.Tier, cost: max(r.Cost, 1),
			shadow: r.Shadow, window: seconds(r.Window),
		}
		set.rules = append(set.rules, c)
		params := local.Limit{Algorithm: r.Algorithm, Quota: r.Quota, Window: r.Window, Burst: r.Burst, SubWindows: r.SubWindows, Anchored: r.Anchored}
		base, err := localx.NewLimit(params)
		if err != nil {
			return nil, nil, err // ParseRules accepted it
		}
		wants = append(wants, want{c: c, name: r.ID, limit: base, r: r, index: i})
		for _, name := range slices.Sorted(maps.Keys(r.Overrides)) {
			n := r.Overrides[name]
			op := params
			op.Quota = n
			if r.Burst > 0 {
				op.Burst = max(1, r.Burst*n/r.Quota) // the burst keeps its ratio to the quota, as in httplimit
			}
			ol, err := localx.NewLimit(op)
			if err != nil {
				return nil, nil, err
			}
			wants = append(wants, want{c: c, name: overrideName(r.ID, name), over: name, limit: ol, r: r, index: i})
		}
	}
	return set, wants, nil
}

// overrideName names the hybrid rule of rule id's override for a tier or
// key, as httplimit does: a digest, so that no API key reaches Redis key
// names or metrics.
func overrideName(id, name string) string {
	sum := sha256.Sum256([]byte(name))
	return id + ":o." + hex.EncodeToString(sum[:6])
}

// registered is a hybrid rule the Interceptor registered and the figures
// it was asked for, which a later SetRules compares with its own.
type registered struct {
	rule   *hybrid.Rule
	limit  localx.Limit
	mode   hybrid.Mode
	policy hybrid.Policy
	wait   hybrid.Wait
}

// register registers the hybrid rules of wants that are new, appending
// their names to added, checks those already registered, and gives each
// compiled rule its targets. It returns the wants whose limit changed, for
// SetLimit. The caller holds mu.
func (ic *Interceptor) register(wants []want, added *[]string) ([]want, error) {
	var changed []want
	for _, w := range wants {
		reg, ok := ic.reg[w.name]
		bad := func(field, reason string, err error) ([]want, error) {
			return nil, &httplimit.RuleError{Index: w.index, ID: w.r.ID, Field: field, Reason: reason, Err: err}
		}
		switch {
		case !ok:
			hr, err := ic.l.Register(hybrid.Rule{Name: w.name, Limit: w.limit.Params(), Mode: w.r.Mode, Policy: w.r.Policy, Wait: w.r.Wait})
			if err != nil {
				return bad("mode", "cannot register", err)
			}
			reg = registered{rule: hr, limit: w.limit, mode: w.r.Mode, policy: w.r.Policy, wait: w.r.Wait}
			ic.reg[w.name] = reg
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
		n := w.limit.MaxCost()
		t := &target{rule: reg.rule, limit: n, item: []string{string(appendItem(nil, w.c.id, n, w.c.window))}}
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

// unregister unregisters the hybrid rules of names and forgets them. The
// caller holds mu.
func (ic *Interceptor) unregister(names []string) {
	for _, name := range names {
		if err := ic.l.Unregister(ic.reg[name].rule); err != nil && !errors.Is(err, hybrid.ErrUnknownRule) {
			ic.cfg.Logger.Debug("grpclimit: unregister a rule no longer used", "rule", name, "err", err)
		}
		delete(ic.reg, name)
	}
}

// seconds returns d in whole seconds, rounded up.
func seconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Second - 1) / time.Second)
}
