package hybrid_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/hybridlimit/hybridlimit/hybrid"
	"github.com/hybridlimit/hybridlimit/internal/clocktest"
	"github.com/hybridlimit/hybridlimit/internal/hybridsim"
	"github.com/hybridlimit/hybridlimit/internal/redistest"
	"github.com/hybridlimit/hybridlimit/local"
	"github.com/hybridlimit/hybridlimit/syncer"
)

// collected is one collection, by instrument name.
type collected map[string]metricdata.Metrics

func collect(t *testing.T, r *sdkmetric.ManualReader) collected {
	t.Helper()
	var rm metricdata.ResourceMetrics
	require.NoError(t, r.Collect(context.Background(), &rm), "Collect")
	out := collected{}
	for _, sm := range rm.ScopeMetrics {
		assert.Equal(t, "github.com/hybridlimit/hybridlimit/hybrid", sm.Scope.Name, "the meter's name: the package's import path")
		for _, m := range sm.Metrics {
			out[m.Name] = m
		}
	}
	return out
}

// attrSets returns every data point's attribute set of m.
func attrSets(m metricdata.Metrics) []attribute.Set {
	var out []attribute.Set
	switch d := m.Data.(type) {
	case metricdata.Sum[int64]:
		for _, p := range d.DataPoints {
			out = append(out, p.Attributes)
		}
	case metricdata.Sum[float64]:
		for _, p := range d.DataPoints {
			out = append(out, p.Attributes)
		}
	case metricdata.Gauge[int64]:
		for _, p := range d.DataPoints {
			out = append(out, p.Attributes)
		}
	case metricdata.Gauge[float64]:
		for _, p := range d.DataPoints {
			out = append(out, p.Attributes)
		}
	case metricdata.Histogram[float64]:
		for _, p := range d.DataPoints {
			out = append(out, p.Attributes)
		}
	case metricdata.Histogram[int64]:
		for _, p := range d.DataPoints {
			out = append(out, p.Attributes)
		}
	}
	return out
}

// int64Points returns m's int64 points (a sum or a gauge) by their
// attributes, encoded as "k=v,k=v".
func int64Points(t *testing.T, c collected, name string) map[string]int64 {
	t.Helper()
	m, ok := c[name]
	require.True(t, ok, "no %s", name)
	out := map[string]int64{}
	add := func(a attribute.Set, v int64) { out[a.Encoded(attribute.DefaultEncoder())] += v }
	switch d := m.Data.(type) {
	case metricdata.Sum[int64]:
		for _, p := range d.DataPoints {
			add(p.Attributes, p.Value)
		}
	case metricdata.Gauge[int64]:
		for _, p := range d.DataPoints {
			add(p.Attributes, p.Value)
		}
	default:
		require.FailNow(t, "not an int64 sum or gauge", "%s is %T", name, m.Data)
	}
	return out
}

// TestMetrics: the decisions counted by rule, mode and result, the sync
// rounds, the keys held and Redis's availability, without a user key in any
// attribute.
func TestMetrics(t *testing.T) {
	ctx := context.Background()
	srv := redistest.Start(t)
	client := redistest.Client(t, srv.Addr)
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { mp.Shutdown(context.Background()) })
	clk := clocktest.New(epoch2030.Add(100 * time.Millisecond))
	cfg := nodeConfig(client, redistest.Prefix(t), clk, "a", 1)
	cfg.MeterProvider = mp
	cfg.Policy = hybrid.FailClosed
	l := newNode(t, cfg)
	rules := []*hybrid.Rule{
		mustRegister(t, l, hybrid.Rule{Name: "hyb", Limit: fixed(1000, time.Second)}, hybrid.Hybrid),
		mustRegister(t, l, hybrid.Rule{Name: "cen", Mode: hybrid.Central, Limit: fixed(5, time.Second)}, hybrid.Central),
		mustRegister(t, l, hybrid.Rule{Name: "loc", Limit: fixed(3, time.Second), Mode: hybrid.Local}, hybrid.Local),
	}
	// User keys that must never show: in no attribute, whole or in part.
	keys := []string{"user-4217-secret@example.com", "10.11.12.13", "Bearer eyJhbGciOiJIUzI1NiJ9"}
	want := map[string]int64{} // rule,mode,result → decisions
	decide := func(r *hybrid.Rule, key string, n int64) {
		d, err := l.AllowN(ctx, r, key, n)
		res := d.Reason().String()
		if d.Allowed() {
			res = "admitted"
		}
		if err != nil && d.Allowed() {
			res = "admitted"
		}
		want[r.Name+","+r.Mode.String()+","+res]++
	}
	var rounds, synced int64
	for range 12 {
		for _, r := range rules {
			for _, k := range keys {
				for range 20 {
					decide(r, k, 1)
				}
			}
		}
		decide(rules[0], keys[0], 5000) // too costly
		st := syncOK(t, l, clk)
		rounds++
		synced += int64(st.Synced)
		clk.Add(10 * time.Millisecond)
	}
	c := collect(t, reader)

	got := map[string]int64{}
	for attrs, v := range int64Points(t, c, "hybridlimit.decisions") {
		// attrs: mode=…,result=…,rule=… (sorted by key)
		kv := map[string]string{}
		for _, p := range strings.Split(attrs, ",") {
			k, v, _ := strings.Cut(p, "=")
			kv[k] = v
		}
		assert.Len(t, kv, 3, "decisions point with attributes %q, want rule, mode and result", attrs)
		for _, k := range []string{"rule", "mode", "result"} {
			assert.NotEmpty(t, kv[k], "decisions point with attributes %q: %s", attrs, k)
		}
		got[kv["rule"]+","+kv["mode"]+","+kv["result"]] += v
	}
	assert.Equal(t, want, got, "decisions by rule,mode,result")
	assert.Equal(t, rounds, int64Points(t, c, "hybridlimit.sync.rounds")[""], "sync.rounds")
	require.Positive(t, synced, "keys synced")
	assert.Equal(t, synced, int64Points(t, c, "hybridlimit.sync.keys")[""], "sync.keys")
	h, ok := c["hybridlimit.sync.duration"].Data.(metricdata.Histogram[float64])
	if assert.True(t, ok, "sync.duration: %+v, want a histogram", c["hybridlimit.sync.duration"].Data) &&
		assert.Len(t, h.DataPoints, 1, "sync.duration's points") {
		assert.EqualValues(t, rounds, h.DataPoints[0].Count, "sync.duration: a histogram of the rounds")
		assert.Less(t, h.DataPoints[0].Bounds[0], 0.001, "sync.duration's first bucket: rounds take milliseconds")
	}
	assert.Equal(t, "s", c["hybridlimit.sync.duration"].Unit, "sync.duration's unit")
	keysHeld := int64Points(t, c, "hybridlimit.keys")
	assert.Equal(t, int64(len(keys)), keysHeld["mode=hybrid,rule=hyb"], "keys{hyb}: %v", keysHeld)
	assert.Equal(t, int64(len(keys)), keysHeld["mode=local,rule=loc"], "keys{loc}: %v", keysHeld)
	assert.Equal(t, int64(1), int64Points(t, c, "hybridlimit.redis.available")[""], "redis.available with Redis up")
	noUserKeys(t, c, keys)

	// Redis goes away: rounds fail (three in a row open the breaker), the
	// policy decides, and the gauge says so.
	srv.Kill()
	l.Allow(ctx, rules[0], "new-key")
	for range 3 {
		clk.Add(10 * time.Millisecond)
		_, err := hybridsim.SyncAt(ctx, l, clk.Now())
		require.Error(t, err, "SyncAt with Redis killed")
	}
	// A new key: its cold-start allowance, then the policy.
	var byPolicy int64
	for range 200 {
		d, err := l.Allow(ctx, rules[0], keys[1]+"-outage")
		require.NoError(t, err, "a decision with Redis killed: the policy decides")
		if d.Degraded() {
			byPolicy++
		}
	}
	c = collect(t, reader)
	assert.Zero(t, int64Points(t, c, "hybridlimit.redis.available")[""], "redis.available after three failed rounds")
	assert.GreaterOrEqual(t, int64Points(t, c, "hybridlimit.sync.errors")[""], int64(1), "sync.errors after a failed round")
	require.Positive(t, byPolicy, "decisions by the policy")
	assert.Equal(t, byPolicy, int64Points(t, c, "hybridlimit.policy.decisions")["rule=hyb"], "policy.decisions{hyb}: the decisions by the policy")
	noUserKeys(t, c, append(keys, "new-key", keys[1]+"-outage"))
}

// noUserKeys fails t if an attribute of any data point, or the resource,
// carries one of keys.
func noUserKeys(t *testing.T, c collected, keys []string) {
	t.Helper()
	for name, m := range c {
		for _, set := range attrSets(m) {
			for _, kv := range set.ToSlice() {
				v := kv.Value.String()
				for _, k := range keys {
					assert.NotContains(t, v, k, "%s: attribute %s carries the user key", name, kv.Key)
					assert.NotContains(t, string(kv.Key), k, "%s: an attribute's name carries the user key", name)
					if len(v) >= 6 {
						assert.NotContains(t, k, v, "%s: attribute %s carries part of the user key", name, kv.Key)
					}
				}
			}
		}
	}
}

// TestMetricsAvailabilityRecovers: with only central rules (no hybrid
// rounds), a Redis outage seen by a decision sets redis.available to 0;
// the probe that finds Redis again sets it back to 1, and decisions ask
// Redis again.
func TestMetricsAvailabilityRecovers(t *testing.T) {
	ctx := context.Background()
	srv := redistest.Start(t)
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { mp.Shutdown(context.Background()) })
	l := newNode(t, hybrid.Config{
		Redis: redistest.Client(t, srv.Addr), Keyspace: syncer.Keyspace{Prefix: redistest.Prefix(t)},
		Mode: hybrid.Central, Timeout: 200 * time.Millisecond, MeterProvider: mp, Logger: quiet,
	})
	r := mustRegister(t, l, hybrid.Rule{Name: "cen", Mode: hybrid.Central, Limit: fixed(100, time.Minute)}, hybrid.Central)
	available := func() int64 { return int64Points(t, collect(t, reader), "hybridlimit.redis.available")[""] }
	_, err := l.Allow(ctx, r, "k")
	require.NoError(t, err)
	srv.Pause()
	d, err := l.Allow(ctx, r, "k")
	// Read the gauge while Redis is still paused: once it answers, the
	// probe sets it back.
	up := available()
	srv.Resume()
	require.NoError(t, err, "a decision with Redis paused")
	require.True(t, d.Degraded(), "a decision with Redis paused: %v", d)
	assert.Zero(t, up, "redis.available after a decision Redis did not answer")
	require.Eventually(t, func() bool { return available() == 1 }, 10*time.Second, 5*time.Millisecond,
		"bug: redis.available stays 0 after Redis answers again: only a hybrid sync round sets it back")
	for range 3 {
		d, err := l.Allow(ctx, r, "k")
		require.NoError(t, err)
		assert.False(t, d.Degraded(), "after the probe found Redis: %v", d)
		assert.NotEqual(t, local.ReasonUnavailable, d.Reason(), "after the probe found Redis: %v", d)
	}
}
