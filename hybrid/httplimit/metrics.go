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
	var err error
	if m.refused, err = mt.Int64Counter("hybridlimit.http.refused", metric.WithUnit("{request}"),
		metric.WithDescription("Requests refused with 429 by enforced rules.")); err != nil {
		return nil, err
	}
	if m.shadowRefused, err = mt.Int64Counter("hybridlimit.http.shadow.refused", metric.WithUnit("{request}"),
		metric.WithDescription("Requests that shadow rules would have refused; they were served.")); err != nil {
		return nil, err
	}
	if m.degraded, err = mt.Int64Counter("hybridlimit.http.degraded", metric.WithUnit("{request}"),
		metric.WithDescription("Requests decided by a rule's failure policy: Redis could not decide.")); err != nil {
		return nil, err
	}
	if m.errors, err = mt.Int64Counter("hybridlimit.http.errors", metric.WithUnit("{request}"),
		metric.WithDescription("Requests served undecided: the limiter reported misuse (logged).")); err != nil {
		return nil, err
	}
	return &m, nil
}
