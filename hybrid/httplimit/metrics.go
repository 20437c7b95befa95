package httplimit

import "go.opentelemetry.io/otel/metric"

// meterName names the middleware's meter, as OpenTelemetry's conventions
// ask: the package's import path.
const meterName = "github.com/hybridlimit/hybridlimit/hybrid/httplimit"

// metrics are the middleware's instruments. None carries a key, an IP or a
// rule's override as an attribute.
type metrics struct {
	admitted      metric.Int64Counter // requests the enforced rules admitted
	refused       metric.Int64Counter // requests refused (429, or UnavailableStatus)
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
		{&m.admitted, "hybridlimit.http.admitted", "Requests the enforced rules admitted and passed on; with hybridlimit.http.refused, every request the middleware decided."},
		{&m.refused, "hybridlimit.http.refused", "Requests refused by enforced rules: 429, or Config.UnavailableStatus when only FailClosed rules refused, Redis unable to decide."},
		{&m.shadowRefused, "hybridlimit.http.shadow.refused", "Requests that shadow rules would have refused; they were served."},
		{&m.degraded, "hybridlimit.http.degraded", "Requests decided by a rule's failure policy: Redis could not decide."},
		{&m.errors, "hybridlimit.http.errors", "Requests the limiter returned an error for: misuse (a rule not registered with it: served undecided, logged), or Redis answering with an error (decided by the failure policies)."},
	} {
		var err error
		if *c.to, err = mt.Int64Counter(c.name, metric.WithUnit("{request}"), metric.WithDescription(c.desc)); err != nil {
			return nil, err
		}
	}
	return &m, nil
}
