package httplimit

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/metric"

	"github.com/hybridlimit/hybridlimit/internal/clientip"
	"github.com/hybridlimit/hybridlimit/internal/config"
	"github.com/hybridlimit/hybridlimit/local"
)

// ErrInvalidConfig reports a bad Config, WatchConfig or argument of New,
// WatchFile, WatchRedis or PublishRules, naming it. Match it with
// errors.Is.
var ErrInvalidConfig = errors.New("httplimit: invalid config")

// Defaults of Config: docs/operating.md#defaults lists them, and
// TestDefaults holds that table against them.
const (
	// defaultAPIKeyHeader is the header api_key rules read.
	defaultAPIKeyHeader = "X-API-Key"
	// defaultUnavailableStatus is the status of a FailClosed refusal made
	// without Redis: 503 Service Unavailable.
	defaultUnavailableStatus = http.StatusServiceUnavailable
)

// Config configures a Middleware. Every field documents its default, and
// docs/operating.md#defaults lists them all; the zero Config keys IP rules
// by the socket's peer address and sends the X-RateLimit-* headers.
type Config struct {
	// Rules are the initial rules; SetRules replaces them. Default none:
	// every request passes.
	Rules []Rule

	// TrustedProxies are the proxies (CIDRs, or single addresses) in front
	// of the server. From a peer among them, X-Forwarded-For is read right
	// to left, skipping trusted addresses, to the first untrusted one: the
	// client. Default none: the client is the socket's peer and forwarding
	// headers are ignored.
	TrustedProxies []string
	// TrustedHops is the number of proxies every request passes through,
	// when their addresses are not known: the client is the TrustedHops-th
	// X-Forwarded-For entry from the right (the peer counting as the last
	// hop), or the peer when there are fewer. Default 0. Every peer's
	// X-Forwarded-For (and ClientIPHeader) is then believed, so set it only
	// when the server cannot be reached but through those proxies. Use
	// TrustedProxies when the addresses are known; do not set both.
	TrustedHops int
	// ClientIPHeader names a single-value header a trusted proxy sets to the
	// client's address (X-Real-IP, CF-Connecting-IP, True-Client-IP),
	// believed only from a peer in TrustedProxies (or with TrustedHops set);
	// when absent or unparsable X-Forwarded-For is used. Default "".
	ClientIPHeader string
	// IPv6Prefix groups IPv6 clients by their first IPv6Prefix bits (64
	// puts a whole customer network under one key), 1 to 128. Default 0:
	// each address its own key.
	IPv6Prefix int

	// APIKeyHeader is the header whose value keys api_key rules and
	// selects the tier. Default "X-API-Key".
	APIKeyHeader string
	// UserFunc returns the user that user rules count by, and false for a
	// request without one (user rules then do not apply to it). It must be
	// safe for concurrent use. Default nil: user rules never apply.
	UserFunc func(*http.Request) (string, bool)
	// TierFunc returns the tier of an API key ("" for none). It must be
	// safe for concurrent use and fast. Default nil: Tiers is used.
	TierFunc func(apiKey string) string
	// Tiers maps API keys to tiers, when TierFunc is nil. Default nil: no
	// request has a tier. New copies it.
	Tiers map[string]string
	// Cost returns the cost of a request under every rule it matches, or 0
	// for each rule's own Cost (itself defaulting to 1). It must be safe for
	// concurrent use. Default nil.
	Cost func(*http.Request) int64

	// DisableXRateLimit turns off X-RateLimit-Limit, X-RateLimit-Remaining
	// and X-RateLimit-Reset. Default false: they are sent.
	DisableXRateLimit bool
	// ResetUnix sends X-RateLimit-Reset as a Unix time in seconds (as
	// GitHub does) rather than delay-seconds. Default false.
	ResetUnix bool
	// RateLimitHeaders sends RateLimit-Policy and RateLimit as
	// draft-ietf-httpapi-ratelimit-headers-11 defines them. Default false.
	RateLimitHeaders bool
	// RetryJitter adds a random delay from 0 to RetryJitter to Retry-After,
	// so refused clients do not all come back at once. Default 0.
	RetryJitter time.Duration
	// UnavailableStatus is the status of a refusal made without Redis by
	// a FailClosed rule (local.ReasonUnavailable), when no other rule
	// refused the request for its limit: the client did nothing wrong, and
	// a 429 would say it sent too much. Its body's problem type is
	// docs/http.md#redis-failures. 400 to 599. Default 503 (Service
	// Unavailable).
	UnavailableStatus int

	// Shadow runs every rule in shadow mode: requests are counted and the
	// headers set, but none is refused; refusals that enforcement would
	// have made are counted in a metric. Default false.
	Shadow bool

	// Clock tells the time of X-RateLimit-Reset in Unix form. Default: the
	// system clock (time.Now). Give it the Limiter's Clock when that is not
	// the system's.
	Clock local.Clock
	// MeterProvider receives the middleware's metrics. Default: the global
	// one (otel.GetMeterProvider()).
	MeterProvider metric.MeterProvider
	// Logger receives decisions the middleware could not make (misuse of
	// the Limiter). Default: slog.Default().
	Logger *slog.Logger
}

// withDefaults returns c with each zero field that has a default set to it.
func (c Config) withDefaults() Config {
	if c.APIKeyHeader == "" {
		c.APIKeyHeader = defaultAPIKeyHeader
	}
	if c.UnavailableStatus == 0 {
		c.UnavailableStatus = defaultUnavailableStatus
	}
	if c.Clock == nil {
		c.Clock = systemClock{}
	}
	if c.MeterProvider == nil {
		c.MeterProvider = otel.GetMeterProvider()
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

// validate reports c's first bad field, c having its defaults, in an error
// wrapping ErrInvalidConfig that names it. It builds nothing: New parses
// the client IP fields into a clientip.Resolver.
func (c Config) validate() error {
	if field, value, reason := c.clientIPFields().Check(); field != "" {
		return configError(field, value, reason)
	}
	switch {
	case c.RetryJitter < 0:
		return configError("RetryJitter", c.RetryJitter, "must not be negative")
	case c.UnavailableStatus < 400 || c.UnavailableStatus > 599:
		return configError("UnavailableStatus", c.UnavailableStatus, "must be from 400 to 599")
	case strings.ContainsAny(c.APIKeyHeader, " :\r\n"):
		return configError("APIKeyHeader", fmt.Sprintf("%q", c.APIKeyHeader), "not a header name")
	}
	return nil
}

// clientIPFields returns c's client IP fields.
func (c Config) clientIPFields() clientip.Fields {
	return clientip.Fields{TrustedProxies: c.TrustedProxies, TrustedHops: c.TrustedHops, ClientIPHeader: c.ClientIPHeader, IPv6Prefix: c.IPv6Prefix}
}

// configError is the error of a bad Config or WatchConfig field.
func configError(field string, value any, reason string) error {
	return config.Invalid(ErrInvalidConfig, field, value, reason)
}

// newClientIP returns the client IP fields of c, a valid Config, parsed.
func newClientIP(c Config) clientip.Resolver {
	var header string
	if c.ClientIPHeader != "" {
		header = http.CanonicalHeaderKey(c.ClientIPHeader)
	}
	return c.clientIPFields().Resolver(header, xffHeader)
}

// systemClock is the Clock of a Config without one.
type systemClock struct{}

func (systemClock) Now() time.Time { return time.Now() }
