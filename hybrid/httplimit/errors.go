package httplimit

import (
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/hybridlimit/hybridlimit/internal/config"
)

// RuleError describes what is wrong with a rule, or with a rules document
// as a whole, whatever its source (Go, a rules file, Redis): a bad field, a
// duplicate ID, a malformed or oversized document. It is the error of every
// rule refused; find it with errors.As. It wraps the cause, if any.
type RuleError struct {
	// Index is the rule's position in its list (Config.Rules, the argument
	// of SetRules, a document's rules), from 0; -1 for the document as a
	// whole.
	Index int
	// ID is the rule's ID, when it has one short enough to be one; "" when
	// the rule is named by its Index.
	ID string
	// Field is the field as a rules file spells it ("max_requests",
	// "window", `overrides["pro"]`, "version"); "" for the whole rule or
	// document.
	Field string
	// Reason is what is wrong, with the line in the document where there
	// is one.
	Reason string
	// Err is the cause, or nil: the Limiter's error when it refused to
	// register the rule.
	Err error
}

// Error names the rule (by ID, or by position), the field and what is
// wrong.
func (e *RuleError) Error() string {
	var b strings.Builder
	switch {
	case e.ID != "":
		fmt.Fprintf(&b, "httplimit: invalid rule %q: ", e.ID)
	case e.Index >= 0:
		fmt.Fprintf(&b, "httplimit: invalid rule %d: ", e.Index)
	default:
		b.WriteString("httplimit: invalid rules: ")
	}
	if e.Field != "" {
		b.WriteString(e.Field)
		b.WriteString(": ")
	}
	b.WriteString(e.Reason)
	if e.Err != nil {
		b.WriteString(": ")
		b.WriteString(e.Err.Error())
	}
	return b.String()
}

// Unwrap returns the cause, or nil.
func (e *RuleError) Unwrap() error { return e.Err }

// ruleError is the error of rule i, whose ID is id, naming the field: an
// id too long to be one is left out, and the rule named by its position.
func ruleError(i int, id, field, reason string) *RuleError {
	if len(id) > config.MaxRuleName {
		id = ""
	}
	return &RuleError{Index: i, ID: id, Field: field, Reason: reason}
}

// docError is the error of a rules document as a whole, naming the field.
func docError(field, reason string) *RuleError {
	return &RuleError{Index: -1, Field: field, Reason: reason}
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

// fieldName is a name a document gives a field, as an error names it:
// quoted short when it is too long to be a field's (an unknown field).
func fieldName(s string) string {
	if len(s) > quoteMax {
		return quoteShort(s)
	}
	return s
}
