package rls_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/hybridlimit/hybridlimit/envoy/rls"
	"github.com/hybridlimit/hybridlimit/hybrid"
)

// TestHitsMetric: hybridlimit.envoy.hits counts the hits of each decided
// descriptor by its limit's configuration key and its result; with
// detailed_metric, by the request's own descriptor.
func TestHitsMetric(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { mp.Shutdown(context.Background()) })
	clock := &fakeClock{t: start}
	l, err := hybrid.New(hybrid.Config{Clock: clock, Logger: quiet})
	require.NoError(t, err)
	t.Cleanup(func() { l.Close() })
	h := serve(t, l, clock, rls.Config{MeterProvider: mp}, "metrics.yaml")
	for range 3 {
		h.ask(t, "metrics", desc("remote_address", "10.0.0.1"))
		h.ask(t, "metrics", desc("user", "alice"))
	}
	h.askN(t, "metrics", 2, desc("user", "bob"))

	var rm metricdata.ResourceMetrics
	require.NoError(t, reader.Collect(context.Background(), &rm))
	got := map[string]int64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != "hybridlimit.envoy.hits" {
				continue
			}
			for _, p := range m.Data.(metricdata.Sum[int64]).DataPoints {
				limit, _ := p.Attributes.Value("limit")
				result, _ := p.Attributes.Value("result")
				domain, _ := p.Attributes.Value("domain")
				assert.Equal(t, "metrics", domain.AsString())
				got[limit.AsString()+" "+result.AsString()] += p.Value
			}
		}
	}
	assert.Equal(t, map[string]int64{
		"metrics.remote_address within_limit": 2, // the configuration's key
		"metrics.remote_address over_limit":   1,
		"metrics.user_alice within_limit":     2, // detailed: the request's
		"metrics.user_alice over_limit":       1,
		"metrics.user_bob within_limit":       2, // hits_addend 2
	}, got)
}
