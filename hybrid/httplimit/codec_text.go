package httplimit

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"

	"go.yaml.in/yaml/v3"
)

// maxDepth is the deepest a document's values may nest. A rules document
// needs four levels (the document, its rules, a rule, its overrides); the
// bound keeps the tree's building off deep recursion.
const maxDepth = 32

// parseTree reads a rules document, JSON when its first non-blank byte is
// '{', else YAML, into a tree.
func parseTree(data []byte) (*node, error) {
	if t := bytes.TrimLeft(data, " \t\r\n"); len(t) > 0 && t[0] == '{' {
		return jsonTree(data)
	}
	return yamlTree(data)
}

// yamlTree reads a YAML document. It rejects the YAML features a rules
// document has no use for, which would otherwise give misleading errors
// or costly documents: anchors and aliases (an alias is not a rule, and
// aliases can multiply a small document), and merge keys (<<), which no
// field is named.
func yamlTree(data []byte) (*node, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var root yaml.Node
	if err := dec.Decode(&root); err != nil {
		if err == io.EOF {
			return nil, docError("version", "missing: the document is empty")
		}
		return nil, docError("", "malformed YAML: "+err.Error())
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); err != io.EOF {
		return nil, docError("", "more than one YAML document")
	}
	top := &root
	if top.Kind == yaml.DocumentNode && len(top.Content) == 1 {
		top = top.Content[0]
	}
	n, err := fromYAML(top, 0)
	if err != nil {
		return nil, err
	}
	return &n, nil
}

// fromYAML converts YAML node y, depth levels down, and what it holds.
func fromYAML(y *yaml.Node, depth int) (node, error) {
	n := node{line: y.Line}
	switch {
	case y.Anchor != "" || y.Kind == yaml.AliasNode:
		return n, docError("", fmt.Sprintf("line %d: anchors and aliases are not supported", y.Line))
	case y.ShortTag() == "!!merge":
		return n, docError("", fmt.Sprintf("line %d: merge keys (<<) are not supported", y.Line))
	case depth > maxDepth:
		return n, docError("", fmt.Sprintf("line %d: nested deeper than %d", y.Line, maxDepth))
	case y.Kind == yaml.ScalarNode:
		return yamlScalar(y), nil
	case y.Kind == yaml.SequenceNode:
		n.kind = kindList
	case y.Kind == yaml.MappingNode:
		n.kind = kindMap
	default:
		n.kind = kindOther
		return n, nil
	}
	n.items = make([]node, len(y.Content))
	for i, c := range y.Content {
		var err error
		if n.items[i], err = fromYAML(c, depth+1); err != nil {
			return n, err
		}
	}
	return n, nil
}

// yamlScalar converts a scalar by the type YAML gives it: a string only
// when YAML reads it as one (tier: 2024 is a number), a boolean only true
// or false (not YAML 1.1's yes and on).
func yamlScalar(y *yaml.Node) node {
	n := node{kind: kindOther, line: y.Line, text: y.Value}
	switch y.ShortTag() {
	case "!!str":
		n.kind = kindString
		return n
	case "!!null":
		n.kind = kindNull
		return n
	case "!!int":
		if y.Decode(&n.num) == nil {
			n.kind = kindInt
		}
	case "!!bool":
		var b bool
		if y.Decode(&b) == nil {
			n.kind = kindBool
			if b {
				n.num = 1
			}
		}
	}
	if y.Style == 0 {
		n.guess = yamlType(y)
	}
	return n
}

// yamlType names the type YAML gives plain scalar y, for a hint.
func yamlType(y *yaml.Node) string {
	switch y.ShortTag() {
	case "!!int", "!!float":
		return "a number"
	case "!!bool":
		return "a boolean"
	case "!!timestamp":
		return "a date"
	}
	return y.ShortTag()
}

// jsonTree reads a JSON document: strictly JSON (encoding/json's), one
// value and nothing after it.
func jsonTree(data []byte) (*node, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	r := jsonReader{dec: dec, data: data}
	n, err := r.value(0)
	if err != nil {
		var re *RuleError
		if errors.As(err, &re) {
			return nil, err
		}
		return nil, docError("", "malformed JSON: "+err.Error())
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, docError("", "malformed JSON: data after the document")
	}
	return &n, nil
}

// jsonReader reads a JSON document's values by token, and counts the lines
// they are on.
type jsonReader struct {
	dec  *json.Decoder
	data []byte
	off  int // how far lines are counted
	line int // the line at off, from 0
}

// lineAt returns the line, from 1, of the token that ends at offset off.
// Offsets only grow, so every byte is counted once.
func (r *jsonReader) lineAt(off int64) int {
	r.line += bytes.Count(r.data[r.off:off], []byte{'\n'})
	r.off = int(off)
	return r.line + 1
}

// value reads the next value, depth levels down, and what it holds.
func (r *jsonReader) value(depth int) (node, error) {
	tok, err := r.dec.Token()
	if err != nil {
		return node{}, err
	}
	n := node{line: r.lineAt(r.dec.InputOffset())}
	switch tok := tok.(type) {
	case nil:
		n.kind = kindNull
	case string:
		n.kind, n.text = kindString, tok
	case bool:
		n.kind, n.text = kindBool, strconv.FormatBool(tok)
		if tok {
			n.num = 1
		}
	case json.Number:
		n.kind, n.text = kindOther, tok.String()
		if v, err := strconv.ParseInt(n.text, 10, 64); err == nil {
			n.kind, n.num = kindInt, v
		}
	case json.Delim:
		if tok != '[' && tok != '{' {
			return n, fmt.Errorf("unexpected %q", rune(tok))
		}
		if depth >= maxDepth {
			return n, docError("", fmt.Sprintf("line %d: nested deeper than %d", n.line, maxDepth))
		}
		return r.container(n, tok, depth)
	}
	return n, nil
}

// container reads an array's items or an object's keys and values, up to
// and with its closing delimiter.
func (r *jsonReader) container(n node, open json.Delim, depth int) (node, error) {
	n.kind = kindList
	if open == '{' {
		n.kind = kindMap
	}
	for r.dec.More() {
		if n.kind == kindMap {
			tok, err := r.dec.Token()
			if err != nil {
				return n, err
			}
			name, _ := tok.(string) // an object's keys are strings, or Token fails
			n.items = append(n.items, node{kind: kindString, text: name, line: r.lineAt(r.dec.InputOffset())})
		}
		v, err := r.value(depth + 1)
		if err != nil {
			return n, err
		}
		n.items = append(n.items, v)
	}
	_, err := r.dec.Token() // the closing delimiter
	return n, err
}
