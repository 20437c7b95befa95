package httplimit_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/hybridlimit/hybridlimit/hybrid"
	"github.com/hybridlimit/hybridlimit/hybrid/httplimit"
	"github.com/hybridlimit/hybridlimit/internal/clocktest"
	"github.com/hybridlimit/hybridlimit/internal/hybridsim"
	"github.com/hybridlimit/hybridlimit/internal/redistest"
)

// TestSetRulesUnregisters: the hybrid rules of a rule SetRules removes, its
// overrides' included, leave the Limiter; a set refused leaves none of the
// rules it registered behind.
func TestSetRulesUnregisters(t *testing.T) {
	l := newLimiter(t, clocktest.New(t0))
	a, b := perIP("a", "/a", 10, time.Minute), perIP("b", "/b", 10, time.Minute)
	b.Overrides = map[string]int64{"pro": 100, "key-1": 1}
	m, err := httplimit.New(l, httplimit.Config{Rules: []httplimit.Rule{a, b}})
	require.NoError(t, err)
	require.Equal(t, 4, l.Stats().Rules, "a, b and b's two overrides")

	require.NoError(t, m.SetRules([]httplimit.Rule{a}))
	assert.Equal(t, 1, l.Stats().Rules, "b and its overrides unregistered")

	c := perIP("c", "/c", 10, time.Minute)
	c.Overrides = map[string]int64{"pro": 100}
	bad := perIP("d", "/d", 10, time.Minute)
	bad.Mode = hybrid.Central // the Limiter has no Redis: Register refuses it
	require.Error(t, m.SetRules([]httplimit.Rule{a, c, bad}))
	assert.Equal(t, 1, l.Stats().Rules, "c and its override, registered before d was refused, are gone")
	assert.Equal(t, []httplimit.Rule{a}, m.Rules())
}

// TestSetRulesUnderRequest: a request that matched a rule which SetRules
// removes before its decision is decided on the rules SetRules put in
// force, not let through as the Limiter's misuse.
func TestSetRulesUnderRequest(t *testing.T) {
	l := newLimiter(t, clocktest.New(t0))
	old := httplimit.Rule{ID: "old", Key: httplimit.KeyUser, Endpoint: "/", Algorithm: hybrid.FixedWindow, Quota: 1, Window: time.Minute}
	next := old
	next.ID, next.Quota = "next", 5
	var m *httplimit.Middleware
	swapped := false
	mp, read := meterReader()
	var logs strings.Builder
	m, err := httplimit.New(l, httplimit.Config{
		Rules: []httplimit.Rule{old}, MeterProvider: mp,
		Logger: slog.New(slog.NewTextHandler(&logs, nil)),
		UserFunc: func(*http.Request) (string, bool) {
			if !swapped { // between the request's match and its decision
				swapped = true
				require.NoError(t, m.SetRules([]httplimit.Rule{next}))
			}
			return "u", true
		},
	})
	require.NoError(t, err)
	w := httptest.NewRecorder()
	m.Handler(okHandler).ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/", nil))
	require.True(t, swapped)
	assert.Equal(t, http.StatusOK, w.Code)
	assert.Equal(t, "5", w.Header().Get("X-RateLimit-Limit"), "decided by the rule in force")
	assert.Equal(t, "4", w.Header().Get("X-RateLimit-Remaining"))
	assert.Zero(t, read(t, "hybridlimit.http.errors"), "not the Limiter's misuse")
	assert.Empty(t, logs.String())
	assert.Equal(t, 1, l.Stats().Rules)
}

// TestRulesChurn loads and removes many rule IDs through SetRules, reload
// after reload, on a Limiter of Hybrid rules with the test Redis, and
// checks that rules that come and go release what they held: the live
// heap after a collection returns within 10% of what it was before (the
// baseline is measured after a first warm-up cycle of two reloads, which
// grows the maps that keep their room, the Limiter's and the syncer's, to
// what a reload needs); no metric series of a removed rule remains, nor
// any pushed to the SDK's overflow series; and each removed rule's key
// reported its use to Redis. Without -race it runs 100 reloads of 1,000
// new rules (100,000 IDs; batches of 1,000 keep a reload's live rules
// within the SDK's default cardinality limit, 2,000 series per
// instrument); with it, 5.
func TestRulesChurn(t *testing.T) {
	reloads, per := 100, 1000
	if raceEnabled {
		reloads = 5
	}
	ctx := context.Background()
	c := redistest.Client(t, redistest.Addr(t))
	ks := hybrid.Keyspace{Prefix: redistest.Prefix(t)}
	clk := clocktest.New(t0)
	reader := metric.NewManualReader()
	l, err := hybrid.New(hybridsim.Virtual(hybrid.Config{
		Redis: c, Keyspace: ks, Clock: clk,
		MeterProvider: metric.NewMeterProvider(metric.WithReader(reader)),
		Sync:          hybrid.SyncConfig{Nodes: 1},
	}))
	require.NoError(t, err)
	t.Cleanup(func() { l.Close() })
	base := []httplimit.Rule{perIP("base-a", "/a", 1e6, time.Minute), perIP("base-b", "/b", 1e6, time.Minute)}
	m, err := httplimit.New(l, httplimit.Config{Rules: base})
	require.NoError(t, err)
	h := m.Handler(okHandler)
	request := func(path string) { requestDecided(t, h, path) }
	id := func(gen, i int) string { return "g" + strconv.Itoa(gen) + "-r" + strconv.Itoa(i) }
	rulesOf := func(gen int) []httplimit.Rule {
		rules := slices.Clone(base)
		for i := range per {
			rules = append(rules, perIP(id(gen, i), "/r/"+id(gen, i), 100, time.Minute))
		}
		return rules
	}
	series := 0
	collect := func() map[string]bool {
		var rules map[string]bool
		rules, series = seriesRules(t, reader)
		return rules
	}
	// reload puts gen's rules in force (baseOnly: the base rules alone):
	// the previous generation's are unregistered, and the round after it
	// reports what their keys admitted. A request to one of gen's rules
	// leaves its key with use unreported until the next reload removes it.
	const baseOnly = -1
	reload := func(gen int) {
		rules := base
		if gen != baseOnly {
			rules = rulesOf(gen)
		}
		require.NoError(t, m.SetRules(rules))
		_, err := hybridsim.SyncAt(ctx, l, clk.Now())
		require.NoError(t, err)
		request("/a")
		if gen != baseOnly {
			request("/r/" + id(gen, 0))
		}
		require.Len(t, collect(), len(rules), "series of the rules in force, and of no other")
	}

	reload(-2) // the warm-up: two reloads, and back to the base rules
	reload(-3)
	reload(baseOnly)
	reload(baseOnly)
	baseline := heapAfterGC()
	for gen := range reloads {
		reload(gen)
	}
	reload(baseOnly)
	_, err = hybridsim.SyncAt(ctx, l, clk.Now()) // the last keys, forgotten
	require.NoError(t, err)
	after := heapAfterGC()
	assert.LessOrEqual(t, float64(after), 1.10*float64(baseline), "the live heap returns within 10%% of its baseline")
	assert.Equal(t, map[string]bool{"base-a": true, "base-b": true}, collect(), "only the base rules' series")
	t.Logf("%d rule IDs came and went: live heap %d bytes after, %d before; %d series", reloads*per, after, baseline, series)
	st := l.Stats()
	assert.Equal(t, 2, st.Rules)
	for _, gen := range []int{0, reloads / 2, reloads - 1} {
		assert.Equal(t, "1", windowUse(t, c, ks, id(gen, 0), hybridsim.NodeID(l), clk.Now()), "what rule %s admitted, reported after its removal", id(gen, 0))
	}
}

// requestDecided sends h a GET for path, which a rule must decide and
// admit.
func requestDecided(t *testing.T, h http.Handler, path string) {
	t.Helper()
	r := httptest.NewRequest(http.MethodGet, path, nil)
	r.RemoteAddr = "192.0.2.1:5000"
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	require.Equal(t, http.StatusOK, w.Code, path)
	require.NotEmpty(t, w.Header().Get("X-RateLimit-Limit"), "%s decided", path)
}

// seriesRules checks that no series of reader's metrics is in overflow and
// returns the rules the series name, and how many series there are.
func seriesRules(t *testing.T, reader *metric.ManualReader) (map[string]bool, int) {
	t.Helper()
	var rm metricdata.ResourceMetrics
	require.NoError(t, reader.Collect(context.Background(), &rm))
	rules := map[string]bool{}
	series := 0
	for _, sm := range rm.ScopeMetrics {
		for _, mt := range sm.Metrics {
			for _, set := range attrSets(mt) {
				series++
				_, over := set.Value("otel.metric.overflow")
				require.False(t, over, "%s: a series in overflow", mt.Name)
				if v, ok := set.Value("rule"); ok {
					rules[v.AsString()] = true
				}
			}
		}
	}
	return rules, series
}

// heapAfterGC returns the bytes of live heap objects after a full
// collection, sync.Pools emptied (a second collection frees their victims).
func heapAfterGC() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// windowUse returns what node reported it used, in the window of now, of
// the one key of fixed-window rule rule, as Redis holds it.
func windowUse(t *testing.T, c *redis.Client, ks hybrid.Keyspace, rule, node string, now time.Time) string {
	t.Helper()
	keys, err := redistest.Keys(context.Background(), c, ks.Prefix+":{"+rule+":")
	require.NoError(t, err)
	require.Len(t, keys, 1, "rule %s's one key", rule)
	require.True(t, strings.HasSuffix(keys[0], ":m"), keys[0])
	wid := now.Truncate(time.Minute).UnixMicro()
	for _, part := range redistest.WindowLease(t, c, keys[0]) {
		if part["id"] == strconv.FormatInt(wid, 10) {
			return part["u."+node]
		}
	}
	return ""
}

// attrSets returns the attribute sets of m's data points.
func attrSets(m metricdata.Metrics) []attribute.Set {
	var out []attribute.Set
	switch d := m.Data.(type) {
	case metricdata.Sum[int64]:
		for _, p := range d.DataPoints {
			out = append(out, p.Attributes)
		}
	case metricdata.Gauge[int64]:
		for _, p := range d.DataPoints {
			out = append(out, p.Attributes)
		}
	case metricdata.Histogram[float64]:
		for _, p := range d.DataPoints {
			out = append(out, p.Attributes)
		}
	default:
		panic(fmt.Sprintf("attrSets: %T", d))
	}
	return out
}
