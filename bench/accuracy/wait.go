package accuracy

import (
	"fmt"

	"github.com/hybridlimit/hybridlimit/hybrid"
	"github.com/hybridlimit/hybridlimit/internal/localx"
)

// The values of Spec.Wait (the -api-wait flag): how long a hybrid rule's
// request waits for a lease, Rule.Wait's choices. The empty value leaves
// the rule at the library's default (WaitInFlight).
const (
	WaitNever    = "never"     // never wait: refuse past the cold-start allowance
	WaitInFlight = "in-flight" // wait about one round trip for a lease already on its way
	WaitFirst    = "first"     // wait for a key's first lease
)

// WaitModes lists the values Spec.Wait may take besides the default.
var WaitModes = []string{WaitNever, WaitInFlight, WaitFirst}

// waits maps Spec.Wait to Rule.Wait.
var waits = map[string]hybrid.Wait{
	"":           0, // the Limiter's default
	WaitNever:    hybrid.WaitNever,
	WaitInFlight: hybrid.WaitInFlight,
	WaitFirst:    hybrid.WaitFirst,
}

// setWait sets r's wait for leases to wait (one of WaitModes, or "" for
// the library's default).
func setWait(r *hybrid.Rule, wait string) error {
	w, ok := waits[wait]
	if !ok {
		return fmt.Errorf("accuracy: unknown wait %q (known: %v)", wait, WaitModes)
	}
	r.Wait = w
	return nil
}

// CheckWait reports whether wait is a wait this library can set.
func CheckWait(wait string) error {
	var r hybrid.Rule
	return setWait(&r, wait)
}

// waited reports whether d waited for a lease.
func waited(d hybrid.Decision) bool { return localx.Waited(d) }
