package grpclimit_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/hybridlimit/hybridlimit/grpclimit"
	"github.com/hybridlimit/hybridlimit/hybrid/httplimit"
	"github.com/hybridlimit/hybridlimit/internal/clocktest"
)

// meterReader returns a MeterProvider and a function reading the sum of a
// counter of it.
func meterReader() (*metric.MeterProvider, func(t *testing.T, name string) int64) {
	r := metric.NewManualReader()
	mp := metric.NewMeterProvider(metric.WithReader(r))
	return mp, func(t *testing.T, name string) int64 {
		t.Helper()
		var rm metricdata.ResourceMetrics
		require.NoError(t, r.Collect(t.Context(), &rm))
		var n int64
		for _, sm := range rm.ScopeMetrics {
			for _, m := range sm.Metrics {
				if m.Name == name {
					for _, dp := range m.Data.(metricdata.Sum[int64]).DataPoints {
						n += dp.Value
					}
				}
			}
		}
		return n
	}
}

// TestMetrics: admitted, refused and shadow-refused calls are counted.
func TestMetrics(t *testing.T) {
	mp, read := meterReader()
	shadow := ipRule("shadow", mUnary, 1, time.Minute)
	shadow.Shadow = true
	c := serve(t, newInterceptor(t, clocktest.New(t0), grpclimit.Config{MeterProvider: mp, Rules: []httplimit.Rule{
		ipRule("enforced", mEmpty, 2, time.Minute), shadow,
	}}))
	countOK(3, func() result { return c.empty(t) })
	countOK(3, func() result { return c.unary(t) })
	assert.Equal(t, int64(5), read(t, "hybridlimit.grpc.admitted"), "2 empty, 3 unary")
	assert.Equal(t, int64(1), read(t, "hybridlimit.grpc.refused"))
	assert.Equal(t, int64(2), read(t, "hybridlimit.grpc.shadow.refused"))
	assert.Equal(t, int64(0), read(t, "hybridlimit.grpc.degraded"))
}
