package httplimit

import (
	"go.opentelemetry.io/otel/metric"

	"github.com/hybridlimit/hybridlimit/internal/ruleitem"
)

// meterName names the middleware's meter, as OpenTelemetry's conventions
// ask: the package's import path.
const meterName = "github.com/hybridlimit/hybridlimit/hybrid/httplimit"

// newMetrics returns the middleware's instruments, hybridlimit.http.*.
func newMetrics(mp metric.MeterProvider) (*ruleitem.Metrics, error) {
	return ruleitem.NewMetrics(mp, meterName, "hybridlimit.http.", "{request}", ruleitem.Descriptions{
		Admitted:      "Requests the enforced rules admitted and passed on; with hybridlimit.http.refused, every request the middleware decided.",
		Refused:       "Requests refused by enforced rules: 429, or Config.UnavailableStatus when only FailClosed rules refused, Redis unable to decide.",
		ShadowRefused: "Requests that shadow rules would have refused; they were served.",
		Degraded:      "Requests decided by a rule's failure policy: Redis could not decide.",
		Errors:        "Requests the limiter returned an error for: misuse (a rule not registered with it: served undecided, logged), or Redis answering with an error (decided by the failure policies).",
	})
}
