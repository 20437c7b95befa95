package syncer_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/internal/clocktest"
	"github.com/hybridlimit/hybridlimit/internal/localx"
	"github.com/hybridlimit/hybridlimit/internal/redistest"
	"github.com/hybridlimit/hybridlimit/local"
	"github.com/hybridlimit/hybridlimit/syncer"
)

// garbage pre-fills the decision buffers: a call must overwrite every entry
// it is given.
var garbage = localx.Outcome{Allowed: true, Reason: 99, Capacity: -1, Remaining: -77, ResetAfter: -1, RetryAfter: -1}.Decision()

func newLocal(t testing.TB, lim localx.Limit) *local.Limiter {
	t.Helper()
	l, err := local.New(lim.Params(), local.Config{Clock: clocktest.Wall{}, NoBackgroundSweep: true})
	require.NoError(t, err)
	t.Cleanup(func() { l.Close() })
	return l
}

// slotOf asks Redis for the slot of a key name (CLUSTER KEYSLOT), and checks
// that syncer computes the same.
func slotOf(t testing.TB, c *redis.ClusterClient, name string) int64 {
	t.Helper()
	s, err := c.ClusterKeySlot(context.Background(), name).Result()
	require.NoError(t, err)
	require.Equal(t, s, int64(syncer.Slot(name)), "slot of %q: syncer's, want Redis's", name)
	return s
}

// masterOf returns the address of the master serving a key name.
func masterOf(t testing.TB, c *redis.ClusterClient, name string) string {
	t.Helper()
	n, err := c.MasterForKey(context.Background(), name)
	require.NoError(t, err)
	return n.Options().Addr
}

// apartRules returns rules named base0, base1, … (one per Params) whose
// state keys for key live on pairwise different masters of the Cluster:
// a multi-rule decision over them takes the reserve-then-commit path.
func apartRules(t testing.TB, c *redis.ClusterClient, ks syncer.Keyspace, key string, ps ...local.Limit) []*syncer.Rule {
	t.Helper()
	var rules []*syncer.Rule
	used := map[string]bool{}
	for i := 0; len(rules) < len(ps); i++ {
		require.LessOrEqual(t, i, 1000, "no rule names on distinct masters")
		r := mustRule(t, fmt.Sprintf("m%d", i), ps[len(rules)])
		s, _ := syncer.Keys(&ks, r, key)
		slotOf(t, c, s)
		if m := masterOf(t, c, s); !used[m] {
			used[m] = true
			rules = append(rules, r)
		}
	}
	return rules
}

type mreq struct {
	rule int
	key  string
	n    int64
}

type mstep struct {
	at        time.Duration // after the scenario's start
	reqs      []mreq
	ok        bool
	remaining []int64 // when set: each request's Remaining, checked by hand
}

// TestMultiDecisions runs multi-rule scenarios through Redis (one server:
// one script; a Cluster: reserve, then commit or refund, across nodes) and
// through package local, which is exact: every decision must be the same,
// and a refused call charges nothing.
func TestMultiDecisions(t *testing.T) {
	params := []local.Limit{
		{Algorithm: local.TokenBucket, Quota: 5, Window: time.Second},
		{Algorithm: local.FixedWindow, Quota: 3, Window: time.Minute},
		{Algorithm: local.SlidingWindowLog, Quota: 4, Window: 10 * time.Second},
		{Algorithm: local.GCRA, Quota: 2, Window: time.Second, Burst: 4},
		{Algorithm: local.SlidingWindowCounter, Quota: 6, Window: time.Minute},
	}
	const tb, fw, lg, gc, ct = 0, 1, 2, 3, 4
	steps := []mstep{
		// all or none, on one key
		{0, []mreq{{tb, "k", 1}, {fw, "k", 1}}, true, nil},
		{0, []mreq{{tb, "k", 1}, {fw, "k", 1}}, true, nil},
		{0, []mreq{{tb, "k", 1}, {fw, "k", 1}}, true, []int64{2, 0}},
		{0, []mreq{{tb, "k", 1}, {fw, "k", 1}}, false, []int64{2, 0}}, // the window is full: the bucket is not charged
		{0, []mreq{{tb, "k", 0}, {fw, "k", 0}}, true, []int64{2, 0}},
		{0, []mreq{{fw, "k", 1}, {tb, "k", 2}}, false, []int64{0, 2}},
		{0, []mreq{{tb, "k", 2}}, true, []int64{0}},
		// the same rule and key twice: the costs are summed
		{0, []mreq{{fw, "d", 1}, {fw, "d", 1}}, true, []int64{1, 1}},
		{0, []mreq{{fw, "d", 1}, {tb, "d", 1}, {fw, "d", 1}}, false, []int64{1, 5, 1}},
		{0, []mreq{{tb, "d", 0}, {fw, "d", 0}}, true, []int64{5, 1}},
		{0, []mreq{{fw, "d", 1}, {tb, "d", 5}}, true, []int64{0, 0}},
		// a cost no state can admit refuses everything, charging nothing
		{0, []mreq{{tb, "c", 6}, {fw, "c", 1}}, false, nil},
		{0, []mreq{{fw, "c", 2}, {fw, "c", 2}, {tb, "c", 1}}, false, nil},
		{0, []mreq{{tb, "c", -1}, {fw, "c", 1}}, false, nil},
		{0, []mreq{{tb, "c", 0}, {fw, "c", 0}}, true, []int64{5, 3}},
		{0, []mreq{{tb, "c", 5}, {fw, "c", 3}}, true, []int64{0, 0}},
		// later: the bucket refilled, the window did not
		{time.Second, []mreq{{tb, "c", 5}, {fw, "c", 1}}, false, []int64{5, 0}},
		{time.Minute, []mreq{{tb, "c", 5}, {fw, "c", 3}}, true, []int64{0, 0}},
		// five algorithms, several keys
		{0, []mreq{{lg, "e", 2}, {gc, "e", 2}, {ct, "e", 3}, {tb, "f", 1}, {fw, "g", 1}}, true, nil},
		{500 * time.Millisecond, []mreq{{lg, "e", 2}, {gc, "e", 3}, {ct, "e", 3}}, true, nil},
		{600 * time.Millisecond, []mreq{{lg, "e", 1}, {gc, "e", 1}, {ct, "e", 1}}, false, nil},
		{2 * time.Second, []mreq{{lg, "e", 0}, {gc, "e", 0}, {ct, "e", 0}}, true, []int64{0, 3, 0}},
		{11 * time.Second, []mreq{{lg, "e", 4}, {gc, "e", 4}, {ct, "e", 1}}, false, nil},
		{70 * time.Second, []mreq{{lg, "e", 4}, {gc, "e", 4}, {ct, "e", 3}}, false, nil}, // the counter weighs the last minute in
		{130 * time.Second, []mreq{{lg, "e", 4}, {gc, "e", 4}, {ct, "e", 3}}, true, nil},
	}
	topologies(t, func(t *testing.T, c redis.UniversalClient) {
		ctx := context.Background()
		ks := syncer.Keyspace{Prefix: redistest.Prefix(t)}
		cen := newCentral(t, c, ks)
		var rules []*syncer.Rule
		if cc, ok := c.(*redis.ClusterClient); ok {
			// Three masters: the first three rules on different ones.
			rules = apartRules(t, cc, ks, "k", params[:3]...)
			for i, p := range params[3:] {
				rules = append(rules, mustRule(t, fmt.Sprintf("x%d", i), p))
			}
		} else {
			for i, p := range params {
				rules = append(rules, mustRule(t, fmt.Sprintf("x%d", i), p))
			}
		}
		lims := make([]*local.Limiter, len(rules))
		for i, r := range rules {
			lims[i] = newLocal(t, syncer.RuleLimit(r))
		}
		// A fresh minute, so the fixed windows do not roll mid-scenario.
		start := time.Now().Truncate(time.Minute).Add(time.Minute + time.Second)
		for i, s := range steps {
			now := start.Add(s.at)
			reqs := make([]syncer.Request, len(s.reqs))
			lreqs := make([]local.Request, len(s.reqs))
			for j, q := range s.reqs {
				reqs[j] = syncer.Request{Rule: rules[q.rule], Key: q.key, N: q.n}
				lreqs[j] = local.Request{Limiter: lims[q.rule], Key: q.key, N: q.n}
			}
			got, want := make([]local.Decision, len(reqs)+1), make([]local.Decision, len(reqs)+1)
			for j := range got {
				got[j], want[j] = garbage, garbage
			}
			ok, err := syncer.AllowMulti(ctx, cen, now, reqs, got)
			require.NoError(t, err, "step %d", i)
			wok := local.AllowMultiAt(now, lreqs, want)
			assert.Equal(t, s.ok, ok, "step %d %v: redis's verdict", i, s.reqs)
			assert.Equal(t, s.ok, wok, "step %d %v: local's verdict", i, s.reqs)
			for j := range reqs {
				assert.Equal(t, localx.OutcomeOf(want[j]), localx.OutcomeOf(got[j]), "step %d %v, request %d: redis, want local's decision", i, s.reqs, j)
				if s.remaining != nil {
					assert.Equal(t, s.remaining[j], got[j].Remaining(), "step %d %v, request %d: remaining", i, s.reqs, j)
				}
				if !ok {
					assert.False(t, got[j].Allowed(), "step %d: refused, but request %d is marked allowed", i, j)
				}
			}
			assert.Equal(t, localx.OutcomeOf(garbage), localx.OutcomeOf(got[len(reqs)]), "step %d: wrote past the requests", i)
			// Whatever the decision, the state is local's: nothing charged
			// by a refusal, everything by an admission.
			for j, q := range s.reqs {
				d, err := syncer.AllowNAt(ctx, cen, now, rules[q.rule], q.key, 0)
				require.NoError(t, err)
				w := lims[q.rule].AllowNAt(now, q.key, 0)
				assert.Equal(t, w.Remaining(), d.Remaining(), "step %d, after: request %d's rule's remaining in Redis, want local's", i, j)
			}
		}
		t.Run("out shorter than reqs", func(t *testing.T) {
			assert.Panics(t, func() {
				syncer.AllowMulti(ctx, cen, start, []syncer.Request{{Rule: rules[0], Key: "p", N: 1}, {Rule: rules[1], Key: "p", N: 1}}, make([]local.Decision, 1))
			})
		})
		t.Run("empty", func(t *testing.T) {
			ok, err := syncer.AllowMulti(ctx, cen, time.Time{}, nil, nil)
			assert.NoError(t, err, "AllowMulti(nil)")
			assert.True(t, ok, "AllowMulti(nil)")
		})
	})
}

// TestMultiInvalidCostSameKey: a negative cost refuses the call; another
// request on the same rule and key still gets a decision (local reports the
// key as it stands), not whatever the caller's buffer held.
func TestMultiInvalidCostSameKey(t *testing.T) {
	topologies(t, func(t *testing.T, c redis.UniversalClient) {
		cen := newCentral(t, c, syncer.Keyspace{})
		r := mustRule(t, "r", local.Limit{Algorithm: local.TokenBucket, Quota: 5, Window: time.Second})
		o := mustRule(t, "o", local.Limit{Algorithm: local.FixedWindow, Quota: 3, Window: time.Minute})
		lr, lo := newLocal(t, syncer.RuleLimit(r)), newLocal(t, syncer.RuleLimit(o))
		now := time.Now()
		got, want := []local.Decision{garbage, garbage, garbage}, []local.Decision{garbage, garbage, garbage}
		ok, err := syncer.AllowMulti(context.Background(), cen, now, []syncer.Request{{Rule: r, Key: "k", N: -1}, {Rule: r, Key: "k", N: 1}, {Rule: o, Key: "k", N: 1}}, got)
		require.NoError(t, err, "AllowMultiAt")
		require.False(t, ok, "AllowMultiAt: want a refusal")
		local.AllowMultiAt(now, []local.Request{{Limiter: lr, Key: "k", N: -1}, {Limiter: lr, Key: "k", N: 1}, {Limiter: lo, Key: "k", N: 1}}, want)
		for i := range got {
			assert.Equal(t, localx.OutcomeOf(want[i]), localx.OutcomeOf(got[i]), "request %d: redis, want local's decision", i)
		}
	})
}

// multiHammer runs workers goroutines, each making tries multi-rule calls
// over rules at the time now, and returns how many were admitted.
func multiHammer(t *testing.T, cen *syncer.Central, now time.Time, rules []*syncer.Rule, key string, workers, tries int) int64 {
	var admitted atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	reqs := make([]syncer.Request, len(rules))
	for i, r := range rules {
		reqs[i] = syncer.Request{Rule: r, Key: key, N: 1}
	}
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out := make([]local.Decision, len(reqs))
			for range tries {
				ok, err := syncer.AllowMulti(context.Background(), cen, now, reqs, out)
				if err != nil {
					errs <- err
					return
				}
				if ok {
					admitted.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	return admitted.Load()
}

// charged returns how much of each rule's limit is used at now (time
// stands still: nothing refills).
func charged(t *testing.T, cen *syncer.Central, now time.Time, rules []*syncer.Rule, key string) []int64 {
	t.Helper()
	used := make([]int64, len(rules))
	for i, r := range rules {
		d, err := syncer.AllowNAt(context.Background(), cen, now, r, key, 0)
		require.NoError(t, err)
		used[i] = syncer.RuleLimit(r).MaxCost() - d.Remaining()
	}
	return used
}

var contentionPairs = []struct {
	name string
	a, b local.Limit
}{
	{"fixed and token bucket", local.Limit{Algorithm: local.FixedWindow, Quota: 30, Window: time.Hour},
		local.Limit{Algorithm: local.TokenBucket, Quota: 1, Window: time.Hour, Burst: 25}},
	{"log and gcra", local.Limit{Algorithm: local.SlidingWindowLog, Quota: 20, Window: time.Hour},
		local.Limit{Algorithm: local.GCRA, Quota: 1, Window: time.Hour, Burst: 24}},
	{"counter and leaky bucket", local.Limit{Algorithm: local.SlidingWindowCounter, Quota: 22, Window: time.Hour},
		local.Limit{Algorithm: local.LeakyBucket, Quota: 1, Window: time.Hour, Burst: 20}},
}

// TestMultiClusterContention: 16 goroutines decide two rules of one key, in
// different slots, as one (reserve, then commit or refund). Never more is
// admitted than either limit; at the end each rule has been charged exactly
// the admitted calls (no refund lost, none applied twice), and sequential
// calls then admit exactly what is left.
func TestMultiClusterContention(t *testing.T) {
	c := redistest.ClusterClient(t, redistest.ClusterAddrs(t))
	for _, tt := range contentionPairs {
		t.Run(tt.name, func(t *testing.T) {
			ks := syncer.Keyspace{Prefix: redistest.Prefix(t)}
			hc := &hookClient{UniversalClient: c} // c is closed by its own cleanup
			cen := newCentral(t, hc, ks)
			rules := apartRules(t, c, ks, "hot", tt.a, tt.b)
			now := time.Now().Truncate(time.Hour).Add(time.Hour + time.Minute)
			least := min(syncer.RuleLimit(rules[0]).MaxCost(), syncer.RuleLimit(rules[1]).MaxCost())
			admitted := multiHammer(t, cen, now, rules, "hot", 16, 8)
			require.LessOrEqual(t, admitted, least, "multi calls admitted, limits %d and %d", syncer.RuleLimit(rules[0]).MaxCost(), syncer.RuleLimit(rules[1]).MaxCost())
			require.Positive(t, admitted, "multi calls admitted")
			require.Positive(t, hc.pipes.Load(), "no pipeline: the rules in different slots did not take the reserve path")
			for i, u := range charged(t, cen, now, rules, "hot") {
				assert.Equal(t, admitted, u, "rule %v's charge, want the multi calls admitted", syncer.RuleLimit(rules[i]))
			}
			more := multiHammer(t, cen, now, rules, "hot", 1, int(least)+3)
			assert.Equal(t, least, admitted+more, "admitted %d under contention and %d after", admitted, more)
			for i, u := range charged(t, cen, now, rules, "hot") {
				assert.Equal(t, least, u, "at the end, rule %v's charge", syncer.RuleLimit(rules[i]))
			}
		})
	}
}

// TestMultiSharedKeyTag: with SharedKeyTag the rules of one user key share
// a hash tag, so a multi-rule decision is one script on one node even on a
// Cluster: exact under contention, no false rejection.
func TestMultiSharedKeyTag(t *testing.T) {
	c := redistest.ClusterClient(t, redistest.ClusterAddrs(t))
	for _, tt := range contentionPairs {
		t.Run(tt.name, func(t *testing.T) {
			ks := syncer.Keyspace{Prefix: redistest.Prefix(t), SharedKeyTag: true}
			hc := &hookClient{UniversalClient: c} // c is closed by its own cleanup
			cen := newCentral(t, hc, ks)
			rules := []*syncer.Rule{mustRule(t, "a", tt.a), mustRule(t, "b", tt.b), mustRule(t, "c", tt.a)}
			for _, key := range []string{"hot", "", "{x}"} {
				var slots []int64
				for _, r := range rules {
					s, l := syncer.Keys(syncer.CentralKeyspace(cen), r, key)
					slots = append(slots, slotOf(t, c, s), slotOf(t, c, l))
				}
				for _, s := range slots {
					require.Equal(t, slots[0], s, "key %q: the rules' keys are in slots %v, want one", key, slots)
				}
			}
			// Without the shared tag the same rules spread over slots.
			plain := syncer.Keyspace{Prefix: ks.Prefix}
			sa, _ := syncer.Keys(&plain, rules[0], "hot")
			sb, _ := syncer.Keys(&plain, rules[1], "hot")
			if slotOf(t, c, sa) == slotOf(t, c, sb) {
				t.Logf("rules a and b share a slot without SharedKeyTag too (chance)")
			}
			now := time.Now().Truncate(time.Hour).Add(time.Hour + time.Minute)
			least := min(syncer.RuleLimit(rules[0]).MaxCost(), syncer.RuleLimit(rules[1]).MaxCost())
			admitted := multiHammer(t, cen, now, rules[:2], "hot", 16, 8)
			assert.Equal(t, least, admitted, "multi calls admitted (one script: no false rejection)")
			assert.Zero(t, hc.pipes.Load(), "pipelines: a multi-rule decision over one key under SharedKeyTag must be one script")
			for i, u := range charged(t, cen, now, rules[:2], "hot") {
				assert.Equal(t, admitted, u, "rule %v's charge", syncer.RuleLimit(rules[i]))
			}
		})
	}
}

// hookClient wraps a client and counts its pipelines. Syncer takes it for
// a Cluster (it is not a *redis.Client): multi-rule decisions over several
// slots reserve, then commit or refund, with one pipeline each. before runs
// ahead of the n-th pipeline (from 1), which puts another request
// deterministically between a reservation and its refund, as a concurrent
// client on a Cluster may.
type hookClient struct {
	redis.UniversalClient
	pipes  atomic.Int64
	before func(n int64)
}

func (h *hookClient) Pipeline() redis.Pipeliner {
	if n := h.pipes.Add(1); h.before != nil {
		h.before(n)
	}
	return h.UniversalClient.Pipeline()
}

// TestMultiRefundInterleaved puts a request between the reservation of a
// multi-rule decision (which another rule refuses) and its refund: the
// refund must not hand back more than the reservation still holds. With the
// reservation refunded, at most what the limit admits without it may be
// admitted at that instant.
func TestMultiRefundInterleaved(t *testing.T) {
	srv := redistest.Start(t)
	base := redistest.Client(t, srv.Addr)
	for _, a := range localx.Algorithms() {
		t.Run(a.String(), func(t *testing.T) {
			ctx := context.Background()
			p := local.Limit{Algorithm: a, Quota: 10, Window: time.Second}
			if a == local.TokenBucket || a == local.LeakyBucket || a == local.GCRA {
				p = local.Limit{Algorithm: a, Quota: 1000, Window: time.Second, Burst: 10} // one token per ms
			}
			ks := syncer.Keyspace{Prefix: redistest.Prefix(t)}
			hc := &hookClient{UniversalClient: redis.NewClient(redistest.Options(srv.Addr))}
			t.Cleanup(func() { hc.Close() })
			split, err := syncer.NewCentral(syncer.CentralConfig{Client: hc, Keyspace: ks, Timeout: 5 * time.Second})
			require.NoError(t, err)
			direct := newCentral(t, base, ks)
			require.NoError(t, syncer.Preload(ctx, direct)) // no NOSCRIPT retry: one pipeline per exchange
			x := mustRule(t, "x", p)
			full := mustRule(t, "full", local.Limit{Algorithm: local.FixedWindow, Quota: 1, Window: time.Hour})
			t0 := time.Now().Truncate(time.Second).Add(time.Second + 100*time.Millisecond)
			t1 := t0.Add(2 * time.Millisecond) // the one reserved token has come back
			d, err := syncer.AllowNAt(ctx, direct, t0, full, "k", 1)
			require.NoError(t, err, "filling the other rule")
			require.True(t, d.Allowed(), "filling the other rule: %+v", d)
			var admitted int64
			var hookErr error
			hc.before = func(n int64) {
				if n != 2 { // 1: the reservations; 2: the refund
					return
				}
				d, err := syncer.AllowNAt(ctx, direct, t1, x, "k", syncer.RuleLimit(x).MaxCost())
				if err != nil {
					hookErr = err
				} else if d.Allowed() {
					admitted += syncer.RuleLimit(x).MaxCost()
				}
			}
			out := make([]local.Decision, 2)
			ok, err := syncer.AllowMulti(ctx, split, t0, []syncer.Request{{Rule: x, Key: "k", N: 1}, {Rule: full, Key: "k", N: 1}}, out)
			require.NoError(t, err, "multi")
			require.NoError(t, hookErr, "the request between reservation and refund")
			require.False(t, ok, "multi: want a refusal")
			require.Equal(t, int64(2), hc.pipes.Load(), "pipelines (reserve, refund)")
			for range 2 * syncer.RuleLimit(x).MaxCost() {
				d, err := syncer.AllowNAt(ctx, direct, t1, x, "k", 1)
				require.NoError(t, err)
				if !d.Allowed() {
					break
				}
				admitted++
			}
			// What the rule admits at t1 when the refused call never happened.
			lim := newLocal(t, syncer.RuleLimit(x))
			var want int64
			if lim.AllowNAt(t1, "k", syncer.RuleLimit(x).MaxCost()).Allowed() {
				want += syncer.RuleLimit(x).MaxCost()
			}
			for lim.AllowNAt(t1, "k", 1).Allowed() {
				want++
			}
			assert.LessOrEqual(t, admitted, want, "admitted at t0+2ms once the refused multi call was refunded: want at most the limit without it")
		})
	}
}
