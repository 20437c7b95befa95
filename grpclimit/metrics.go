package grpclimit

import "go.opentelemetry.io/otel/metric"

// meterName names the interceptor's meter, as OpenTelemetry's conventions
// ask: the package's import path.
const meterName = "github.com/hybridlimit/hybridlimit/grpclimit"

// metrics are the interceptor's instruments. None carries a key, an IP or
// a rule's override as an attribute.
type metrics struct {
	admitted      metric.Int64Counter // calls the enforced rules admitted
	refused       metric.Int64Counter // calls refused (ResourceExhausted or Unavailable)
	shadowRefused metric.Int64Counter // calls shadow rules would have refused
	degraded      metric.Int64Counter // calls decided by a failure policy
	errors        metric.Int64Counter // calls passed because the Limiter reported misuse
}

func newMetrics(mp metric.MeterProvider) (*metrics, error) {
	mt := mp.Meter(meterName)
	var m metrics
	for _, c := range []struct {
		to         *metric.Int64Counter
		name, desc string
	}{
		{&m.admitted, "hybridlimit.grpc.admitted", "Calls the enforced rules admitted and passed on."},
		{&m.refused, "hybridlimit.grpc.refused", "Calls refused by enforced rules: ResourceExhausted, or Unavailable when only FailClosed rules refused, Redis unable to decide."},
		{&m.shadowRefused, "hybridlimit.grpc.shadow.refused", "Calls that shadow rules would have refused; they were served."},
		{&m.degraded, "hybridlimit.grpc.degraded", "Calls decided by a rule's failure policy: Redis could not decide."},
		{&m.errors, "hybridlimit.grpc.errors", "Calls the limiter returned an error for: misuse (served undecided, logged), or Redis answering with an error (decided by the failure policies)."},
	} {
		var err error
		if *c.to, err = mt.Int64Counter(c.name, metric.WithUnit("{call}"), metric.WithDescription(c.desc)); err != nil {
			return nil, err
		}
	}
	return &m, nil
}
