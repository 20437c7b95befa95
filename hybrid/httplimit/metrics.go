package httplimit

import "go.opentelemetry.io/otel/metric"

// meterName names the middleware's meter, as OpenTelemetry's conventions
// ask: the package's import path.
const meterName = "github.com/hybridlimit/hybridlimit/hybrid/httplimit"

// metrics are the middleware's instruments. None carries a key, an IP or a
// rule's override as an attribute.
type metrics struct {
	refused       metric.Int64Counter // requests answered 429
	shadowRefused metric.Int64Counter // requests shadow rules would have refused
	degraded      metric.Int64Counter // requests decided by a failure policy
	errors        metric.Int64Counter // requests passed because the Limiter reported misuse
}

func newMetrics(mp metric.MeterProvider) (*metrics, error) {
	mt := mp.Meter(meterName)
	var m metrics
	for _, c := range []struct {
		to         *metric.Int64Counter
		name, desc string
	}{
		{&m.refused, "hybridlimit.http.refused", "Requests refused with 429 by enforced rules."},
		{&m.shadowRefused, "hybridlimit.http.shadow.refused", "Requests that shadow rules would have refused; they were served."},
		{&m.degraded, "hybridlimit.http.degraded", "Requests decided by a rule's failure policy: Redis could not decide."},
		{&m.errors, "hybridlimit.http.errors", "Requests served undecided: the limiter reported misuse (logged)."},
	} {
		var err error
		if *c.to, err = mt.Int64Counter(c.name, metric.WithUnit("{request}"), metric.WithDescription(c.desc)); err != nil {
			return nil, err
		}
	}
	return &m, nil
}
