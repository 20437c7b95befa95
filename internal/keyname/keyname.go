// Package keyname holds what goes into the hash tag of the module's Redis
// key names: what a rule name may hold, and the digest of a user key.
// syncer checks the names of its rules with it; httplimit, which sees
// syncer only through hybrid, checks its rule IDs with it; syncer names
// keys by the digest, and hybrid's leases hold it.
package keyname

import (
	"fmt"
	"strings"

	"github.com/hybridlimit/hybridlimit/internal/config"
)

// CheckRule returns what is wrong with a rule name, or nil: a name is 1 to
// config.MaxRuleName bytes of letters, digits and -_.:/ (never a brace,
// which would change the hash tag). The error does not quote the name, so
// that a caller can quote as much of it as it sees fit.
func CheckRule(name string) error {
	if name == "" || len(name) > config.MaxRuleName {
		return fmt.Errorf("must be 1 to %d bytes", config.MaxRuleName)
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
