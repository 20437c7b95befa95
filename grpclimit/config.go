package grpclimit

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/metric"

	"github.com/hybridlimit/hybridlimit/hybrid/httplimit"
	"github.com/hybridlimit/hybridlimit/internal/clientip"
	"github.com/hybridlimit/hybridlimit/internal/config"
)

// ErrInvalidConfig reports a bad Config or argument of New, naming the
// field. Match it with errors.Is.
var ErrInvalidConfig = errors.New("grpclimit: invalid config")

// Defaults of Config.
const (
	// DefaultAPIKeyHeader is the metadata key api_key rules read.
	DefaultAPIKeyHeader = "x-api-key"
	// forwardedFor is the metadata key trusted proxies append the client's
	// address to, as HTTP proxies do (gRPC metadata keys are lower case).
	forwardedFor = "x-forwarded-for"
)

// Config configures an Interceptor. Every field documents its default; the
// zero Config keys ip rules by the peer's address and sends the rate-limit
// response headers.
type Config struct {
	// Rules are the initial rules; SetRules replaces them. A rule's
	// Endpoint is a method pattern: "/pkg.Service/Method",
	// "/pkg.Service/*" (every method of the service) or "/*" (every
	// method, as "" is). Default none: every call passes.
	Rules []httplimit.Rule

	// TrustedProxies are the proxies (CIDRs, or single addresses) in front
	// of the server. From a peer among them, the x-forwarded-for metadata
	// is read right to left, skipping trusted addresses, to the first
	// untrusted one: the client. Default none: the client is the peer and
	// forwarding metadata is ignored.
	TrustedProxies []string
	// TrustedHops is the number of proxies every call passes through,
	// when their addresses are not known: the client is the TrustedHops-th
	// x-forwarded-for entry from the right, or the peer when there are
	// fewer. Default 0. Every peer's forwarding metadata is then believed,
	// so set it only when the server cannot be reached but through those
	// proxies; do not set both.
	TrustedHops int
	// ClientIPHeader names a single-value metadata key a trusted proxy sets
	// to the client's address ("x-real-ip"), believed only from a peer in
	// TrustedProxies (or with TrustedHops set). Default "".
	ClientIPHeader string
	// IPv6Prefix groups IPv6 clients by their first IPv6Prefix bits, 1 to
	// 128. Default 0: each address its own key.
	IPv6Prefix int

	// APIKeyHeader is the metadata key whose value keys api_key rules and
	// selects the tier. Default DefaultAPIKeyHeader, "x-api-key".
	APIKeyHeader string
	// UserFunc returns the key that user rules count by (an authenticated
	// user, a tenant), and false for a call without one (user rules then
	// do not apply to it). fullMethod is "/pkg.Service/Method". It must be
	// safe for concurrent use. Default nil: user rules never apply.
	UserFunc func(ctx context.Context, fullMethod string) (string, bool)
	// TierFunc returns the tier of an API key ("" for none). It must be
	// safe for concurrent use and fast. Default nil: Tiers is used.
	TierFunc func(apiKey string) string
	// Tiers maps API keys to tiers, when TierFunc is nil. Default nil: no
	// call has a tier. New copies it.
	Tiers map[string]string
	// Cost returns the cost of a call under every rule it matches, or 0
	// for each rule's own Cost (itself defaulting to 1). A stream is one
	// call. It must be safe for concurrent use. Default nil.
	Cost func(ctx context.Context, fullMethod string) int64

	// DisableHeaders turns off the ratelimit-policy and ratelimit response
	// header metadata. Default false: they are sent.
	DisableHeaders bool
	// RetryJitter adds a random delay from 0 to RetryJitter to the
	// RetryInfo delay, so refused clients do not all come back at once.
	// Default 0.
	RetryJitter time.Duration
	// Shadow runs every rule in shadow mode: calls are counted and the
	// headers set, but none is refused; refusals that enforcement would
	// have made are counted in a metric. Default false.
	Shadow bool

	// MeterProvider receives the interceptor's metrics. Default: the
	// global one (otel.GetMeterProvider()).
	MeterProvider metric.MeterProvider
	// Logger receives decisions the interceptor could not make (misuse of
	// the Limiter). Default: slog.Default().
	Logger *slog.Logger
}

// withDefaults returns c with each zero field that has a default set to it.
func (c Config) withDefaults() Config {
	if c.APIKeyHeader == "" {
		c.APIKeyHeader = DefaultAPIKeyHeader
	}
	if c.MeterProvider == nil {
		c.MeterProvider = otel.GetMeterProvider()
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

// validate reports c's first bad field in an error wrapping
// ErrInvalidConfig that names it.
func (c Config) validate() error {
	if field, value, reason := c.clientIPFields().Check(); field != "" {
		return configError(field, value, reason)
	}
	switch {
	case c.RetryJitter < 0:
		return configError("RetryJitter", c.RetryJitter, "must not be negative")
	case !validKey(c.ClientIPHeader, true):
		return configError("ClientIPHeader", fmt.Sprintf("%q", c.ClientIPHeader), "not a metadata key: lower-case letters, digits, '-', '_', '.'")
	case !validKey(c.APIKeyHeader, false):
		return configError("APIKeyHeader", fmt.Sprintf("%q", c.APIKeyHeader), "not a metadata key: lower-case letters, digits, '-', '_', '.'")
	}
	return nil
}

// clientIPFields returns c's client IP fields.
func (c Config) clientIPFields() clientip.Fields {
	return clientip.Fields{TrustedProxies: c.TrustedProxies, TrustedHops: c.TrustedHops, ClientIPHeader: c.ClientIPHeader, IPv6Prefix: c.IPv6Prefix}
}

// validKey reports whether s is a metadata key of ASCII values, as gRPC
// spells them on the wire (lower case), and not a reserved "grpc-" one.
func validKey(s string, empty bool) bool {
	if s == "" {
		return empty
	}
	if strings.HasPrefix(s, "grpc-") || strings.HasSuffix(s, "-bin") {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.') {
			return false
		}
	}
	return true
}

// configError is the error of a bad Config field.
func configError(field string, value any, reason string) error {
	return config.Invalid(ErrInvalidConfig, field, value, reason)
}

// newClientIP returns the client IP fields of c, a valid Config, parsed.
func newClientIP(c Config) clientip.Resolver {
	return c.clientIPFields().Resolver(c.ClientIPHeader, forwardedFor)
}
