package rls

import (
	"context"
	"fmt"
	"strings"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// hitsCounter is the hybridlimit.envoy.hits counter of mp.
func hitsCounter(mp metric.MeterProvider) (metric.Int64Counter, error) {
	hits, err := mp.Meter("github.com/hybridlimit/hybridlimit/envoy/rls").Int64Counter("hybridlimit.envoy.hits",
		metric.WithDescription("Hits (hits_addend) of the descriptors a limit decided, by domain, limit and result."), metric.WithUnit("{hit}"))
	if err != nil {
		return nil, fmt.Errorf("rls: the hits counter: %w", err)
	}
	return hits, nil
}

// count adds the hits of the descriptors a limit decided to the
// hybridlimit.envoy.hits counter.
func (s *Service) count(ctx context.Context, req *rlsv3.RateLimitRequest, ds []decided) {
	if !s.hits.Enabled(ctx) {
		return
	}
	for i := range ds {
		x := &ds[i]
		if x.state != stateDecided {
			continue
		}
		result := "within_limit"
		switch {
		case x.over && x.l.shadow:
			result = "shadow_over_limit"
		case x.over:
			result = "over_limit"
		}
		name := x.l.fullKey
		if x.l.detailed {
			name = detailedKey(req.GetDomain(), req.GetDescriptors()[i])
		}
		s.hits.Add(ctx, x.cost, metric.WithAttributes(
			attribute.String("domain", req.GetDomain()), attribute.String("limit", name), attribute.String("result", result)))
	}
}

// detailedKey is a request descriptor's name in envoyproxy/ratelimit's
// form: domain.key_value.key_value….
func detailedKey(domain string, d *commonv3.RateLimitDescriptor) string {
	var b strings.Builder
	b.WriteString(domain)
	for _, e := range d.GetEntries() {
		b.WriteByte('.')
		b.WriteString(e.GetKey())
		if e.GetValue() != "" {
			b.WriteByte('_')
			b.WriteString(e.GetValue())
		}
	}
	return b.String()
}
