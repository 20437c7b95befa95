package micro

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hybridlimit/hybridlimit/hybrid"
	"github.com/hybridlimit/hybridlimit/internal/clocktest"
	"github.com/hybridlimit/hybridlimit/internal/hybridsim"
	"github.com/hybridlimit/hybridlimit/local"
	"github.com/hybridlimit/hybridlimit/syncer"
)

// benchLimiter returns a hybrid.Limiter of one node on a fresh prefix, with
// hybridsim.Virtual and the settable clock it reads, closed when b ends. The
// benchmark moves the clock by hand, so that a hybrid key's lease (fetched
// once, with hybridsim.Virtual) covers the whole run. It skips b without
// HYBRIDLIMIT_REDIS_ADDR.
func benchLimiter(b *testing.B) (*hybrid.Limiter, *clocktest.Clock) {
	addr := os.Getenv("HYBRIDLIMIT_REDIS_ADDR")
	if addr == "" {
		b.Skip("HYBRIDLIMIT_REDIS_ADDR is not set: make bench starts Redis")
	}
	client := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
	b.Cleanup(func() { client.Close() })
	clock := clocktest.New(t0)
	l, err := hybrid.New(hybridsim.Virtual(hybrid.Config{
		Redis: client, Clock: clock,
		Keyspace: syncer.Keyspace{Prefix: fmt.Sprintf("bench-%d", time.Now().UnixNano())},
		Sync:     hybrid.SyncConfig{Nodes: 1},
	}))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { l.Close() })
	return l, clock
}

// BenchmarkHybrid compares, on one hybrid.Limiter, a rule in Hybrid mode
// with the same rule in Local mode: the design wants the hybrid hot path
// within 10% of the local one. Both read the Limiter's clock; the hybrid
// key holds a lease fetched before the timer starts, so no decision waits
// on Redis (as in production, where the syncer renews it in the
// background). It needs HYBRIDLIMIT_REDIS_ADDR.
func BenchmarkHybrid(b *testing.B) {
	l, clock := benchLimiter(b)
	// A limit no benchmark run exhausts: the decisions measured are
	// admissions, in both modes.
	lim := local.Limit{Algorithm: local.FixedWindow, Quota: 1 << 40, Window: time.Hour}
	rules := map[string]*hybrid.Rule{}
	for _, m := range []hybrid.Mode{hybrid.Local, hybrid.Hybrid} {
		r, err := l.Register(hybrid.Rule{Name: "bench-" + m.String(), Limit: lim, Mode: m})
		if err != nil {
			b.Fatal(err)
		}
		if r.Mode != m {
			b.Fatalf("rule runs %v, not %v", r.Mode, m)
		}
		rules[m.String()] = r
	}
	ctx := context.Background()
	// Fetch the hybrid key's lease: a first request, one round, checked.
	hr := rules["hybrid"]
	l.Allow(ctx, hr, hotKey)
	if _, err := hybridsim.SyncAt(ctx, l, clock.Now()); err != nil {
		b.Fatal(err)
	}
	if d, _ := l.AllowN(ctx, hr, hotKey, 0); d.Reason() != local.ReasonOK {
		b.Fatalf("no lease: %+v", d)
	}
	for _, m := range []string{"local", "hybrid"} {
		r := rules[m]
		b.Run(m+"/hot", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				l.Allow(ctx, r, hotKey)
			}
		})
		b.Run(m+"/hot-par", func(b *testing.B) {
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					l.Allow(ctx, r, hotKey)
				}
			})
		})
	}
}

// BenchmarkFlood compares, in one run, the cost of a key flooded far past
// its limit: GCRA 1,000,000/s, burst 100,000, on one node, offered 10× its
// limit (the clock moves 1µs every 10 requests), so that most decisions are
// refusals. local is local.Limiter.Allow; local-mode hybrid.Limiter.Allow
// on a Local rule; hybrid the same on a Hybrid rule, its share renewed by a sync round every 2^16 requests
// (outside the timer), as the background syncer does. It needs
// HYBRIDLIMIT_REDIS_ADDR.
func BenchmarkFlood(b *testing.B) {
	l, clock := benchLimiter(b)
	lim := local.Limit{Algorithm: local.GCRA, Quota: 1_000_000, Window: time.Second, Burst: 100_000}
	hr, err := l.Register(hybrid.Rule{Name: "flood", Limit: lim, Mode: hybrid.Hybrid})
	if err != nil {
		b.Fatal(err)
	}
	lr, err := l.Register(hybrid.Rule{Name: "flood-local", Limit: lim, Mode: hybrid.Local})
	if err != nil {
		b.Fatal(err)
	}
	lo, err := local.New(lim, local.Config{Clock: clock, NoBackgroundSweep: true})
	if err != nil {
		b.Fatal(err)
	}
	defer lo.Close()
	ctx := context.Background()
	sync := func(b *testing.B) {
		b.StopTimer()
		if _, err := hybridsim.SyncAt(ctx, l, clock.Now()); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
	l.Allow(ctx, hr, hotKey)
	sync(b)
	for _, c := range []struct {
		name  string
		allow func() bool
	}{
		{"local", func() bool { return lo.Allow(hotKey).Allowed() }},
		{"local-mode", func() bool { d, _ := l.Allow(ctx, lr, hotKey); return d.Allowed() }},
		{"hybrid", func() bool { d, _ := l.Allow(ctx, hr, hotKey); return d.Allowed() }},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			var i, admitted int
			for b.Loop() {
				if c.allow() {
					admitted++
				}
				if i++; i%10 == 0 {
					clock.Add(time.Microsecond)
				}
				if i%(1<<16) == 0 && c.name == "hybrid" {
					sync(b)
				}
			}
			b.ReportMetric(float64(admitted)/float64(i), "admitted/op")
		})
	}
}
