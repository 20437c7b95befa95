package hybrid_test

import (
	"context"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/hybridlimit/hybridlimit/hybrid"
	"github.com/hybridlimit/hybridlimit/internal/clocktest"
	"github.com/hybridlimit/hybridlimit/internal/hybridsim"
	"github.com/hybridlimit/hybridlimit/internal/localx"
	"github.com/hybridlimit/hybridlimit/internal/redistest"
	"github.com/hybridlimit/hybridlimit/local"
)

// TestUnregister: once a rule is unregistered, every *Rule of it is unknown
// to decisions, SetLimit and Unregister, and it leaves Stats; its name
// can be registered again, as a new rule.
func TestUnregister(t *testing.T) {
	ctx := context.Background()
	addr := redistest.Addr(t)
	for _, mode := range []hybrid.Mode{hybrid.Local, hybrid.Central, hybrid.Hybrid} {
		t.Run(mode.String(), func(t *testing.T) {
			clk := clocktest.New(epoch2030)
			l := newNode(t, nodeConfig(redistest.Client(t, addr), redistest.Prefix(t), clk, "a", 1))
			rule := hybrid.Rule{Name: "r", Limit: fixed(10, time.Minute), Mode: mode}
			r := mustRegister(t, l, rule, mode)
			again := mustRegister(t, l, rule, mode) // the same registration
			other := mustRegister(t, l, hybrid.Rule{Name: "other", Limit: fixed(10, time.Minute), Mode: mode}, mode)
			_, err := l.Allow(ctx, r, "k")
			require.NoError(t, err)
			require.Equal(t, 2, l.Stats().Rules)

			require.NoError(t, l.Unregister(r))
			for _, rr := range []*hybrid.Rule{r, again} {
				_, err = l.Allow(ctx, rr, "k")
				assert.ErrorIs(t, err, hybrid.ErrUnknownRule, "a decision")
				out := make([]hybrid.Decision, 2)
				_, err = l.AllowMulti(ctx, []hybrid.Request{{Rule: other, Key: "k", N: 1}, {Rule: rr, Key: "k", N: 1}}, out)
				assert.ErrorIs(t, err, hybrid.ErrUnknownRule, "a multi-rule decision")
				assert.ErrorIs(t, l.SetLimit(rr, fixed(20, time.Minute)), hybrid.ErrUnknownRule, "SetLimit")
				assert.ErrorIs(t, l.Unregister(rr), hybrid.ErrUnknownRule, "Unregister again")
			}
			assert.ErrorIs(t, l.Unregister(nil), hybrid.ErrUnknownRule)
			assert.Equal(t, 1, l.Stats().Rules)
			d, err := l.Allow(ctx, other, "k")
			require.NoError(t, err, "the other rule decides as before")
			assert.True(t, d.Allowed())

			fresh := mustRegister(t, l, hybrid.Rule{Name: "r", Limit: fixed(20, time.Minute), Mode: mode}, mode)
			_, err = l.Allow(ctx, fresh, "k")
			require.NoError(t, err, "registered again, under another limit")
			_, err = l.Allow(ctx, r, "k")
			assert.ErrorIs(t, err, hybrid.ErrUnknownRule, "the old *Rule stays unknown")
		})
	}
}

// TestUnregisterReportsUsage: a hybrid rule's keys report what they
// admitted and give their leases back at the first round after the rule
// is unregistered, then the syncer forgets them: what the node admitted is
// in Redis, and holds no grant there.
func TestUnregisterReportsUsage(t *testing.T) {
	ctx := context.Background()
	addr := redistest.Addr(t)
	const w = time.Minute
	for _, tc := range []struct {
		name  string
		lease bool // a lease was fetched before the last requests
	}{
		{"cold start", false}, // admitted within the allowance: debt
		{"lease", true},       // admitted within a grant, which goes back
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := clocktest.New(epoch2030)
			c := redistest.Client(t, addr)
			cfg := nodeConfig(c, redistest.Prefix(t), clk, "a", 1)
			l := newNode(t, cfg)
			r := mustRegister(t, l, hybrid.Rule{Name: "r", Limit: fixed(1000, w)}, hybrid.Hybrid)
			admitted := 0
			allow := func(n int) {
				for range n {
					d, err := l.Allow(ctx, r, "k")
					require.NoError(t, err)
					require.True(t, d.Allowed())
					admitted++
				}
			}
			allow(3)
			if tc.lease {
				syncOK(t, l, clk)
				clk.Add(time.Millisecond)
				require.Greater(t, readWindow(t, c, cfg.Keyspace, "r", "k", w, windowStart(clk, w)).g["a"], int64(3), "a grant")
				allow(5)
			}

			require.NoError(t, l.Unregister(r))
			st := syncOK(t, l, clk)
			assert.Equal(t, 1, st.Synced, "the key's last exchange")
			ws := readWindow(t, c, cfg.Keyspace, "r", "k", w, windowStart(clk, w))
			require.True(t, ws.ok)
			assert.Equal(t, int64(admitted), ws.u["a"], "what the node admitted, reported")
			assert.LessOrEqual(t, ws.g["a"], int64(admitted), "no grant left unused")
			assert.Equal(t, int64(admitted), ws.R, "the window's budget committed: the use alone")

			clk.Add(time.Millisecond)
			st = syncOK(t, l, clk)
			assert.Zero(t, st.Keys, "the syncer forgot the key")
			assert.Zero(t, st.Synced)
		})
	}
}

// TestUnregisterBucket: a bucket rule's keys, shares held, are exchanged
// once more after the rule is unregistered, and forgotten.
func TestUnregisterBucket(t *testing.T) {
	ctx := context.Background()
	clk := clocktest.New(epoch2030)
	l := newNode(t, nodeConfig(redistest.Client(t, redistest.Addr(t)), redistest.Prefix(t), clk, "a", 1))
	lim := local.Limit{Algorithm: local.GCRA, Quota: 1000, Window: time.Second, Burst: 100}
	r := mustRegister(t, l, hybrid.Rule{Name: "b", Limit: lim}, hybrid.Hybrid)
	for i := range 20 {
		for range 5 {
			_, err := l.Allow(ctx, r, "k")
			require.NoError(t, err)
		}
		syncOK(t, l, clk)
		clk.Add(10 * time.Millisecond)
		if i == 10 {
			require.NotZero(t, syncOK(t, l, clk).Keys)
		}
	}
	require.NoError(t, l.Unregister(r))
	st := syncOK(t, l, clk)
	assert.Equal(t, 1, st.Synced, "the share given back")
	clk.Add(10 * time.Millisecond)
	st = syncOK(t, l, clk)
	assert.Zero(t, st.Keys, "the syncer forgot the key")
}

// TestUnregisterMetrics: an unregistered rule's series leave the Limiter's
// metrics at the next collection, lease waits included, and the others'
// stay.
func TestUnregisterMetrics(t *testing.T) {
	ctx := context.Background()
	reader := sdkmetric.NewManualReader()
	clk := clocktest.New(epoch2030)
	cfg := nodeConfig(redistest.Client(t, redistest.Addr(t)), redistest.Prefix(t), clk, "a", 1)
	cfg.MeterProvider = sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	l := newNode(t, cfg)
	var gone, kept []*hybrid.Rule
	for _, mode := range []hybrid.Mode{hybrid.Local, hybrid.Central, hybrid.Hybrid} {
		gone = append(gone, mustRegister(t, l, hybrid.Rule{Name: "gone-" + mode.String(), Limit: fixed(10, time.Minute), Mode: mode}, mode))
		kept = append(kept, mustRegister(t, l, hybrid.Rule{Name: "kept-" + mode.String(), Limit: fixed(10, time.Minute), Mode: mode}, mode))
	}
	// A hybrid decision that waits for its key's exchange: a lease wait.
	waiter := mustRegister(t, l, hybrid.Rule{Name: "gone-waiter", Limit: fixed(10, time.Minute), Wait: hybrid.WaitFirst}, hybrid.Hybrid)
	done := make(chan hybrid.Decision)
	go func() {
		d, _ := l.Allow(ctx, waiter, "k")
		done <- d
	}()
	for !hybridsim.SyncFirstWanted(l) {
		runtime.Gosched() // the request is about to ask for its exchange
	}
	_, err := hybridsim.SyncFirstAt(ctx, l, clk.Now())
	require.NoError(t, err)
	require.True(t, localx.Waited(<-done))
	for _, r := range append(gone, kept...) {
		_, err := l.Allow(ctx, r, "k")
		require.NoError(t, err)
	}
	series := func() map[string]int {
		out := map[string]int{}
		for name, m := range collect(t, reader) {
			for _, s := range attrSets(m) {
				if v, ok := s.Value("rule"); ok {
					out[v.AsString()]++
					if name == "hybridlimit.lease.waits" {
						out["waits:"+v.AsString()]++
					}
				}
			}
		}
		return out
	}
	before := series()
	require.NotZero(t, before["waits:gone-waiter"], "the wait counted")
	for _, r := range append(gone, waiter) {
		require.NotZero(t, before[r.Name], "%s reported", r.Name)
		require.NoError(t, l.Unregister(r))
	}
	after := series()
	for _, r := range append(gone, waiter) {
		assert.Zero(t, after[r.Name], "a series of %s after Unregister", r.Name)
	}
	for _, r := range kept {
		assert.Equal(t, before[r.Name], after[r.Name], "the series of %s", r.Name)
	}
	c := collect(t, reader)
	assert.Equal(t, map[string]int64{"mode=local": 1, "mode=central": 1, "mode=hybrid": 1}, int64Points(t, c, "hybridlimit.rules"))
	assert.Equal(t, l.Stats().Bytes, int64Points(t, c, "hybridlimit.memory")[""])
}
