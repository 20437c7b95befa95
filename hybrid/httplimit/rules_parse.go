package httplimit

import (
	"errors"
	"fmt"
	"math"
	"reflect"
	"strconv"
	"strings"
	"time"
)

// rulesDoc is a rules document: its format's version and its rules.
type rulesDoc struct {
	Version int    `rules:"version"`
	Rules   []Rule `rules:"rules"`
}

// ParseRules parses a rules document, YAML or JSON (a document whose first
// non-blank byte is '{' is JSON), and validates its rules as SetRules
// does. The format is described in docs/rules.md: the keys are the tags
// of Rule's fields.
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
// Unknown keys, values of the wrong type, bad values and duplicate ids
// are rejected with a *RuleError naming the rule
// and the field, with the line. An empty document is rejected (a version
// is required), so a file caught half-written never removes every limit;
// "rules: []" does that on purpose. So is a document past a bound
// (docs/rules.md#bounds: 512 KiB, checked first, 2,048 rules, 8,192
// overrides, 1,024 bytes a value);
// errors quote at most a short prefix of a value.
func ParseRules(data []byte) ([]Rule, error) {
	if len(data) > maxRulesSize {
		return nil, tooLarge(int64(len(data)))
	}
	root, err := parseTree(data)
	if err != nil {
		return nil, err
	}
	if err := checkDoc(root); err != nil {
		return nil, err
	}
	var doc rulesDoc
	if err := (decoder{rule: -1}).object(root, reflect.ValueOf(&doc).Elem()); err != nil {
		return nil, err
	}
	if _, err := checkRules(doc.Rules); err != nil {
		return nil, err
	}
	return doc.Rules, nil
}

// checkDoc checks what must hold before a document's rules are decoded:
// its version, so that a document of another version is refused as such,
// and the bounds on its rules and overrides, counted without decoding any.
func checkDoc(root *node) error {
	if root.kind != kindMap {
		return nil // the decoder says what is wrong
	}
	v := root.get("version")
	if v == nil || v.kind == kindNull {
		return docError("version", fmt.Sprintf("missing: must be %d", rulesFormat))
	}
	var version int
	if err := (decoder{rule: -1}).value(v, reflect.ValueOf(&version).Elem(), "version"); err != nil {
		return err
	}
	if version != rulesFormat {
		return docError("version", fmt.Sprintf("line %d: %d: must be %d", v.line, version, rulesFormat))
	}
	rules := root.get("rules")
	if rules == nil || rules.kind != kindList {
		return nil
	}
	if len(rules.items) > maxRules {
		return tooMany(rules.line, len(rules.items))
	}
	overrides := 0
	for i := range rules.items {
		r := &rules.items[i]
		if o := r.get("overrides"); o != nil && o.kind == kindMap {
			if overrides += len(o.items) / 2; overrides > maxOverrides {
				return ruleError(i, r.id(), "overrides", fmt.Sprintf("line %d: %d up to this rule: more than %d in the document", o.line, overrides, maxOverrides))
			}
		}
	}
	return nil
}

// tooLarge is the error of a document of n bytes, past maxRulesSize.
func tooLarge(n int64) error {
	return docError("", fmt.Sprintf("%d bytes: more than the %d bytes a document may have", n, maxRulesSize))
}

// tooMany is the error of a list of n rules, past maxRules.
func tooMany(line, n int) error {
	return docError("rules", fmt.Sprintf("line %d: %d rules: more than %d", line, n, maxRules))
}

// marshalRules returns rules as a JSON rules document, which ParseRules
// reads back to the same rules. It refuses the rules, and the document,
// that ParseRules would refuse.
func marshalRules(rules []Rule) ([]byte, error) {
	if _, err := checkRules(rules); err != nil {
		return nil, err
	}
	data, err := encode(nil, reflect.ValueOf(rulesDoc{Version: rulesFormat, Rules: rules}))
	if err != nil {
		return nil, err
	}
	if _, err := ParseRules(data); err != nil {
		return nil, err // past a bound
	}
	return data, nil
}

// day is the unit a duration has beyond Go's.
const day = 24 * time.Hour

// parseDuration parses a Go duration ("500ms", "90s", "1h30m") or a whole
// number of days ("7d"), which Go's lack.
func parseDuration(s string) (time.Duration, error) {
	if days, ok := strings.CutSuffix(s, "d"); ok {
		n, err := strconv.ParseInt(days, 10, 64)
		switch {
		case err != nil && !errors.Is(err, strconv.ErrRange) || n < 1:
			return 0, errors.New("days must be a whole number, at least 1")
		case err != nil || n > math.MaxInt64/int64(day):
			return 0, errors.New("too long")
		}
		return time.Duration(n) * day, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, errors.New(`not a duration, such as "10s", "1h30m" or "1d"`)
	}
	return d, nil
}

// formatDuration is the inverse of parseDuration: whole days in days.
func formatDuration(d time.Duration) string {
	if d > 0 && d%day == 0 {
		return strconv.FormatInt(int64(d/day), 10) + "d"
	}
	return d.String()
}
