package ruleitem

import "go.opentelemetry.io/otel/metric"

// Metrics are the counters of requests limited by rules: httplimit's and
// grpclimit's, under their own names. None carries a key, an IP or a
// rule's override as an attribute.
type Metrics struct {
	Admitted      metric.Int64Counter // requests the enforced rules admitted
	Refused       metric.Int64Counter // requests refused
	ShadowRefused metric.Int64Counter // requests shadow rules would have refused
	Degraded      metric.Int64Counter // requests decided by a failure policy
	Errors        metric.Int64Counter // requests the Limiter returned an error for
}

// Descriptions are the Metrics' descriptions, field by field.
type Descriptions struct {
	Admitted, Refused, ShadowRefused, Degraded, Errors string
}

// NewMetrics returns the Metrics on mp's meter of that name, each named
// prefix + "admitted", "refused", "shadow.refused", "degraded" and
// "errors", counted in unit.
func NewMetrics(mp metric.MeterProvider, meter, prefix, unit string, d Descriptions) (*Metrics, error) {
	mt := mp.Meter(meter)
	var m Metrics
	for _, c := range []struct {
		to         *metric.Int64Counter
		name, desc string
	}{
		{&m.Admitted, "admitted", d.Admitted},
		{&m.Refused, "refused", d.Refused},
		{&m.ShadowRefused, "shadow.refused", d.ShadowRefused},
		{&m.Degraded, "degraded", d.Degraded},
		{&m.Errors, "errors", d.Errors},
	} {
		var err error
		if *c.to, err = mt.Int64Counter(prefix+c.name, metric.WithUnit(unit), metric.WithDescription(c.desc)); err != nil {
			return nil, err
		}
	}
	return &m, nil
}
