// Package paramerr tells which parameter of a limit is invalid to the
// packages that see local only through hybrid: hybrid.NewLimit wraps
// local's *LimitError in an *Error, which httplimit finds with errors.As to
// name the field of a rule as a rules file spells it.
package paramerr

// Error is an invalid limit's error, with what it says about the parameter
// at fault. Its text is the wrapped error's, which it unwraps to.
type Error struct {
	Field  string // the parameter (a field of local.Params, or "rate")
	Value  string // its value, formatted
	Reason string // what is wrong with it
	Err    error  // local's error
}

func (e *Error) Error() string { return e.Err.Error() }

// Unwrap returns local's error.
func (e *Error) Unwrap() error { return e.Err }
