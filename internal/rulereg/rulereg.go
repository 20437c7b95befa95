// Package rulereg registers the hybrid rules a rule set needs on a
// hybrid.Limiter and keeps them across versions of the set: the one logic
// of httplimit's and grpclimit's SetRules. A rule whose limit is unchanged
// keeps its hybrid rule, and so its counters; a changed limit goes
// through SetLimit; a rule may not change its Mode, Policy, Wait or
// Global under the same name; the hybrid rules no version uses any more are
// unregistered.
package rulereg

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"log/slog"

	"github.com/hybridlimit/hybridlimit/hybrid"
	"github.com/hybridlimit/hybridlimit/internal/localx"
	"github.com/hybridlimit/hybridlimit/local"
)

// Want is a hybrid rule a rule set needs: a rule's limit, or one of its
// overrides'.
type Want struct {
	Name   string // the hybrid rule's name: the rule's ID, or OverrideName's
	Limit  localx.Limit
	Mode   hybrid.Mode
	Policy hybrid.Policy
	Wait   hybrid.Wait
	Global bool
	Index  int    // the rule's position in its set, for errors
	ID     string // the rule's ID, for errors
}

// Error is a want the Limiter or the Registry refused, in the terms of a
// rule error: the caller makes it its own (httplimit.RuleError).
type Error struct {
	Index  int
	ID     string
	Field  string // as a rules file spells it
	Reason string
	Err    error // the Limiter's, or nil
}

func (e *Error) Error() string { return fmt.Sprintf("rule %q: %s: %s", e.ID, e.Field, e.Reason) }

// Unwrap returns the Limiter's error.
func (e *Error) Unwrap() error { return e.Err }

// Registry is the hybrid rules a rules engine registered on a Limiter.
// It is not safe for concurrent use: its owner serializes its SetRules.
type Registry struct {
	l      *hybrid.Limiter
	logger *slog.Logger
	name   string // the owner's package, for log lines
	reg    map[string]registered
}

// registered is a hybrid rule the Registry registered and the figures it
// was asked for, which a later Apply compares with its own.
type registered struct {
	rule   *hybrid.Rule
	limit  localx.Limit
	mode   hybrid.Mode
	policy hybrid.Policy
	wait   hybrid.Wait
	global bool
}

// New returns an empty Registry on l; name (the owner's package) starts
// its log lines.
func New(l *hybrid.Limiter, logger *slog.Logger, name string) *Registry {
	return &Registry{l: l, logger: logger, name: name, reg: map[string]registered{}}
}

// Apply registers the hybrid rules of wants that are new, checks those
// already registered against them, and sets the limits that changed. It
// returns each want's hybrid rule, in the order of wants. On error, the
// hybrid rules it registered go again (no rule in force uses them), and
// the error is an *Error.
func (r *Registry) Apply(wants []Want) (rules []*hybrid.Rule, err error) {
	var added []string
	defer func() {
		if err != nil {
			r.unregister(added)
		}
	}()
	rules = make([]*hybrid.Rule, len(wants))
	var changed []int
	for i, w := range wants {
		reg, ok := r.reg[w.Name]
		bad := func(field, reason string, err error) ([]*hybrid.Rule, error) {
			return nil, &Error{Index: w.Index, ID: w.ID, Field: field, Reason: reason, Err: err}
		}
		switch {
		case !ok:
			hr, err := r.l.Register(hybrid.Rule{Name: w.Name, Limit: w.Limit.Params(), Mode: w.Mode, Policy: w.Policy, Wait: w.Wait, Global: w.Global})
			if err != nil {
				return bad(registerField(w), "cannot register", err)
			}
			reg = registered{rule: hr, limit: w.Limit, mode: w.Mode, policy: w.Policy, wait: w.Wait, global: w.Global}
			r.reg[w.Name] = reg
			added = append(added, w.Name)
		case reg.mode != w.Mode:
			return bad("mode", fmt.Sprintf("was %s; a rule's mode cannot change under the same ID", reg.mode), nil)
		case reg.policy != w.Policy:
			return bad("policy", fmt.Sprintf("was %s; a rule's policy cannot change under the same ID", reg.policy), nil)
		case reg.wait != w.Wait:
			return bad("wait", fmt.Sprintf("was %s; a rule's wait cannot change under the same ID", reg.wait), nil)
		case reg.global != w.Global:
			return bad("global", fmt.Sprintf("was %t; a rule's global cannot change under the same ID", reg.global), nil)
		case reg.limit != w.Limit:
			changed = append(changed, i)
		}
		rules[i] = reg.rule
	}
	// Every want checked: only now change limits.
	for _, i := range changed {
		w := wants[i]
		reg := r.reg[w.Name]
		if err := r.l.SetLimit(reg.rule, w.Limit.Params()); err != nil {
			return nil, &Error{Index: w.Index, ID: w.ID, Field: "max_requests", Reason: "cannot change the limit", Err: err}
		}
		reg.limit = w.Limit
		r.reg[w.Name] = reg
	}
	return rules, nil
}

// registerField is the field a Register error of w is put on: global for
// a rule of global reach (the Limiter may have no Config.Global), mode
// otherwise (the Limiter may have no Redis for it).
func registerField(w Want) string {
	if w.Global {
		return "global"
	}
	return "mode"
}

// Prune unregisters the hybrid rules none of wants needs: call it once the
// rule set of wants is in force.
func (r *Registry) Prune(wants []Want) {
	used := make(map[string]bool, len(wants))
	for _, w := range wants {
		used[w.Name] = true
	}
	var gone []string
	for name := range r.reg {
		if !used[name] {
			gone = append(gone, name)
		}
	}
	r.unregister(gone)
}

// unregister unregisters the hybrid rules of names and forgets them.
func (r *Registry) unregister(names []string) {
	for _, name := range names {
		if err := r.l.Unregister(r.reg[name].rule); err != nil {
			// Not registered any more: the application unregistered it
			// itself, or closed the Limiter.
			r.logger.Debug(r.name+": unregister a rule no longer used", "rule", name, "err", err)
		}
		delete(r.reg, name)
	}
}

// OverrideName names the hybrid rule of rule id's override for a tier or
// key: a digest, so that no API key reaches Redis key names or metrics.
func OverrideName(id, name string) string {
	sum := sha256.Sum256([]byte(name))
	return id + ":o." + hex.EncodeToString(sum[:6])
}

// OverrideLimit returns the parameters of an override of quota n on a
// rule's limit p: the burst keeps its ratio to the quota.
func OverrideLimit(p local.Limit, n int64) local.Limit {
	o := p
	o.Quota = n
	if p.Burst > 0 {
		o.Burst = max(1, p.Burst*n/p.Quota)
	}
	return o
}
