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
	"github.com/hybridlimit/hybridlimit/internal/redistest"
	"github.com/hybridlimit/hybridlimit/local"
	"github.com/hybridlimit/hybridlimit/syncer"
)

// collected is one collection, by instrument name.
type collected map[string]metricdata.Metrics

func collect(t *testing.T, r *sdkmetric.ManualReader) collected {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := r.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	out := collected{}
	for _, sm := range rm.ScopeMetrics {
		if sm.Scope.Name != "github.com/hybridlimit/hybridlimit/hybrid" {
			t.Errorf("meter named %q, want the package's import path", sm.Scope.Name)
		}
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
	if !ok {
		t.Fatalf("no %s", name)
	}
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
		t.Fatalf("%s is %T", name, m.Data)
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
	clk := newFakeClock(epoch2030.Add(100 * time.Millisecond))
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
		want[r.Name+","+l.Mode(r).String()+","+res]++
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
		if len(kv) != 3 || kv["rule"] == "" || kv["mode"] == "" || kv["result"] == "" {
			t.Errorf("decisions point with attributes %q, want rule, mode and result", attrs)
		}
		got[kv["rule"]+","+kv["mode"]+","+kv["result"]] += v
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("decisions{%s} = %d, want %d", k, got[k], v)
		}
	}
	for k, v := range got {
		if _, ok := want[k]; !ok {
			t.Errorf("decisions{%s} = %d, not decided", k, v)
		}
	}
	if n := int64Points(t, c, "hybridlimit.sync.rounds")[""]; n != rounds {
		t.Errorf("sync.rounds = %d, want %d", n, rounds)
	}
	if n := int64Points(t, c, "hybridlimit.sync.keys")[""]; n != synced || n == 0 {
		t.Errorf("sync.keys = %d, want %d (> 0)", n, synced)
	}
	if h, ok := c["hybridlimit.sync.duration"].Data.(metricdata.Histogram[float64]); !ok || len(h.DataPoints) != 1 || int64(h.DataPoints[0].Count) != rounds {
		t.Errorf("sync.duration: %+v, want a histogram of %d rounds", c["hybridlimit.sync.duration"].Data, rounds)
	} else if u := c["hybridlimit.sync.duration"].Unit; u != "s" {
		t.Errorf("sync.duration unit %q, want s", u)
	}
	keysHeld := int64Points(t, c, "hybridlimit.keys")
	if n := keysHeld["mode=hybrid,rule=hyb"]; n != int64(len(keys)) {
		t.Errorf("keys{hyb} = %d, want %d: %v", n, len(keys), keysHeld)
	}
	if n := keysHeld["mode=local,rule=loc"]; n != int64(len(keys)) {
		t.Errorf("keys{loc} = %d, want %d: %v", n, len(keys), keysHeld)
	}
	if up := int64Points(t, c, "hybridlimit.redis.available")[""]; up != 1 {
		t.Errorf("redis.available = %d with Redis up", up)
	}
	noUserKeys(t, c, keys)

	// Redis goes away: rounds fail (three in a row open the breaker), the
	// policy decides, and the gauge says so.
	srv.Kill()
	l.Allow(ctx, rules[0], "new-key")
	for range 3 {
		clk.Add(10 * time.Millisecond)
		if _, err := l.SyncAt(ctx, clk.Now()); err == nil {
			t.Fatal("SyncAt with Redis killed: no error")
		}
	}
	// A new key: its cold-start allowance, then the policy.
	var byPolicy int64
	for range 200 {
		d, err := l.Allow(ctx, rules[0], keys[1]+"-outage")
		if err != nil {
			t.Fatalf("a decision with Redis killed: %v, want none: the policy decides", err)
		}
		if d.Degraded() {
			byPolicy++
		}
	}
	c = collect(t, reader)
	if up := int64Points(t, c, "hybridlimit.redis.available")[""]; up != 0 {
		t.Errorf("redis.available = %d after three failed rounds", up)
	}
	if n := int64Points(t, c, "hybridlimit.sync.errors")[""]; n < 1 {
		t.Errorf("sync.errors = %d after a failed round", n)
	}
	if n := int64Points(t, c, "hybridlimit.fallback.decisions")["rule=hyb"]; n != byPolicy || n == 0 {
		t.Errorf("fallback.decisions{hyb} = %d after %d decisions by the policy", n, byPolicy)
	}
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
					if strings.Contains(v, k) || strings.Contains(string(kv.Key), k) || (len(v) >= 6 && strings.Contains(k, v)) {
						t.Errorf("%s: attribute %s=%q carries the user key %q", name, kv.Key, v, k)
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
	if _, err := l.Allow(ctx, r, "k"); err != nil {
		t.Fatal(err)
	}
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
