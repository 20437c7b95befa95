// Package keyname holds what the module's Redis key names are made of that
// more than one package checks: the default prefix, and what a rule name,
// which goes into a hash tag, may hold. syncer builds its keys with them;
// httplimit, which sees syncer only through hybrid, checks its rule IDs and
// names its rules keys with them.
package keyname

import (
	"fmt"
	"strings"
)

// DefaultPrefix starts every Redis key when a Keyspace's Prefix is empty.
const DefaultPrefix = "hl"

// MaxRule is the longest rule name, in bytes.
const MaxRule = 128

// CheckRule returns what is wrong with a rule name, or nil: a name is 1 to
// MaxRule bytes of letters, digits and -_.:/ (never a brace, which would
// change the hash tag). The error does not quote the name, so that a
// caller can quote as much of it as it sees fit.
func CheckRule(name string) error {
	if name == "" || len(name) > MaxRule {
		return fmt.Errorf("must be 1 to %d bytes", MaxRule)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		ok := 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte("-_.:/", c) >= 0
		if !ok {
			return fmt.Errorf("byte %q at %d: only letters, digits and -_.:/ are allowed", c, i)
		}
	}
	return nil
}
