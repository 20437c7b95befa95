package syncer_test

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/internal/keyed"
	"github.com/hybridlimit/hybridlimit/internal/keyname"
	"github.com/hybridlimit/hybridlimit/internal/lease"
	"github.com/hybridlimit/hybridlimit/internal/redistest"
	"github.com/hybridlimit/hybridlimit/internal/synchook"
	"github.com/hybridlimit/hybridlimit/local"
	"github.com/hybridlimit/hybridlimit/syncer"
)

// roundCount is an Observer counting a node's exchanges.
type roundCount struct{ exchanges, registrations int }

func (c *roundCount) Round(st synchook.RoundStats) {
	c.exchanges += st.Synced + st.Failed
	if st.Registered {
		c.registrations++
	}
}

// redisStats is what the benchmark reads of INFO: each command's calls and
// usec (commandstats), and the server's CPU (user + sys, µs).
type redisStats struct {
	calls, usec map[string]int64
	cpu         int64
}

func readStats(b *testing.B, c redis.UniversalClient) redisStats {
	b.Helper()
	s := redisStats{calls: map[string]int64{}, usec: map[string]int64{}}
	info, err := c.Info(context.Background(), "commandstats", "cpu").Result()
	require.NoError(b, err)
	for line := range strings.SplitSeq(info, "\n") {
		line = strings.TrimSpace(line)
		if name, rest, ok := strings.Cut(line, ":"); ok && strings.HasPrefix(name, "cmdstat_") {
			for f := range strings.SplitSeq(rest, ",") {
				k, v, _ := strings.Cut(f, "=")
				n, _ := strconv.ParseInt(v, 10, 64)
				switch k {
				case "calls":
					s.calls[name[len("cmdstat_"):]] = n
				case "usec":
					s.usec[name[len("cmdstat_"):]] = n
				}
			}
		} else if ok && (name == "used_cpu_user" || name == "used_cpu_sys") {
			f, err := strconv.ParseFloat(rest, 64)
			require.NoError(b, err)
			s.cpu += int64(f * 1e6)
		}
	}
	return s
}

// BenchmarkLeaseExchange drives the lease exchanges of a workload shaped
// like the accuracy run's api-users on a private redis-server: many users,
// each limited to 100 per 10 s, most sending a few requests in one window,
// 1% ten times the limit, every request to one of 8 nodes at random, so
// that nearly every (user, node, window) exchanges once or twice. The 8
// Syncers run on one stepped clock (PassTime): first-lease rounds as keys
// ask, regular rounds every Interval. Each b.N is one window of fresh
// users. It reports Redis's cost from INFO: redis-us/exchange (the usec
// of EVALSHA per call), cpu-us/exchange and cpu-us/decision (the server's
// CPU, parsing and sockets included), calls/exchange (the commands the
// scripts ran), and exchanges/decision. Run it with -benchtime 1x or a few.
func BenchmarkLeaseExchange(b *testing.B) {
	for _, tc := range []struct {
		name string
		p    local.Limit
	}{
		{"fixed", local.Limit{Algorithm: local.FixedWindow, Quota: 100, Window: 10 * time.Second}},
		{"gcra", local.Limit{Algorithm: local.GCRA, Quota: 100, Window: 10 * time.Second, Burst: 10}},
	} {
		b.Run(tc.name, func(b *testing.B) { benchLeaseExchange(b, tc.p) })
	}
}

func benchLeaseExchange(b *testing.B, p local.Limit) {
	const nodes, users, abuseEach = 8, 2000, 100
	srv := redistest.Start(b)
	c := redistest.Client(b, srv.Addr)
	ctx := context.Background()
	rule, err := syncer.NewRule("users", p)
	require.NoError(b, err)
	clk := newClock()
	cfg := syncer.WithDefaults(syncer.SyncConfig{
		Client: c, Keyspace: syncer.Keyspace{Prefix: redistest.Prefix(b)}, Clock: clk, PassTime: true,
		Tuning: syncer.Tuning{Nodes: nodes, Timeout: 10 * time.Second},
	})
	type node struct {
		s         *syncer.Syncer
		lr        *lease.Rule
		store     *keyed.Store[lease.Lease]
		count     roundCount
		lastEarly time.Duration // the last regular or early round
		early     bool          // an early round is asked for
	}
	ns := make([]*node, nodes)
	for i := range ns {
		n := &node{}
		c := cfg
		c.NodeID, c.Observer = fmt.Sprintf("n%d", i), &n.count
		n.s, err = syncer.NewSyncer(c)
		require.NoError(b, err)
		b.Cleanup(func() { n.s.Close() })
		n.lr, err = n.s.LeaseRule(rule)
		require.NoError(b, err)
		n.store, err = keyed.New(keyed.Config{}, func(*lease.Lease, int64) bool { return false }, nil)
		require.NoError(b, err)
		ns[i] = n
	}
	window := p.Window
	rng := rand.New(rand.NewPCG(1, 2))
	type arrival struct {
		at         time.Duration
		user, node int
	}
	const step = time.Millisecond // FirstGap
	decisions := 0
	var t time.Duration // since the start
	start := clk.Now()
	// run is one window of simulated time: users whose sessions (one window
	// long) start in it, at a rate per window from a truncated Pareto (1 to
	// 10, shape 1.2), every hundredth user at ten times the limit; the
	// sessions of the previous window's users end in it. The loop of each
	// node as Syncer.Start runs it: a regular round every Interval, an
	// early one when asked and MinGap after the last, a first-lease round
	// when asked and FirstGap after the last.
	var pending []arrival
	run := func(gen int) {
		from := t
		cut := 1 - math.Pow(0.1, 1.2)
		for u := range users {
			rate := math.Pow(1-rng.Float64()*cut, -1/1.2)
			if u%abuseEach == 0 {
				rate = 10 * float64(p.Quota)
			}
			s := from + time.Duration(rng.Int64N(int64(window)))
			for at := s; ; {
				at += time.Duration(rng.ExpFloat64() / rate * float64(window))
				if at >= s+window {
					break
				}
				pending = append(pending, arrival{at, gen*users + u, rng.IntN(nodes)})
			}
		}
		slices.SortFunc(pending, func(x, y arrival) int { return cmp.Compare(x.at, y.at) })
		for ; t < from+window; t += step {
			clk.Set(start.Add(t))
			now := clk.Micros()
			i := 0
			for ; i < len(pending) && pending[i].at <= t; i++ {
				a := pending[i]
				n := ns[a.node]
				key := "u" + strconv.Itoa(a.user)
				e := n.store.Get(key, now)
				e.Lock()
				if e.Value.Digest == ([lease.DigestSize]byte{}) {
					e.Value.Digest = keyname.Digest(nil, key) // the Keyspace has no Secret
				}
				if _, signal := e.Value.Decide(n.lr, now, 1); signal.Sync() {
					n.lr.Notify(e)
				}
				e.Unlock()
				decisions++
			}
			pending = pending[i:]
			for _, n := range ns {
				// The step is FirstGap: a first-lease round asked for runs
				// at once.
				if n.s.WantedFirst() {
					_, err := n.s.SyncFirstAt(ctx, now)
					require.NoError(b, err)
				}
				n.early = n.early || n.s.Wanted()
				if t%cfg.Interval == 0 || n.early && t-n.lastEarly >= cfg.MinGap {
					n.lastEarly, n.early = t, false
					_, err := n.s.SyncAt(ctx, now)
					require.NoError(b, err)
				}
			}
		}
	}
	// A window before the measurement: the node registry and the scripts
	// loaded, the sessions in full swing.
	run(0)
	for _, n := range ns {
		n.count = roundCount{}
	}
	decisions = 0
	before := readStats(b, c)
	b.ResetTimer()
	for i := range b.N {
		run(i + 1)
	}
	b.StopTimer()
	after := readStats(b, c)
	exchanges := 0
	for _, n := range ns {
		exchanges += n.count.exchanges
	}
	require.NotZero(b, exchanges)
	evals := after.calls["evalsha"] - before.calls["evalsha"]
	inner := int64(0)
	for name, v := range after.calls {
		if name != "evalsha" && name != "eval" && name != "info" {
			inner += v - before.calls[name]
		}
	}
	x, d := float64(exchanges), float64(decisions)
	b.ReportMetric(float64(after.usec["evalsha"]-before.usec["evalsha"])/float64(evals), "redis-us/exchange")
	b.ReportMetric(float64(after.cpu-before.cpu)/x, "cpu-us/exchange")
	b.ReportMetric(float64(after.cpu-before.cpu)/d, "cpu-us/decision")
	b.ReportMetric(float64(inner)/x, "calls/exchange")
	b.ReportMetric(x/d, "exchanges/decision")
}
