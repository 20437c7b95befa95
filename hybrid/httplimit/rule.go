package httplimit

import (
	"time"

	"github.com/hybridlimit/hybridlimit/hybrid"
	"github.com/hybridlimit/hybridlimit/local"
)

// KeyType is what a rule counts requests by.
type KeyType string

// The key types.
const (
	KeyIP     KeyType = "ip"      // the client IP, as the middleware's ClientIP resolves it
	KeyUser   KeyType = "user"    // the user the application's UserFunc returns
	KeyAPIKey KeyType = "api_key" // the API key header's value
)

// Rule is one limit of the middleware: which requests (Endpoint), counted
// per what (Key), how many per window (Algorithm, Quota, Window).
// The same Rule comes from Go (Config.Rules, Middleware.SetRules), from a
// rules file (ParseRules, WatchFile) and from Redis (WatchRedis), and is
// validated the same way from each: a bad one is refused with a *RuleError
// naming it and the field.
//
// Each field's tag is its key in a rules file (docs/rules.md), where
// Window is a duration string ("90s", "1h30m", "1d"), Algorithm, Mode,
// Policy and Wait are names ("gcra", "central", "fail_closed", "never"),
// and a field left out is the field's zero value. ParseRules reads the
// tags; encoding/json does not know those forms.
type Rule struct {
	// ID names the rule: its hybrid.Rule, the policy in the headers and
	// the problem body. 1 to 128 bytes of letters, digits and -_.:/,
	// unique among the rules. Required.
	ID string `rules:"id"`
	// Key is what requests are counted by. Required.
	Key KeyType `rules:"key"`
	// Endpoint is the requests the rule applies to: a ServeMux pattern,
	// "[METHOD ][HOST]/path". Default "/": every request.
	Endpoint string `rules:"endpoint,omitempty"`
	// Algorithm is the limit's algorithm (in a file, its name:
	// "fixed_window", "sliding_window_log", "sliding_window_counter",
	// "token_bucket", "leaky_bucket", "gcra", "sub_window_counter").
	// Required.
	Algorithm local.Algorithm `rules:"algorithm"`
	// Quota is how many requests a key may make per Window; for the
	// bucket algorithms, the rate is Quota per Window. At least 1.
	Quota int64 `rules:"max_requests"`
	// Window is the quota's period: a whole number of microseconds, at
	// most 366 days. Required.
	Window time.Duration `rules:"window"`
	// Burst is the most the bucket algorithms admit at once. Default 0:
	// Quota. The window algorithms take none.
	Burst int64 `rules:"burst,omitempty"`
	// SubWindows is how many sub-windows a sub_window_counter cuts Window
	// into, 1 to 64. Default 0: 10. The other algorithms take none.
	SubWindows int64 `rules:"sub_windows,omitempty"`
	// Anchored starts a key's window at its first request, not at
	// multiples of Window (fixed_window, sub_window_counter). Default
	// false.
	Anchored bool `rules:"anchored,omitempty"`
	// Tier restricts the rule to requests of this tier. Default "": every
	// request.
	Tier string `rules:"tier,omitempty"`
	// Cost is what one request costs (see Config.Cost), at most what the
	// rule admits at once. Default 0: 1.
	Cost int64 `rules:"cost,omitempty"`
	// Mode is where the rule's decisions are made. Default: the Limiter's.
	Mode hybrid.Mode `rules:"mode,omitempty"`
	// Policy is what the rule does when Redis cannot decide. Default: the
	// Limiter's.
	Policy hybrid.Policy `rules:"policy,omitempty"`
	// Wait is whether a Hybrid rule's request waits for its key's
	// exchange with Redis. Default: the zero Wait, hybrid.WaitInFlight.
	Wait hybrid.Wait `rules:"wait,omitempty"`
	// Global holds the limit across every region, not only this region's
	// cluster (hybrid.Rule.Global): a Hybrid fixed_window rule, on a
	// Limiter with hybrid.Config.Global. Default false.
	Global bool `rules:"global,omitempty"`
	// Shadow counts and sends the headers, but never refuses. Default
	// false.
	Shadow bool `rules:"shadow,omitempty"`
	// Overrides maps a tier name, or a single key, to its own Quota. The
	// burst keeps its ratio to the quota. Default none.
	Overrides map[string]int64 `rules:"overrides,omitempty"`
}
