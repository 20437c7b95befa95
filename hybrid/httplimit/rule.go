package httplimit

import (
	"time"

	"github.com/hybridlimit/hybridlimit/hybrid"
)

// KeyType is what a rule counts requests by.
type KeyType string

// The key types.
const (
	KeyIP     KeyType = "ip"      // the client IP, as the middleware's ClientIP resolves it
	KeyUser   KeyType = "user"    // the user the application's UserFunc returns
	KeyAPIKey KeyType = "api_key" // the API key header's value
)

// Rule is one limit of the middleware, in the design articles' data model.
// Algorithm takes the names local.ParseAlgorithm accepts ("fixed_window",
// "sliding_window_log", "sliding_window_counter", "token_bucket",
// "leaky_bucket", "gcra", "sub_window_counter").
type Rule struct {
	ID         string           `json:"id" yaml:"id"`               // unique; names the hybrid rule
	Key        KeyType          `json:"key" yaml:"key"`             // ip, user or api_key
	Endpoint   string           `json:"endpoint" yaml:"endpoint"`   // ServeMux pattern: "[METHOD ][HOST]/path"
	Algorithm  string           `json:"algorithm" yaml:"algorithm"` // a local algorithm name, e.g. "fixed_window", "gcra"
	Limit      int64            `json:"max_requests" yaml:"max_requests"`
	Window     time.Duration    `json:"window" yaml:"window"`
	Burst      int64            `json:"burst,omitempty" yaml:"burst,omitempty"`
	SubWindows int64            `json:"sub_windows,omitempty" yaml:"sub_windows,omitempty"` // sub_window_counter only: 1 to 64; 0: 10
	Anchored   bool             `json:"anchored,omitempty" yaml:"anchored,omitempty"`       // fixed_window, sub_window_counter: a key's window starts at its first request
	Tier       string           `json:"tier,omitempty" yaml:"tier,omitempty"`               // applies only to this tier's requests; "" to all
	Cost       int64            `json:"cost,omitempty" yaml:"cost,omitempty"`               // per request; default 1
	Mode       hybrid.Mode      `json:"-" yaml:"-"`                                         // default: the Limiter's
	Policy     hybrid.Policy    `json:"-" yaml:"-"`
	Wait       hybrid.Wait      `json:"-" yaml:"-"` // a hybrid rule's wait for its key's exchange with Redis; default hybrid.WaitInFlight
	Shadow     bool             `json:"shadow,omitempty" yaml:"shadow,omitempty"`
	Overrides  map[string]int64 `json:"overrides,omitempty" yaml:"overrides,omitempty"` // limit per tier name or single key
}
