package httplimit

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/fsnotify/fsnotify"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.yaml.in/yaml/v3"

	"github.com/hybridlimit/hybridlimit/hybrid"
	"github.com/hybridlimit/hybridlimit/internal/config"
	"github.com/hybridlimit/hybridlimit/local"
	"github.com/hybridlimit/hybridlimit/syncer"
)

// ErrInvalidRules reports a rules document that cannot be used: malformed,
// an unknown field, a bad value or a duplicate id. The error is a
// *RulesError naming the rule and the field.
var ErrInvalidRules = errors.New("httplimit: invalid rules")

// RulesFormat is the rules document's format version, its top-level
// "version" field. ParseRules accepts this version only.
const RulesFormat = 1

// Bounds on a rules document (docs/operating.md#bounds), so that one from a
// broken or hostile source (a file anyone can write, a Redis others can
// reach) costs little to refuse. ParseRules and the watchers refuse a
// document past one; the watchers check maxRulesSize before reading it.
const (
	// maxRulesSize is the most bytes a rules document may have. 512 KiB
	// holds maxRules rules as docs/rules.md writes them (about 130 bytes
	// each) and maxOverrides overrides, with room for comments; and it
	// bounds the densest YAML, whose parser builds a node of about 160
	// bytes for every two bytes of input before anything can be checked.
	maxRulesSize = 512 << 10
	// maxRules is the most rules a document may hold. The middleware
	// matches every request against each rule, so a set this large already
	// costs microseconds a request.
	maxRules = 2048
	// maxOverrides is the most overrides a document may hold, its rules'
	// together; each is a rule of the Limiter. Many single keys belong in
	// tiers (Config.Tiers, Config.TierFunc).
	maxOverrides = 8192
	// maxFieldSize is the most bytes of a string value (key, endpoint,
	// algorithm, window, tier, mode, policy) or an override's name; an id
	// has at most 128 (a rule name).
	maxFieldSize = 1024
)

// RulesError describes what is wrong with a rules document. It wraps
// ErrInvalidRules.
type RulesError struct {
	Index  int    // the rule's position in "rules", from 0; -1 for the document itself
	ID     string // the rule's id, when it has one
	Field  string // the field, as the document spells it ("window"); "" for the whole rule
	Reason string // what is wrong
	Err    error  // the cause: a *RuleError when the rule is one SetRules would refuse; or nil
}

// Error names the rule (id, or index), the field and what is wrong.
func (e *RulesError) Error() string {
	var b strings.Builder
	b.WriteString("httplimit: invalid rules: ")
	switch {
	case e.Index < 0:
	case e.ID != "":
		fmt.Fprintf(&b, "rule %q: ", e.ID)
	default:
		fmt.Fprintf(&b, "rule %d: ", e.Index)
	}
	if e.Field != "" {
		b.WriteString(e.Field)
		b.WriteString(": ")
	}
	b.WriteString(e.Reason)
	return b.String()
}

// Unwrap returns ErrInvalidRules and the cause, if any.
func (e *RulesError) Unwrap() []error {
	if e.Err != nil {
		return []error{ErrInvalidRules, e.Err}
	}
	return []error{ErrInvalidRules}
}

// fileRule is a rule as the document spells it: Window, Mode and Policy as
// strings, which Rule holds in their Go types.
type fileRule struct {
	ID          string           `json:"id"`
	Key         string           `json:"key"`
	Endpoint    string           `json:"endpoint"`
	Algorithm   string           `json:"algorithm"`
	MaxRequests int64            `json:"max_requests"`
	Window      string           `json:"window"`
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

// rulesDoc is the whole document.
type rulesDoc struct {
	Version int        `json:"version"`
	Rules   []fileRule `json:"rules"`
}

// field returns the destination of the rule's field name, nil for an
// unknown name. Both formats decode field by field through it, so an error
// names the field.
func (r *fileRule) field(name string) any {
	switch name {
	case "id":
		return &r.ID
	case "key":
		return &r.Key
	case "endpoint":
		return &r.Endpoint
	case "algorithm":
		return &r.Algorithm
	case "max_requests":
		return &r.MaxRequests
	case "window":
		return &r.Window
	case "burst":
		return &r.Burst
	case "sub_windows":
		return &r.SubWindows
	case "anchored":
		return &r.Anchored
	case "tier":
		return &r.Tier
	case "cost":
		return &r.Cost
	case "mode":
		return &r.Mode
	case "policy":
		return &r.Policy
	case "wait":
		return &r.Wait
	case "shadow":
		return &r.Shadow
	case "overrides":
		return &r.Overrides
	}
	return nil
}

// ParseRules parses a rules document, YAML or JSON (a document whose first
// non-blank byte is '{' is JSON), and validates every rule. The format is
// described in docs/rules.md:
//
//	version: 1
//	rules:
//	  - id: api-user
//	    key: user
//	    endpoint: GET /api/
//	    algorithm: sliding_window_counter
//	    max_requests: 100
//	    window: 1m
//
// Unknown fields, bad values and duplicate ids are rejected with a
// *RulesError (wrapping ErrInvalidRules) naming the rule and the field. An
// empty document is rejected (a version is required), so a file caught
// half-written never removes every limit; "rules: []" does that on purpose.
// So is a document past a bound (docs/rules.md#bounds: 512 KiB, checked
// first, 2,048 rules, 8,192 overrides, 1,024 bytes a value); errors quote
// at most a short prefix of a value.
func ParseRules(data []byte) ([]Rule, error) {
	if len(data) > maxRulesSize {
		return nil, tooLarge(int64(len(data)))
	}
	var (
		doc rulesDoc
		err error
	)
	if t := bytes.TrimLeft(data, " \t\r\n"); len(t) > 0 && t[0] == '{' {
		err = decodeJSON(data, &doc)
	} else {
		err = decodeYAML(data, &doc)
	}
	if err != nil {
		return nil, err
	}
	if doc.Version != RulesFormat {
		return nil, docError("version", fmt.Sprintf("%d: must be %d", doc.Version, RulesFormat))
	}
	overrides := 0
	for i := range doc.Rules {
		if overrides += len(doc.Rules[i].Overrides); overrides > maxOverrides {
			return nil, ruleError(i, doc.Rules[i].ID, "overrides", fmt.Sprintf("%d up to this rule: more than %d in the document", overrides, maxOverrides))
		}
	}
	rules := make([]Rule, len(doc.Rules))
	seen := make(map[string]int, len(doc.Rules))
	for i := range doc.Rules {
		if rules[i], err = doc.Rules[i].rule(i); err != nil {
			return nil, err
		}
		if j, dup := seen[rules[i].ID]; dup {
			return nil, ruleError(i, rules[i].ID, "id", fmt.Sprintf("duplicate: rule %d has it too", j))
		}
		seen[rules[i].ID] = i
	}
	return rules, nil
}

// quoteMax is the most bytes of a value an error quotes.
const quoteMax = 64

// quoteShort quotes s for an error, whole when it is short, else its first
// quoteMax bytes and its length: a hostile value is never copied whole
// into an error or a log line.
func quoteShort(s string) string {
	if len(s) <= quoteMax {
		return strconv.Quote(s)
	}
	cut := quoteMax
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return strconv.Quote(s[:cut]) + "… (" + strconv.Itoa(len(s)) + " bytes)"
}

// tooLarge is the error of a document of n bytes, past maxRulesSize.
func tooLarge(n int64) error {
	return docError("", fmt.Sprintf("%d bytes: more than the %d bytes a document may have", n, maxRulesSize))
}

// tooMany is the error of a list of n rules, past maxRules.
func tooMany(line string, n int) error {
	return docError("rules", fmt.Sprintf("%s%d rules: more than %d", line, n, maxRules))
}

// docError and ruleError name the field, and a rule by its id: an id too
// long to be one is left out, and the rule named by its index.
func docError(field, reason string) error {
	return &RulesError{Index: -1, Field: field, Reason: reason}
}

func ruleError(i int, id, field, reason string) error {
	if len(id) > config.MaxRuleName {
		id = ""
	}
	return &RulesError{Index: i, ID: id, Field: field, Reason: reason}
}

// fieldName is a name the document gives a field, as an error names it:
// quoted short when it is too long to be a field's (an unknown field).
func fieldName(s string) string {
	if len(s) > quoteMax {
		return quoteShort(s)
	}
	return s
}

// decodeJSON decodes a JSON document field by field.
func decodeJSON(data []byte, doc *rulesDoc) error {
	top, err := jsonObject(data)
	var dup duplicateError
	if errors.As(err, &dup) {
		return docError(fieldName(string(dup)), "given twice")
	}
	if err != nil {
		return docError("", "malformed JSON: "+err.Error())
	}
	if _, err := jsonObject(data[top.end:]); !errors.Is(err, io.EOF) {
		return docError("", "malformed JSON: data after the document")
	}
	for _, f := range top.fields {
		switch f.name {
		case "version":
			if err := strictJSON(f.value, &doc.Version); err != nil {
				return docError("version", "must be an integer")
			}
		case "rules":
			var list []json.RawMessage
			if err := strictJSON(f.value, &list); err != nil {
				return docError("rules", "must be a list of rules")
			}
			if len(list) > maxRules {
				return tooMany("", len(list))
			}
			doc.Rules = make([]fileRule, len(list))
			for i, raw := range list {
				if err := decodeJSONRule(i, raw, &doc.Rules[i]); err != nil {
					return err
				}
			}
		default:
			return docError(fieldName(f.name), "unknown field")
		}
	}
	return nil
}

func decodeJSONRule(i int, raw json.RawMessage, r *fileRule) error {
	var named struct{ ID string }
	json.Unmarshal(raw, &named) // the id, to name the rule in the errors below
	r.ID = named.ID
	obj, err := jsonObject(raw)
	var dup duplicateError
	if errors.As(err, &dup) {
		return ruleError(i, r.ID, fieldName(string(dup)), "given twice")
	}
	if err != nil {
		return ruleError(i, r.ID, "", "must be an object")
	}
	for _, f := range obj.fields {
		dst := r.field(f.name)
		if dst == nil {
			return ruleError(i, r.ID, fieldName(f.name), "unknown field")
		}
		if err := strictJSON(f.value, dst); err != nil {
			return ruleError(i, r.ID, f.name, typeReason(f.name))
		}
	}
	return nil
}

// object is a JSON object's fields in document order, and the offset of
// the byte after it.
type object struct {
	fields []jsonField
	end    int
}

// duplicateError names a field an object gives twice.
type duplicateError string

func (e duplicateError) Error() string { return fmt.Sprintf("field %q given twice", string(e)) }

type jsonField struct {
	name  string
	value json.RawMessage
}

// jsonObject reads the JSON object at the start of data. Unlike
// unmarshaling into a map, it keeps the fields' order (the first bad one
// is reported, always the same) and rejects a name given twice. It returns
// io.EOF when data holds only white space.
func jsonObject(data []byte) (object, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	tok, err := dec.Token()
	if err != nil {
		return object{}, err
	}
	if tok != json.Delim('{') {
		return object{}, errors.New("not an object")
	}
	var obj object
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return object{}, err
		}
		name := tok.(string) // object keys are strings, or Token fails
		if seen[name] {
			return object{}, duplicateError(name)
		}
		seen[name] = true
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return object{}, err
		}
		obj.fields = append(obj.fields, jsonField{name, v})
	}
	if _, err := dec.Token(); err != nil {
		return object{}, err
	}
	obj.end = int(dec.InputOffset())
	return obj, nil
}

// strictJSON unmarshals data, rejecting unknown fields and trailing data.
func strictJSON(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if _, err := dec.Token(); err != io.EOF {
		return errors.New("data after the document")
	}
	return nil
}

// typeReason says what type a field takes, for a value of the wrong type.
func typeReason(name string) string {
	switch name {
	case "max_requests", "burst", "sub_windows", "cost":
		return "must be an integer"
	case "shadow", "anchored":
		return "must be true or false"
	case "overrides":
		return "must map tier names or keys to integer limits"
	case "window":
		return `must be a duration string, such as "10s", "1m" or "1d"`
	}
	return "must be a string"
}

// decodeYAML decodes a YAML document field by field.
func decodeYAML(data []byte, doc *rulesDoc) error {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	var root yaml.Node
	if err := dec.Decode(&root); err != nil {
		if err == io.EOF {
			return docError("version", "missing: the document is empty")
		}
		return docError("", "malformed YAML: "+err.Error())
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); err != io.EOF {
		return docError("", "more than one YAML document")
	}
	if err := plainYAML(&root); err != nil {
		return err
	}
	top := &root
	if top.Kind == yaml.DocumentNode && len(top.Content) == 1 {
		top = top.Content[0]
	}
	if top.Kind != yaml.MappingNode {
		return docError("", "must be a mapping of version and rules")
	}
	seen := map[string]bool{}
	for k := 0; k+1 < len(top.Content); k += 2 {
		name, v := top.Content[k].Value, top.Content[k+1]
		if seen[name] {
			return docError(fieldName(name), fmt.Sprintf("line %d: given twice", top.Content[k].Line))
		}
		seen[name] = true
		switch name {
		case "version":
			if !yamlTyped(v, &doc.Version) || v.Decode(&doc.Version) != nil {
				return docError("version", fmt.Sprintf("line %d: must be an integer", v.Line))
			}
		case "rules":
			if v.Kind != yaml.SequenceNode {
				if v.Tag == "!!null" {
					continue // "rules:" with nothing after it: no rules
				}
				return docError("rules", fmt.Sprintf("line %d: must be a list of rules", v.Line))
			}
			if len(v.Content) > maxRules {
				return tooMany(fmt.Sprintf("line %d: ", v.Line), len(v.Content))
			}
			doc.Rules = make([]fileRule, len(v.Content))
			for i, n := range v.Content {
				if err := decodeYAMLRule(i, n, &doc.Rules[i]); err != nil {
					return err
				}
			}
		default:
			return docError(fieldName(name), fmt.Sprintf("line %d: unknown field", top.Content[k].Line))
		}
	}
	return nil
}

func decodeYAMLRule(i int, n *yaml.Node, r *fileRule) error {
	if n.Kind != yaml.MappingNode {
		return ruleError(i, "", "", fmt.Sprintf("line %d: must be a mapping", n.Line))
	}
	for k := 0; k+1 < len(n.Content); k += 2 {
		if v := n.Content[k+1]; n.Content[k].Value == "id" && yamlTyped(v, &r.ID) {
			v.Decode(&r.ID) // named in the errors below; checked with the others
		}
	}
	seen := map[string]bool{}
	for k := 0; k+1 < len(n.Content); k += 2 {
		key, v := n.Content[k], n.Content[k+1]
		dst := r.field(key.Value)
		if dst == nil {
			return ruleError(i, r.ID, fieldName(key.Value), fmt.Sprintf("line %d: unknown field", key.Line))
		}
		if seen[key.Value] {
			return ruleError(i, r.ID, key.Value, fmt.Sprintf("line %d: given twice", key.Line))
		}
		seen[key.Value] = true
		if over, ok := dst.(*map[string]int64); ok && v.Kind == yaml.MappingNode {
			if err := decodeYAMLOverrides(i, r.ID, v, over); err != nil {
				return err
			}
			continue
		}
		if !yamlTyped(v, dst) || v.Decode(dst) != nil {
			reason := fmt.Sprintf("line %d: %s", v.Line, typeReason(key.Value))
			if _, str := dst.(*string); str && v.Kind == yaml.ScalarNode && v.Style == 0 {
				reason += fmt.Sprintf(" (quote it: YAML reads %s as %s)", quoteShort(v.Value), yamlType(v))
			}
			return ruleError(i, r.ID, key.Value, reason)
		}
	}
	return nil
}

// yamlTyped reports whether node v has the JSON type of dst, so that YAML
// takes exactly the values JSON does: an integer field an integer (never a
// float, which Decode would truncate, or a string), a boolean true or false
// (not YAML 1.1's yes and on), a string a string (tier: 2024 must be
// quoted), overrides a mapping of integers. null is absent, as JSON's is.
func yamlTyped(v *yaml.Node, dst any) bool {
	if v.Kind == yaml.ScalarNode && v.ShortTag() == "!!null" {
		return true
	}
	switch dst.(type) {
	case *string:
		return v.Kind == yaml.ScalarNode && v.ShortTag() == "!!str"
	case *int, *int64:
		return v.Kind == yaml.ScalarNode && v.ShortTag() == "!!int"
	case *bool:
		return v.Kind == yaml.ScalarNode && v.ShortTag() == "!!bool"
	}
	return false // overrides: a mapping, decodeYAMLOverrides's
}

// decodeYAMLOverrides decodes rule i's overrides, mapping v, into over:
// names as written, each limit an integer (or null), a name given twice
// refused. It counts them first, and finds names given twice with a map:
// yaml's own Decode compares every key with every other, which takes
// seconds for a mapping that fits in maxRulesSize.
func decodeYAMLOverrides(i int, id string, v *yaml.Node, over *map[string]int64) error {
	if n := len(v.Content) / 2; n > maxOverrides {
		return ruleError(i, id, "overrides", fmt.Sprintf("line %d: %d: more than %d in the document", v.Line, n, maxOverrides))
	}
	m := make(map[string]int64, len(v.Content)/2)
	for k := 0; k+1 < len(v.Content); k += 2 {
		key, val := v.Content[k], v.Content[k+1]
		var n int64
		if key.Kind != yaml.ScalarNode || !yamlTyped(val, &n) || val.Decode(&n) != nil {
			return ruleError(i, id, "overrides", fmt.Sprintf("line %d: %s", val.Line, typeReason("overrides")))
		}
		name := key.Value
		if key.ShortTag() == "!!null" {
			name = ""
		}
		if _, dup := m[name]; dup {
			return ruleError(i, id, "overrides["+quoteShort(name)+"]", fmt.Sprintf("line %d: given twice", key.Line))
		}
		m[name] = n
	}
	*over = m
	return nil
}

// yamlType names the type YAML gives plain scalar v, for an error.
func yamlType(v *yaml.Node) string {
	switch v.ShortTag() {
	case "!!int", "!!float":
		return "a number"
	case "!!bool":
		return "a boolean"
	case "!!timestamp":
		return "a date"
	}
	return v.ShortTag()
}

// plainYAML rejects the YAML features a rules document has no use for,
// which would otherwise give misleading errors or costly documents:
// anchors and aliases (an alias is not a rule, and aliases can multiply a
// small document), and merge keys (<<), which no field is named.
func plainYAML(n *yaml.Node) error {
	switch {
	case n.Anchor != "" || n.Kind == yaml.AliasNode:
		return docError("", fmt.Sprintf("line %d: anchors and aliases are not supported", n.Line))
	case n.ShortTag() == "!!merge":
		return docError("", fmt.Sprintf("line %d: merge keys (<<) are not supported", n.Line))
	}
	for _, c := range n.Content {
		if err := plainYAML(c); err != nil {
			return err
		}
	}
	return nil
}

// rule validates r, the i-th rule, and returns it as a Rule. The checks
// are SetRules's (compile), so a document that parses is one SetRules
// takes, short of conflicts with the rules already in force.
func (r *fileRule) rule(i int) (Rule, error) {
	fail := func(field, reason string) (Rule, error) { return Rule{}, ruleError(i, r.ID, field, reason) }
	out := Rule{
		ID: r.ID, Key: KeyType(r.Key), Endpoint: r.Endpoint, Algorithm: r.Algorithm, Limit: r.MaxRequests,
		Burst: r.Burst, SubWindows: r.SubWindows, Anchored: r.Anchored, Tier: r.Tier, Cost: r.Cost, Shadow: r.Shadow,
		Overrides: r.Overrides,
	}
	if len(out.Overrides) == 0 {
		out.Overrides = nil // "overrides: {}" is no overrides, as MarshalRules writes it
	}
	if algo, err := local.ParseAlgorithm(r.Algorithm); err == nil {
		out.Algorithm = algo.String() // one spelling, so an unchanged rule compares equal
	}
	// The id first: every later error names the rule by it.
	if len(r.ID) > config.MaxRuleName || syncer.ValidRuleName(r.ID) != nil {
		return fail("id", fmt.Sprintf("%s: 1 to %d bytes of letters, digits and -_.:/", quoteShort(r.ID), config.MaxRuleName))
	}
	for _, f := range [...]struct{ name, value string }{
		{"key", r.Key}, {"endpoint", r.Endpoint}, {"algorithm", r.Algorithm}, {"window", r.Window},
		{"tier", r.Tier}, {"mode", r.Mode}, {"policy", r.Policy},
	} {
		if len(f.value) > maxFieldSize {
			return fail(f.name, fmt.Sprintf("%s: longer than %d bytes", quoteShort(f.value), maxFieldSize))
		}
	}
	for name := range r.Overrides {
		if len(name) > maxFieldSize {
			return fail("overrides["+quoteShort(name)+"]", fmt.Sprintf("longer than %d bytes", maxFieldSize))
		}
	}
	var err error
	if out.Window, err = parseWindow(r.Window); err != nil {
		return fail("window", fmt.Sprintf("%s: %v", quoteShort(r.Window), err))
	}
	if out.Mode, err = parseName(r.Mode, hybrid.ModeDefault, hybrid.Hybrid); err != nil {
		return fail("mode", fmt.Sprintf("%s: must be local, central or hybrid (or absent, for the Limiter's)", quoteShort(r.Mode)))
	}
	if out.Policy, err = parseName(r.Policy, hybrid.PolicyDefault, hybrid.Fallback); err != nil {
		return fail("policy", fmt.Sprintf("%s: must be fail_open, fail_closed, fail_local or fallback (or absent, for the Limiter's)", quoteShort(r.Policy)))
	}
	if out.Wait, err = parseName(r.Wait, hybrid.WaitDefault, hybrid.WaitFirst); err != nil {
		return fail("wait", fmt.Sprintf("%q: must be never, in_flight or first (or absent, for in_flight)", r.Wait))
	}
	_, lim, _, err := compile(i, &out)
	var re *RuleError
	if errors.As(err, &re) {
		reason := re.Reason
		if re.Err != nil {
			reason += ": " + re.Err.Error()
		}
		return Rule{}, &RulesError{Index: i, ID: r.ID, Field: re.Field, Reason: reason, Err: re}
	}
	if err != nil {
		return fail("", err.Error())
	}
	if r.Cost > lim.MaxCost() {
		return fail("cost", fmt.Sprintf("%d: above %d, the most the rule admits at once", r.Cost, lim.MaxCost()))
	}
	return out, nil
}

// parseWindow parses a Go duration ("1m30s"), or a whole number of days
// ("1d"), which Go durations lack.
func parseWindow(s string) (time.Duration, error) {
	if days, ok := strings.CutSuffix(s, "d"); ok {
		n, err := strconv.ParseInt(days, 10, 64)
		if maxDays := int64(config.MaxWindow / (24 * time.Hour)); err != nil || n < 1 || n > maxDays {
			return 0, fmt.Errorf("days must be a whole number from 1 to %d", maxDays)
		}
		return time.Duration(n) * 24 * time.Hour, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, errors.New(`not a duration, such as "10s", "1m" or "1d"`)
	}
	return d, nil
}

// parseName returns the value from first to last whose String is s; ""
// is first, the default.
func parseName[T interface {
	~uint8
	String() string
}](s string, first, last T) (T, error) {
	if s == "" {
		return first, nil
	}
	for v := first + 1; v <= last; v++ {
		if v.String() == s {
			return v, nil
		}
	}
	return first, errors.New("unknown")
}

// MarshalRules returns rules as a JSON rules document, which ParseRules
// reads back to the same rules. It validates them as ParseRules does.
func MarshalRules(rules []Rule) ([]byte, error) {
	doc := rulesDoc{Version: RulesFormat, Rules: make([]fileRule, len(rules))}
	for i, r := range rules {
		fr := fileRule{
			ID: r.ID, Key: string(r.Key), Endpoint: r.Endpoint, Algorithm: r.Algorithm, MaxRequests: r.Limit,
			Window: formatWindow(r.Window), Burst: r.Burst, SubWindows: r.SubWindows, Anchored: r.Anchored,
			Tier: r.Tier, Cost: r.Cost, Shadow: r.Shadow, Overrides: r.Overrides,
		}
		if r.Mode != hybrid.ModeDefault {
			fr.Mode = r.Mode.String()
		}
		if r.Policy != hybrid.PolicyDefault {
			fr.Policy = r.Policy.String()
		}
		if r.Wait != hybrid.WaitDefault {
			fr.Wait = r.Wait.String()
		}
		doc.Rules[i] = fr
	}
	data, err := json.Marshal(doc)
	if err != nil {
		return nil, err
	}
	if _, err := ParseRules(data); err != nil {
		return nil, err
	}
	return data, nil
}

// formatWindow is the inverse of parseWindow.
func formatWindow(d time.Duration) string {
	if d > 0 && d%(24*time.Hour) == 0 {
		return strconv.FormatInt(int64(d/(24*time.Hour)), 10) + "d"
	}
	return d.String()
}

// WatchConfig configures WatchFile and WatchRedis. The zero value is ready
// to use: every field documents its default, and docs/operating.md#defaults
// lists them all.
type WatchConfig struct {
	// PollInterval is how often the source is read whatever the
	// notifications say: the backstop for a lost file event or Redis
	// message. Default 2s for a file, 1s for Redis (one HMGET per node).
	PollInterval time.Duration
	// Debounce is how long a file must stay quiet after an event before it
	// is read, so an editor's several writes make one reload. Default
	// 100ms. WatchRedis ignores it: a published version is whole.
	Debounce time.Duration
	// Logger receives a line per reload and per rejected version. Default
	// slog.Default().
	Logger *slog.Logger
	// MeterProvider provides the reload counter
	// (hybridlimit.http.rules.reloads). Default otel.GetMeterProvider().
	MeterProvider metric.MeterProvider
}

// Defaults of WatchConfig: docs/operating.md#defaults lists them, and
// TestDefaults holds that table against them.
const (
	defaultFilePollInterval  = 2 * time.Second // WatchFile's
	defaultRedisPollInterval = time.Second     // WatchRedis's
	defaultDebounce          = 100 * time.Millisecond
)

// withDefaults returns c with each zero field that has a default set to
// it, poll being the source's default PollInterval.
func (c WatchConfig) withDefaults(poll time.Duration) WatchConfig {
	if c.PollInterval == 0 {
		c.PollInterval = poll
	}
	if c.Debounce == 0 {
		c.Debounce = defaultDebounce
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.MeterProvider == nil {
		c.MeterProvider = otel.GetMeterProvider()
	}
	return c
}

// validate reports c's first bad field, c having its defaults, in an error
// wrapping ErrInvalidConfig that names it. It builds nothing.
func (c WatchConfig) validate() error {
	switch {
	case c.PollInterval < 0:
		return configError("PollInterval", c.PollInterval, "must not be negative")
	case c.Debounce < 0:
		return configError("Debounce", c.Debounce, "must not be negative")
	}
	return nil
}

// watcher is what both sources share: the config with defaults, and the
// reload counter.
type watcher struct {
	cfg     WatchConfig
	log     *slog.Logger
	reloads metric.Int64Counter
	source  attribute.KeyValue

	stop context.CancelFunc
	wg   sync.WaitGroup
}

// newWatcher returns the watcher of source for cfg, poll being the
// source's default PollInterval.
func newWatcher(cfg WatchConfig, source string, poll time.Duration) (*watcher, error) {
	cfg = cfg.withDefaults(poll)
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	reloads, err := cfg.MeterProvider.Meter(meterName).Int64Counter("hybridlimit.http.rules.reloads",
		metric.WithDescription("Rules versions read from a file or Redis, by source and result (applied or rejected)."),
		metric.WithUnit("{version}"))
	if err != nil {
		return nil, fmt.Errorf("%w: MeterProvider: %w", ErrInvalidConfig, err)
	}
	return &watcher{
		cfg: cfg, reloads: reloads, source: attribute.String("source", source),
		log: cfg.Logger.With("source", source),
	}, nil
}

// ErrInvalidWatch reports a bad argument of WatchFile, WatchRedis or
// PublishRules (a path, a client, a function, a Keyspace), naming it. A bad
// WatchConfig field is reported with ErrInvalidConfig, as every Config's.
var ErrInvalidWatch = errors.New("httplimit: invalid watch")

var (
	resultApplied  = attribute.String("result", "applied")
	resultRejected = attribute.String("result", "rejected")
)

// load parses data and hands the rules to apply. A bad version is logged
// and counted, and apply is not called: the previous rules keep serving.
func (w *watcher) load(ctx context.Context, data []byte, version string, apply func([]Rule) error) error {
	rules, err := ParseRules(data)
	if err == nil {
		err = apply(rules)
	}
	if err != nil {
		return w.reject(ctx, version, err)
	}
	w.reloads.Add(ctx, 1, metric.WithAttributes(w.source, resultApplied))
	w.log.Info("httplimit: rules applied", "version", version, "rules", len(rules))
	return nil
}

// reject logs and counts a version that is not applied, and returns err.
func (w *watcher) reject(ctx context.Context, version string, err error) error {
	w.reloads.Add(ctx, 1, metric.WithAttributes(w.source, resultRejected))
	w.log.Error("httplimit: rules rejected; the previous rules keep serving", "version", version, "error", err)
	return err
}

// readRules reads the rules file at path, refusing it, unread, when it
// is larger than maxRulesSize: the error is then a *RulesError.
func readRules(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if fi.Size() > maxRulesSize {
		return nil, tooLarge(fi.Size())
	}
	// The file may grow after Stat: read one byte past the bound, no more.
	data, err := io.ReadAll(io.LimitReader(f, maxRulesSize+1))
	if err != nil {
		return nil, err
	}
	if len(data) > maxRulesSize {
		return nil, docError("", fmt.Sprintf("more than the %d bytes a document may have", maxRulesSize))
	}
	return data, nil
}

// FileSource watches a rules file and applies each new valid version. Its
// methods are safe for concurrent use.
type FileSource struct {
	w     *watcher
	path  string
	apply func([]Rule) error

	last    [sha256.Size]byte // the content last read, applied or rejected
	lastErr string            // why the file could not be read, or was too large, at the last check
}

// WatchFile reads the rules file at path, hands its rules to apply, and
// then applies each new version of the file until ctx ends or Close is
// called.
//
// It watches the file's directory, not the file, so it sees editors that
// save by renaming a new file over the old one and Kubernetes volumes that
// swap a "..data" symlink. Events are debounced; the file is also read
// every PollInterval, in case an event is lost, and it is applied only when
// its content changed. A version that does not parse, or that apply
// refuses, is logged and counted (hybridlimit.http.rules.reloads with
// result=rejected), and the previous rules keep serving; so is a file
// larger than a rules document may be (512 KiB), which is not read.
//
// The first version must be valid: WatchFile returns its error, having
// started nothing. apply is called from one goroutine at a time.
func WatchFile(ctx context.Context, path string, apply func([]Rule) error, cfg WatchConfig) (*FileSource, error) {
	if path == "" {
		return nil, fmt.Errorf("%w: path: required", ErrInvalidWatch)
	}
	if apply == nil {
		return nil, fmt.Errorf("%w: apply: required", ErrInvalidWatch)
	}
	w, err := newWatcher(cfg, "file", defaultFilePollInterval)
	if err != nil {
		return nil, err
	}
	s := &FileSource{w: w, path: path, apply: apply}
	data, err := readRules(path)
	var re *RulesError
	if errors.As(err, &re) {
		return nil, w.reject(ctx, "unread", err)
	}
	if err != nil {
		return nil, err
	}
	s.last = sha256.Sum256(data)
	if err := w.load(ctx, data, hashVersion(s.last), apply); err != nil {
		return nil, err
	}
	fw, err := fsnotify.NewWatcher()
	if err == nil {
		if err = fw.Add(filepath.Dir(path)); err != nil {
			fw.Close()
		}
	}
	if err != nil {
		// Polling still reloads, only later.
		w.log.Warn("httplimit: cannot watch the rules file's directory; polling only", "path", path, "error", err)
		fw = nil
	}
	ctx, w.stop = context.WithCancel(ctx)
	w.wg.Go(func() { s.run(ctx, fw) })
	return s, nil
}

func hashVersion(h [sha256.Size]byte) string { return fmt.Sprintf("sha256:%x", h[:8]) }

// run waits for events and ticks until ctx ends.
func (s *FileSource) run(ctx context.Context, fw *fsnotify.Watcher) {
	var events <-chan fsnotify.Event
	var errs <-chan error
	if fw != nil {
		defer fw.Close()
		events, errs = fw.Events, fw.Errors
	}
	poll := time.NewTicker(s.w.cfg.PollInterval)
	defer poll.Stop()
	debounce := time.NewTimer(time.Hour)
	debounce.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case _, ok := <-events:
			if !ok {
				events = nil
				continue
			}
			// Any change in the directory: the file may be reached through
			// a symlink the event names (..data), not the file itself.
			debounce.Reset(s.w.cfg.Debounce)
		case err, ok := <-errs:
			if !ok {
				errs = nil
				continue
			}
			s.w.log.Warn("httplimit: watching the rules file", "path", s.path, "error", err)
		case <-debounce.C:
			s.check(ctx)
		case <-poll.C:
			s.check(ctx)
		}
	}
}

// check reads the file and loads it if its content changed.
func (s *FileSource) check(ctx context.Context) {
	data, err := readRules(s.path)
	var re *RulesError
	if errors.As(err, &re) {
		// Too large to read: rejected once per size, not per poll.
		if err.Error() != s.lastErr {
			s.lastErr = err.Error()
			s.w.reject(ctx, "unread", err)
		}
		return
	}
	if err != nil {
		// Counted once per failure, not per poll.
		if err.Error() != s.lastErr {
			s.lastErr = err.Error()
			s.w.reloads.Add(ctx, 1, metric.WithAttributes(s.w.source, resultRejected))
			s.w.log.Error("httplimit: rules file unreadable; the previous rules keep serving", "path", s.path, "error", err)
		}
		return
	}
	s.lastErr = ""
	h := sha256.Sum256(data)
	if h == s.last {
		return
	}
	s.last = h
	s.w.load(ctx, data, hashVersion(h), s.apply)
}

// Close stops watching and waits for the watcher's goroutine to end. It is
// idempotent.
func (s *FileSource) Close() error {
	s.w.close()
	return nil
}

func (w *watcher) close() {
	if w.stop != nil {
		w.stop()
	}
	w.wg.Wait()
}
