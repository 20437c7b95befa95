package accuracy

import (
	"fmt"

	"github.com/hybridlimit/hybridlimit/hybrid"
)

// The values of Spec.Wait (the -api-wait flag): how long a hybrid rule's
// request waits for a lease, Rule.Wait's choices. The empty value leaves
// the rule at the library's default.
const (
	WaitNever    = "never"     // never wait: refuse past the cold-start allowance
	WaitInFlight = "in-flight" // wait about one round trip for a lease already on its way
	WaitFirst    = "first"     // wait for a key's first lease
)

// WaitModes lists the values Spec.Wait may take besides the default.
var WaitModes = []string{WaitNever, WaitInFlight, WaitFirst}

// setWait sets r's wait for leases to wait (one of WaitModes, or "" for
// the library's default). This library has no Rule.Wait yet: "first" is
// Rule.WaitForLease, "never" today's behaviour, and "in-flight" is an
// error until the library offers it.
func setWait(r *hybrid.Rule, wait string) error {
	switch wait {
	case "", WaitNever:
		return nil
	case WaitFirst:
		r.WaitForLease = true
		return nil
	case WaitInFlight:
		return fmt.Errorf("accuracy: wait %q: this library's hybrid.Rule has no Wait field yet", wait)
	}
	return fmt.Errorf("accuracy: unknown wait %q (known: %v)", wait, WaitModes)
}

// CheckWait reports whether wait is a wait this library can set.
func CheckWait(wait string) error {
	var r hybrid.Rule
	return setWait(&r, wait)
}

// waited reports whether d waited for a lease. This library's Decision
// does not say yet (Decision.Waited), so no decision counts as waited.
func waited(d hybrid.Decision) bool {
	_ = d
	return false
}
