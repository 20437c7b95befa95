package httplimit

import (
	"encoding"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"time"
)

// A rules document is read in two steps. Its text, YAML or JSON, becomes a
// tree of nodes (codec_text.go) that keeps each value's line and its type
// as the document wrote it; then one decoder fills Go values from the tree
// by their `rules` struct tags, and one encoder writes them back as JSON by
// the same tags. Both formats so take the same values and give the same
// errors, and a field is named only in its struct. Nothing here knows HTTP.

// kind is the type of a document's value.
type kind uint8

const (
	kindNull   kind = iota // null, ~ or nothing: the field's absence
	kindString             // a string
	kindInt                // an integer that fits in an int64
	kindBool               // true or false
	kindOther              // a scalar of another type: a float, a date, an integer too large
	kindList               // a YAML sequence, a JSON array
	kindMap                // a YAML mapping, a JSON object
)

// node is one value of a document.
type node struct {
	kind  kind
	line  int    // from 1
	text  string // a scalar as written; a string's value
	num   int64  // kindInt: the value; kindBool: 1 for true
	guess string // a YAML plain scalar read as another type than a string: that type ("a number"), for a hint to quote it
	items []node // kindList: the items; kindMap: key, value, key, value, …
}

func (n *node) scalar() bool { return n.kind < kindList }

// get returns the value of mapping n's first key named name, or nil.
func (n *node) get(name string) *node {
	if n.kind != kindMap {
		return nil
	}
	for k := 0; k+1 < len(n.items); k += 2 {
		if key := &n.items[k]; key.scalar() && key.text == name {
			return &n.items[k+1]
		}
	}
	return nil
}

// id returns the string value of record n's "id", which names it in
// errors, or "".
func (n *node) id() string {
	if v := n.get("id"); v != nil && v.kind == kindString {
		return v.text
	}
	return ""
}

// tag is a struct field's `rules` tag: its key in a document, and whether
// the encoder leaves out its zero value.
type tag struct {
	name      string
	omitempty bool
}

func fieldTag(f reflect.StructField) tag {
	name, opts, _ := strings.Cut(f.Tag.Get("rules"), ",")
	return tag{name: name, omitempty: opts == "omitempty"}
}

// fieldIndex returns the index of struct t's field whose key is name, or
// -1.
func fieldIndex(t reflect.Type, name string) int {
	for i := range t.NumField() {
		if tg := fieldTag(t.Field(i)); tg.name != "" && tg.name == name {
			return i
		}
	}
	return -1
}

var (
	durationType    = reflect.TypeFor[time.Duration]()
	textUnmarshaler = reflect.TypeFor[encoding.TextUnmarshaler]()
	textMarshaler   = reflect.TypeFor[encoding.TextMarshaler]()
	stringer        = reflect.TypeFor[fmt.Stringer]()
)

// isEnum reports whether t is one of the module's enums (hybrid.Mode,
// local.Algorithm, …): a uint8 with names, from 1 up; 0 is the default,
// which a document gives by leaving the field out.
func isEnum(t reflect.Type) bool { return t.Kind() == reflect.Uint8 && t.Implements(stringer) }

// named reports whether a document writes a t as a string to be parsed:
// a duration, or a value with a name.
func named(t reflect.Type) bool {
	return t == durationType || isEnum(t) || reflect.PointerTo(t).Implements(textUnmarshaler)
}

// enumNames returns the names of enum t's values from 1 up: the module's
// enums print any other value as "Type(n)".
func enumNames(t reflect.Type) []string {
	var names []string
	v := reflect.New(t).Elem()
	for i := uint64(1); i < 256; i++ {
		v.SetUint(i)
		s := v.Interface().(fmt.Stringer).String()
		if strings.Contains(s, "(") {
			break
		}
		names = append(names, s)
	}
	return names
}

// enumChoices lists enum t's names as an error gives them: "a, b or c".
func enumChoices(t reflect.Type) string {
	names := enumNames(t)
	if len(names) < 2 {
		return strings.Join(names, "")
	}
	return strings.Join(names[:len(names)-1], ", ") + " or " + names[len(names)-1]
}

// wantType says what a t is written as, for an error.
func wantType(t reflect.Type) string {
	switch {
	case t == durationType:
		return `must be a duration string, such as "10s", "1h30m" or "1d"`
	case isEnum(t):
		return "must be " + enumChoices(t)
	}
	switch t.Kind() {
	case reflect.String:
		return "must be a string"
	case reflect.Int, reflect.Int64:
		return "must be an integer"
	case reflect.Bool:
		return "must be true or false"
	case reflect.Map:
		return "must map names to integers"
	case reflect.Slice:
		return "must be a list"
	}
	return "must be a mapping (an object)"
}

// tooLong is the reason of a string past maxFieldSize.
func tooLong(s string) string {
	return fmt.Sprintf("%s: longer than %d bytes", quoteShort(s), maxFieldSize)
}

// decoder fills Go values from a document's nodes. Its errors name the
// rule it decodes (-1: the document as a whole) and the field.
type decoder struct {
	rule int
	id   string
}

func (d decoder) fail(field string, line int, reason string) error {
	return ruleError(d.rule, d.id, field, fmt.Sprintf("line %d: %s", line, reason))
}

// object decodes mapping n into struct v by its fields' tags. A key the
// struct has no field for is an error, and so is a key given twice.
func (d decoder) object(n *node, v reflect.Value) error {
	if n.kind != kindMap {
		return d.fail("", n.line, "must be a mapping (an object)")
	}
	t := v.Type()
	seen := make(map[string]bool, len(n.items)/2)
	for k := 0; k+1 < len(n.items); k += 2 {
		key, val := &n.items[k], &n.items[k+1]
		f := -1
		if key.scalar() {
			f = fieldIndex(t, key.text)
		}
		switch {
		case f < 0:
			return d.fail(fieldName(key.text), key.line, "unknown field")
		case seen[key.text]:
			return d.fail(key.text, key.line, "given twice")
		}
		seen[key.text] = true
		if err := d.value(val, v.Field(f), key.text); err != nil {
			return err
		}
	}
	return nil
}

// value decodes n into v, the field named field. null leaves v as it is:
// absent, in YAML as in JSON. A value must have the type JSON would give
// it: an integer field takes an integer (never a float it would truncate,
// nor a string), a boolean true or false, a string a string.
func (d decoder) value(n *node, v reflect.Value, field string) error {
	if n.kind == kindNull {
		return nil
	}
	t := v.Type()
	if named(t) {
		switch {
		case n.kind != kindString:
			return d.fail(field, n.line, wantType(t))
		case len(n.text) > maxFieldSize:
			return d.fail(field, n.line, tooLong(n.text))
		}
		if err := setNamed(v, n.text); err != nil {
			return d.fail(field, n.line, quoteShort(n.text)+": "+err.Error())
		}
		return nil
	}
	switch k := t.Kind(); {
	case k == reflect.Map:
		return d.mapping(n, v, field)
	case k == reflect.Slice:
		return d.list(n, v, field)
	case k == reflect.String && n.kind == kindString:
		if len(n.text) > maxFieldSize {
			return d.fail(field, n.line, tooLong(n.text))
		}
		v.SetString(n.text)
	case (k == reflect.Int || k == reflect.Int64) && n.kind == kindInt && !v.OverflowInt(n.num):
		v.SetInt(n.num)
	case k == reflect.Bool && n.kind == kindBool:
		v.SetBool(n.num == 1)
	case k == reflect.String && n.guess != "":
		return d.fail(field, n.line, fmt.Sprintf("%s (quote it: YAML reads %s as %s)", wantType(t), quoteShort(n.text), n.guess))
	default:
		return d.fail(field, n.line, wantType(t))
	}
	return nil
}

// setNamed sets v, a named type, from its name.
func setNamed(v reflect.Value, s string) error {
	t := v.Type()
	switch {
	case t == durationType:
		dur, err := parseDuration(s)
		if err != nil {
			return err
		}
		v.SetInt(int64(dur))
		return nil
	case reflect.PointerTo(t).Implements(textUnmarshaler):
		if v.Addr().Interface().(encoding.TextUnmarshaler).UnmarshalText([]byte(s)) != nil {
			return errors.New(wantType(t))
		}
		return nil
	}
	if s == "" {
		return nil // the default, as when the field is left out
	}
	for i, name := range enumNames(t) {
		if name == s {
			v.SetUint(uint64(i + 1))
			return nil
		}
	}
	return errors.New(wantType(t) + " (or absent, for the default)")
}

// mapping decodes mapping n into map v, whose keys are names: a name given
// twice is an error, and an empty mapping leaves v nil.
func (d decoder) mapping(n *node, v reflect.Value, field string) error {
	t := v.Type()
	if n.kind != kindMap {
		return d.fail(field, n.line, wantType(t))
	}
	m := reflect.MakeMapWithSize(t, len(n.items)/2)
	for k := 0; k+1 < len(n.items); k += 2 {
		key, val := &n.items[k], &n.items[k+1]
		if !key.scalar() {
			return d.fail(field, key.line, wantType(t))
		}
		name := key.text
		if key.kind == kindNull {
			name = ""
		}
		entry := field + "[" + quoteShort(name) + "]"
		if len(name) > maxFieldSize {
			return d.fail(entry, key.line, fmt.Sprintf("longer than %d bytes", maxFieldSize))
		}
		kv := reflect.ValueOf(name).Convert(t.Key())
		if m.MapIndex(kv).IsValid() {
			return d.fail(entry, key.line, "given twice")
		}
		ev := reflect.New(t.Elem()).Elem()
		if d.value(val, ev, field) != nil {
			return d.fail(field, val.line, wantType(t))
		}
		m.SetMapIndex(kv, ev)
	}
	if m.Len() > 0 {
		v.Set(m)
	}
	return nil
}

// list decodes list n into slice v. The items of a list of structs are
// records, named in errors by their position and their id. An empty list
// leaves v nil, as an absent one does, so that what encode writes of a nil
// slice reads back the same.
func (d decoder) list(n *node, v reflect.Value, field string) error {
	t := v.Type()
	if n.kind != kindList {
		return d.fail(field, n.line, wantType(t))
	}
	if len(n.items) == 0 {
		return nil
	}
	s := reflect.MakeSlice(t, len(n.items), len(n.items))
	for i := range n.items {
		item := &n.items[i]
		var err error
		if t.Elem().Kind() == reflect.Struct {
			err = decoder{rule: i, id: item.id()}.object(item, s.Index(i))
		} else {
			err = d.value(item, s.Index(i), field)
		}
		if err != nil {
			return err
		}
	}
	v.Set(s)
	return nil
}

// encode appends v to b as JSON: a struct as an object keyed by its
// fields' tags, a named value (a duration, an algorithm, a mode) by its
// name, as the decoder reads them.
func encode(b []byte, v reflect.Value) ([]byte, error) {
	t := v.Type()
	switch {
	case t == durationType:
		return appendJSON(b, formatDuration(time.Duration(v.Int())))
	case t.Implements(textMarshaler):
		text, err := v.Interface().(encoding.TextMarshaler).MarshalText()
		if err != nil {
			return nil, err
		}
		return appendJSON(b, string(text))
	case isEnum(t):
		return appendJSON(b, v.Interface().(fmt.Stringer).String())
	case t.Kind() == reflect.Struct:
		return encodeObject(b, v)
	case t.Kind() == reflect.Slice:
		b = append(b, '[')
		for i := range v.Len() {
			if i > 0 {
				b = append(b, ',')
			}
			var err error
			if b, err = encode(b, v.Index(i)); err != nil {
				return nil, err
			}
		}
		return append(b, ']'), nil
	}
	return appendJSON(b, v.Interface())
}

// encodeObject appends struct v as a JSON object, leaving out the zero
// values of the fields tagged omitempty.
func encodeObject(b []byte, v reflect.Value) ([]byte, error) {
	b = append(b, '{')
	first := true
	for i := range v.NumField() {
		tg, f := fieldTag(v.Type().Field(i)), v.Field(i)
		if tg.name == "" || tg.omitempty && f.IsZero() {
			continue
		}
		if !first {
			b = append(b, ',')
		}
		first = false
		b, _ = appendJSON(b, tg.name)
		b = append(b, ':')
		var err error
		if b, err = encode(b, f); err != nil {
			return nil, err
		}
	}
	return append(b, '}'), nil
}

// appendJSON appends x as encoding/json writes it.
func appendJSON(b []byte, x any) ([]byte, error) {
	data, err := json.Marshal(x)
	if err != nil {
		return nil, err
	}
	return append(b, data...), nil
}
