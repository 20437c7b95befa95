package httplimit

import (
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"

	"github.com/hybridlimit/hybridlimit/hybrid"
	"github.com/hybridlimit/hybridlimit/internal/config"
	"github.com/hybridlimit/hybridlimit/internal/keyname"
	"github.com/hybridlimit/hybridlimit/internal/localx"
	"github.com/hybridlimit/hybridlimit/internal/ruleitem"
	"github.com/hybridlimit/hybridlimit/internal/rulereg"
	"github.com/hybridlimit/hybridlimit/local"
)

// The one validator of rules, whatever their source: SetRules (and so New
// and the watchers) and ParseRules (and so PublishRules) call checkRules.

// checked is a valid rule: compiled (without its hybrid rules), with its
// limit and its overridden limits.
type checked struct {
	c    *compiledRule
	base localx.Limit
	over map[string]localx.Limit // by tier or key; nil without
}

// checkRules validates rules, each one and as a set (their IDs unique),
// and returns them checked. The error is a *RuleError.
func checkRules(rules []Rule) ([]checked, error) {
	out := make([]checked, len(rules))
	seen := make(map[string]int, len(rules))
	for i := range rules {
		r := &rules[i]
		c, err := compile(i, r)
		if err != nil {
			return nil, err
		}
		if j, dup := seen[r.ID]; dup {
			return nil, ruleError(i, r.ID, "id", fmt.Sprintf("duplicate: rule %d has it too", j))
		}
		seen[r.ID] = i
		out[i] = c
	}
	return out, nil
}

// compile validates rule i and returns it checked.
func compile(i int, r *Rule) (checked, error) {
	pat, err := checkFields(i, r)
	if err != nil {
		return checked{}, err
	}
	base, over, err := limits(i, r)
	if err != nil {
		return checked{}, err
	}
	c := &compiledRule{
		id: r.ID, key: r.Key, pat: pat, tier: r.Tier, cost: max(r.Cost, 1), shadow: r.Shadow,
		window: ruleitem.Seconds(r.Window),
	}
	return checked{c: c, base: base, over: over}, nil
}

// checkFields checks rule i's fields one by one, in the order of a rules
// file, short of its limits, and returns its endpoint parsed.
func checkFields(i int, r *Rule) (pattern, error) {
	bad := func(field, reason string) (pattern, error) { return pattern{}, ruleError(i, r.ID, field, reason) }
	// The id first: every later error names the rule by it.
	if err := keyname.CheckRule(r.ID); err != nil {
		return bad("id", quoteShort(r.ID)+": "+err.Error())
	}
	switch r.Key {
	case KeyIP, KeyUser, KeyAPIKey:
	default:
		return bad("key", quoteShort(string(r.Key))+": must be ip, user or api_key")
	}
	endpoint := r.Endpoint
	if endpoint == "" {
		endpoint = "/"
	}
	pat, err := parsePattern(endpoint)
	if err != nil {
		return bad("endpoint", fmt.Sprintf("%s: not a ServeMux pattern: %v", quoteShort(r.Endpoint), err))
	}
	switch {
	case r.Algorithm == 0:
		return bad("algorithm", "required: "+enumChoices(reflect.TypeFor[local.Algorithm]()))
	case r.Quota <= 0:
		return bad("max_requests", fmt.Sprintf("%d: must be at least 1", r.Quota))
	case r.Window <= 0:
		return bad("window", fmt.Sprintf("%v: must be positive", r.Window))
	case r.Burst < 0:
		return bad("burst", fmt.Sprintf("%d: must not be negative", r.Burst))
	case r.Cost < 0:
		return bad("cost", fmt.Sprintf("%d: must not be negative", r.Cost))
	case r.Mode > hybrid.Hybrid:
		return bad("mode", fmt.Sprintf("%v: unknown", r.Mode))
	case r.Policy > hybrid.Gossip:
		return bad("policy", fmt.Sprintf("%v: unknown", r.Policy))
	case r.Wait > hybrid.WaitFirst:
		return bad("wait", fmt.Sprintf("%v: unknown", r.Wait))
	case r.Global && r.Algorithm != local.FixedWindow:
		return bad("global", fmt.Sprintf("true: needs algorithm fixed_window, not %v", r.Algorithm))
	case r.Global && r.Mode != 0 && r.Mode != hybrid.Hybrid:
		return bad("global", fmt.Sprintf("true: needs mode hybrid, not %v", r.Mode))
	}
	return pat, nil
}

// limits returns rule i's limit and its overridden limits, checking its
// cost against the limit. The overrides are checked in the order of their
// names, so that the same rule always gives the same error.
func limits(i int, r *Rule) (localx.Limit, map[string]localx.Limit, error) {
	bad := func(field, reason string) (localx.Limit, map[string]localx.Limit, error) {
		return localx.Limit{}, nil, ruleError(i, r.ID, field, reason)
	}
	params := local.Limit{Algorithm: r.Algorithm, Quota: r.Quota, Window: r.Window, Burst: r.Burst, SubWindows: r.SubWindows, Anchored: r.Anchored}
	lim, err := localx.NewLimit(params)
	if err != nil {
		field, reason := limitError(err)
		return bad(field, reason)
	}
	if r.Cost > lim.MaxCost() {
		return bad("cost", fmt.Sprintf("%d: above %d, the most the rule admits at once", r.Cost, lim.MaxCost()))
	}
	var over map[string]localx.Limit
	for _, name := range slices.Sorted(maps.Keys(r.Overrides)) {
		n := r.Overrides[name]
		field := "overrides[" + quoteShort(name) + "]"
		if name == "" || n <= 0 {
			return bad(field, fmt.Sprintf("%d: needs a tier or key and a limit of at least 1", n))
		}
		ol, err := localx.NewLimit(rulereg.OverrideLimit(params, n)) // the burst keeps its ratio to the quota
		if err != nil {
			_, reason := limitError(err)
			return bad(field, reason)
		}
		if err := keyname.CheckRule(rulereg.OverrideName(r.ID, name)); err != nil {
			return bad(field, "the rule ID is too long for overrides: "+err.Error())
		}
		if over == nil {
			over = map[string]localx.Limit{}
		}
		over[name] = ol
	}
	return lim, over, nil
}

// limitError returns the rule field, as a rules file spells it, and the
// reason of localx.NewLimit's error. A parameter is the Rule field of the
// same name (Window: "window"); the quota, and the rate the bucket
// algorithms derive from it, are max_requests.
func limitError(err error) (field, reason string) {
	var fe *config.FieldError
	if !errors.As(err, &fe) {
		return "", err.Error()
	}
	field = "max_requests"
	if f, ok := reflect.TypeFor[Rule]().FieldByName(fe.Field); ok {
		field = fieldTag(f).name
	}
	return field, fmt.Sprint(fe.Value) + ": " + fe.Reason
}
