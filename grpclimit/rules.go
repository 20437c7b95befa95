package grpclimit

import (
	"encoding/json"
	"maps"
	"slices"
	"strconv"

	"github.com/hybridlimit/hybridlimit/hybrid"
	"github.com/hybridlimit/hybridlimit/hybrid/httplimit"
	"github.com/hybridlimit/hybridlimit/internal/localx"
	"github.com/hybridlimit/hybridlimit/internal/ruleitem"
	"github.com/hybridlimit/hybridlimit/internal/rulereg"
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
	Global      bool             `json:"global,omitempty"`
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
			Global: r.Global, Shadow: r.Shadow, Overrides: r.Overrides,
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

// wants are the hybrid rules a rule set needs (reg), each with its
// compiled rule (c) and the override it is, or "" for the base limit
// (over), at the same index.
type wants struct {
	reg  []rulereg.Want
	c    []*compiledRule
	over []string
}

// plan returns the rule set of rules, valid, and the hybrid rules it
// needs; SetRules gives its compiled rules their targets.
func plan(rules []httplimit.Rule, methods []method) (*ruleSet, wants, error) {
	set := &ruleSet{rules: make([]*compiledRule, 0, len(rules))}
	var ws wants
	add := func(c *compiledRule, r *httplimit.Rule, i int, name, over string, p local.Limit) error {
		lim, err := localx.NewLimit(p)
		if err != nil {
			return err // ParseRules accepted it
		}
		ws.reg = append(ws.reg, rulereg.Want{Name: name, Limit: lim, Mode: r.Mode, Policy: r.Policy, Wait: r.Wait, Global: r.Global, Index: i, ID: r.ID})
		ws.c = append(ws.c, c)
		ws.over = append(ws.over, over)
		return nil
	}
	for i := range rules {
		r := &rules[i]
		c := &compiledRule{
			id: r.ID, key: r.Key, method: methods[i], tier: r.Tier, cost: max(r.Cost, 1),
			shadow: r.Shadow, window: ruleitem.Seconds(r.Window),
		}
		set.rules = append(set.rules, c)
		params := local.Limit{Algorithm: r.Algorithm, Quota: r.Quota, Window: r.Window, Burst: r.Burst, SubWindows: r.SubWindows, Anchored: r.Anchored}
		if err := add(c, r, i, r.ID, "", params); err != nil {
			return nil, ws, err
		}
		for _, name := range slices.Sorted(maps.Keys(r.Overrides)) {
			if err := add(c, r, i, rulereg.OverrideName(r.ID, name), name, rulereg.OverrideLimit(params, r.Overrides[name])); err != nil {
				return nil, ws, err
			}
		}
	}
	return set, ws, nil
}
