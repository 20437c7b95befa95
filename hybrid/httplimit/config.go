package httplimit

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/netip"
	"strings"
	"time"

	"go.opentelemetry.io/otel/metric"

	"github.com/hybridlimit/hybridlimit/hybrid"
)

// ErrInvalidConfig reports a bad Config, WatchConfig or argument of New,
// WatchFile, WatchRedis or PublishRules, naming it. Match it with
// errors.Is.
var ErrInvalidConfig = errors.New("httplimit: invalid config")

// DefaultAPIKeyHeader is the header api_key rules read when
// Config.APIKeyHeader is empty.
const DefaultAPIKeyHeader = "X-API-Key"

// DefaultUnavailableStatus is the status of a FailClosed refusal made
// without Redis when Config.UnavailableStatus is 0: 503 Service
// Unavailable.
const DefaultUnavailableStatus = http.StatusServiceUnavailable

// Config configures a Middleware. Every field documents its default; the
// zero Config keys IP rules by the socket's peer address and sends the
// X-RateLimit-* headers.
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
	// selects the tier. Default DefaultAPIKeyHeader ("X-API-Key").
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
	// a FailClosed rule (hybrid.ReasonUnavailable), when no other rule
	// refused the request for its limit: the client did nothing wrong, and
	// a 429 would say it sent too much. Its body's problem type is
	// UnavailableProblemType. 400 to 599. Default 503 (Service
	// Unavailable).
	UnavailableStatus int

	// Shadow runs every rule in shadow mode: requests are counted and the
	// headers set, but none is refused; refusals that enforcement would
	// have made are counted in a metric. Default false.
	Shadow bool

	// Clock tells the time of X-RateLimit-Reset in Unix form. Default: the
	// system clock. Give it the Limiter's Clock when that is not the
	// system's.
	Clock hybrid.Clock
	// MeterProvider receives the middleware's metrics. Default: the global
	// one (otel.GetMeterProvider).
	MeterProvider metric.MeterProvider
	// Logger receives decisions the middleware could not make (misuse of
	// the Limiter). Default: slog.Default().
	Logger *slog.Logger
}

// clientIP resolves a request's client address (Config's client IP
// fields, parsed).
type clientIP struct {
	trusted []netip.Prefix
	hops    int
	header  string // canonical header name, or ""
	v6bits  int
}

func (c Config) validate() (clientIP, error) {
	var ci clientIP
	for i, s := range c.TrustedProxies {
		p, err := parsePrefix(s)
		if err != nil {
			return ci, fmt.Errorf("%w: TrustedProxies[%d] %q: %w", ErrInvalidConfig, i, s, err)
		}
		ci.trusted = append(ci.trusted, p)
	}
	switch {
	case c.TrustedHops < 0:
		return ci, fmt.Errorf("%w: TrustedHops %d: must not be negative", ErrInvalidConfig, c.TrustedHops)
	case c.TrustedHops > 0 && len(c.TrustedProxies) > 0:
		return ci, fmt.Errorf("%w: TrustedHops: set with TrustedProxies; use one", ErrInvalidConfig)
	case c.IPv6Prefix < 0 || c.IPv6Prefix > 128:
		return ci, fmt.Errorf("%w: IPv6Prefix %d: must be from 1 to 128", ErrInvalidConfig, c.IPv6Prefix)
	case c.RetryJitter < 0:
		return ci, fmt.Errorf("%w: RetryJitter %v: must not be negative", ErrInvalidConfig, c.RetryJitter)
	case c.UnavailableStatus != 0 && (c.UnavailableStatus < 400 || c.UnavailableStatus > 599):
		return ci, fmt.Errorf("%w: UnavailableStatus %d: must be from 400 to 599", ErrInvalidConfig, c.UnavailableStatus)
	case c.ClientIPHeader != "" && len(c.TrustedProxies) == 0 && c.TrustedHops == 0:
		return ci, fmt.Errorf("%w: ClientIPHeader %q: needs TrustedProxies or TrustedHops, or anyone could set it", ErrInvalidConfig, c.ClientIPHeader)
	case strings.ContainsAny(c.APIKeyHeader, " :\r\n"):
		return ci, fmt.Errorf("%w: APIKeyHeader %q: not a header name", ErrInvalidConfig, c.APIKeyHeader)
	}
	ci.hops, ci.v6bits = c.TrustedHops, c.IPv6Prefix
	if c.ClientIPHeader != "" {
		ci.header = http.CanonicalHeaderKey(c.ClientIPHeader)
	}
	return ci, nil
}

// parsePrefix parses a CIDR, or a single address as its own prefix.
func parsePrefix(s string) (netip.Prefix, error) {
	s = strings.TrimSpace(s)
	if strings.Contains(s, "/") {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return p, err
		}
		if p.Addr().Is4In6() {
			p = netip.PrefixFrom(p.Addr().Unmap(), max(p.Bits()-96, 0))
		}
		return p.Masked(), nil
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Prefix{}, err
	}
	a = a.Unmap()
	return netip.PrefixFrom(a, a.BitLen()), nil
}
