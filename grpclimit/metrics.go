package grpclimit

import (
	"go.opentelemetry.io/otel/metric"

	"github.com/hybridlimit/hybridlimit/internal/ruleitem"
)

// meterName names the interceptor's meter, as OpenTelemetry's conventions
// ask: the package's import path.
const meterName = "github.com/hybridlimit/hybridlimit/grpclimit"

// newMetrics returns the interceptor's instruments, hybridlimit.grpc.*.
func newMetrics(mp metric.MeterProvider) (*ruleitem.Metrics, error) {
	return ruleitem.NewMetrics(mp, meterName, "hybridlimit.grpc.", "{call}", ruleitem.Descriptions{
		Admitted:      "Calls the enforced rules admitted and passed on.",
		Refused:       "Calls refused by enforced rules: ResourceExhausted, or Unavailable when only FailClosed rules refused, Redis unable to decide.",
		ShadowRefused: "Calls that shadow rules would have refused; they were served.",
		Degraded:      "Calls decided by a rule's failure policy: Redis could not decide.",
		Errors:        "Calls the limiter returned an error for: misuse (served undecided, logged), or Redis answering with an error (decided by the failure policies).",
	})
}
