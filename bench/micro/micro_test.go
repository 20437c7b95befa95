// Package micro holds the micro-benchmarks of the local limiter: ns/op and
// allocations per decision, on one hot key, on 1,000 hot keys and among
// 1,000,000 keys drawn uniformly, one goroutine and b.RunParallel. The peers
// and the floor are measured in the same run:
//
//	Peer/xrate            golang.org/x/time/rate, one Limiter
//	Peer/xrate-syncmap    a sync.Map of x/time/rate Limiters, one per key
//	Peer/uber             go.uber.org/ratelimit (blocking Take, one limiter)
//	Floor                 a read-only 64-shard Go map of the same keys to
//	                      padded counters, plus one atomic add
//
// scripts/bench.sh runs them several times, interleaved, and
// cmd/benchtable turns the output into the table of docs/performance.md.
package micro

import (
	"fmt"
	"hash/maphash"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/ratelimit"
	"golang.org/x/time/rate"

	"github.com/hybridlimit/hybridlimit/internal/clocktest"
	"github.com/hybridlimit/hybridlimit/internal/coarse"
	"github.com/hybridlimit/hybridlimit/internal/localx"
	"github.com/hybridlimit/hybridlimit/local"
)

const (
	manyKeys = 1 << 20 // "1M keys": 1,048,576
	hotKeys  = 1000
	hotKey   = "user:0000042"
)

var (
	keysOnce sync.Once
	keys     []string // manyKeys pre-built keys
	uniform  []int32  // a uniform random stream of indexes into keys
)

func setupKeys() {
	keysOnce.Do(func() {
		keys = make([]string, manyKeys)
		for i := range keys {
			keys[i] = fmt.Sprintf("user:%07d", i)
		}
		r := rand.New(rand.NewPCG(1, 2))
		uniform = make([]int32, manyKeys)
		for i := range uniform {
			uniform[i] = int32(r.IntN(manyKeys))
		}
	})
}

// The limit each algorithm runs under: 10,000 per second, so a hot key fed
// one request per 100µs of virtual time is admitted every time and the
// sliding log keeps 10,000 timestamps.
func limitFor(a local.Algorithm) local.Limit {
	return local.Limit{Algorithm: a, Quota: 10000, Window: time.Second}
}

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func newLimiter(b *testing.B, a local.Algorithm, clock local.Clock) *local.Limiter {
	l, err := local.New(limitFor(a), local.Config{Clock: clock, MaxKeys: 2 * manyKeys, NoBackgroundSweep: true})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { l.Close() })
	return l
}

var sink atomic.Int64

// parClock keeps the virtual times of a RunParallel case together. Each
// goroutine advances its own time per request, as the single-goroutine
// hot-key cases do, and every syncEvery requests moves it up to the latest time any
// goroutine has reached, publishing its own when it is the latest.
// Goroutines reading one clock see times microseconds apart; without this,
// their virtual times drift apart without bound (whichever runs faster pulls
// ahead), and the laggard decides seconds to minutes in the past of the
// key's state, a path no server takes, whose cost then decides the figure.
type parClock struct{ latest atomic.Int64 }

// syncEvery is how many requests a goroutine makes between two syncs: one
// atomic load per 1,024 requests, and times at most 1,024 steps apart.
const syncEvery = 1024

// tick returns now advanced by step, brought up to the latest time any
// goroutine has reached when k is a multiple of syncEvery.
func (c *parClock) tick(now time.Time, k int, step time.Duration) time.Time {
	now = now.Add(step)
	if k%syncEvery != 0 {
		return now
	}
	c.publish(now)
	if latest, us := c.latest.Load(), now.UnixMicro(); latest > us {
		return now.Add(time.Duration(latest-us) * time.Microsecond)
	}
	return now
}

// publish makes now the latest time if it is later; a goroutine publishes
// its last time too, so that latest ends at the latest time any decided at.
func (c *parClock) publish(now time.Time) {
	us := now.UnixMicro()
	for {
		latest := c.latest.Load()
		if latest >= us || c.latest.CompareAndSwap(latest, us) {
			return
		}
	}
}

// time returns the latest time a goroutine published.
func (c *parClock) time() time.Time { return time.UnixMicro(c.latest.Load()) }

// keyedStep is how many requests in a row of a single-goroutine keyed
// AllowNAt case (1k-at, 1m-at, and the x/time/rate map's) share one virtual
// instant: its time advances by keyedStep µs once every keyedStep requests,
// the rate of 1 µs per request, and the regime the same (among 1M keys a
// key comes back about a second later either way). So the loop measures the
// limiter and not time.Time.Add, which the floor does not call and a server,
// having its request's time already, does not either. The hot-key cases
// still advance on every request, because there a shared instant would
// change what the limiter decides.
const keyedStep = 64

// keyedTime is the time of an algorithm's keyed limiters (1K and 1M keys),
// which its keyed cases share, one after another: each AllowNAt case starts
// at the latest time a case before it decided at, where its keys' states
// are, and advances from there, so that no case decides in the past of its
// keys' states: a path no server takes all the time, whose cost would make
// the figure. The Allow cases decide at real times, later than the virtual
// ones.
type keyedTime struct{ latest time.Time }

// start returns the time an AllowNAt case starts at.
func (k *keyedTime) start() time.Time { return k.latest }

// reached records that a case decided at times up to t.
func (k *keyedTime) reached(t time.Time) {
	if t.After(k.latest) {
		k.latest = t
	}
}

// reachedNow records that a case decided at real times, up to now. The
// time is kept without its monotonic reading, like t0's, so that the next
// case's time.Add costs what it costs on t0.
func (k *keyedTime) reachedNow() { k.reached(time.Now().Round(0)) }

// BenchmarkLocal/<algorithm>/<case>:
//
//	hot-at            one key, time passed in (AllowNAt)
//	hot-at-flood      the same at 100 times the limit: 99 requests in
//	                  100 rejected, as for a key under attack
//	hot-allow         one key, the Limiter's clock (Allow; a 1ms coarse clock)
//	hot-at-par        one key, AllowNAt under RunParallel
//	hot-allow-par     one key, Allow under RunParallel
//	1k-at, 1k-at-par  1,000 hot keys in turn
//	1k-allow          the same with Allow (a 1ms coarse clock)
//	1m-at, 1m-at-par  1,048,576 pre-built keys, drawn uniformly
//	1m-allow          the same with Allow (a 1ms coarse clock)
func BenchmarkLocal(b *testing.B) {
	for _, a := range localx.Algorithms() {
		// The keyed limiters are built once per algorithm, not once per
		// round of b.N, and closed when its cases are done. They read a
		// coarse clock in the Allow cases (AllowNAt does not read it), made
		// with the first of them, so that its goroutine does not run
		// during the hot-key cases.
		var many, thousand *local.Limiter
		var clock *coarse.Clock
		kt := keyedTime{latest: t0} // the keyed limiters are built at t0
		prebuilt := func(b *testing.B, n int) *local.Limiter {
			setupKeys()
			p := &many
			if n == hotKeys {
				p = &thousand
			}
			if clock == nil {
				clock = coarse.New(time.Millisecond)
			}
			if *p == nil {
				l, err := local.New(limitFor(a), local.Config{Clock: clock, MaxKeys: 2 * manyKeys, NoBackgroundSweep: true})
				if err != nil {
					b.Fatal(err)
				}
				for _, k := range keys[:n] {
					l.AllowNAt(t0, k, 1)
				}
				*p = l
			}
			return *p
		}
		b.Run(a.String(), func(b *testing.B) {
			b.Run("hot-at", func(b *testing.B) {
				l := newLimiter(b, a, clocktest.Wall{})
				b.ReportAllocs()
				now, admitted := t0, 0
				for b.Loop() {
					now = now.Add(100 * time.Microsecond)
					if l.AllowNAt(now, hotKey, 1).Allowed() {
						admitted++
					}
				}
				sink.Add(int64(admitted))
			})
			b.Run("hot-at-flood", func(b *testing.B) {
				l := newLimiter(b, a, clocktest.Wall{})
				b.ReportAllocs()
				now, admitted := t0, 0
				for b.Loop() {
					now = now.Add(time.Microsecond)
					if l.AllowNAt(now, hotKey, 1).Allowed() {
						admitted++
					}
				}
				sink.Add(int64(admitted))
			})
			b.Run("hot-allow", func(b *testing.B) {
				clock := coarse.New(time.Millisecond)
				defer clock.Close()
				l := newLimiter(b, a, clock)
				b.ReportAllocs()
				admitted := 0
				for b.Loop() {
					if l.Allow(hotKey).Allowed() {
						admitted++
					}
				}
				sink.Add(int64(admitted))
			})
			b.Run("hot-at-par", func(b *testing.B) {
				l := newLimiter(b, a, clocktest.Wall{})
				var clock parClock
				b.ReportAllocs()
				b.ResetTimer()
				b.RunParallel(func(pb *testing.PB) {
					now, admitted := t0, 0
					for k := 1; pb.Next(); k++ {
						now = clock.tick(now, k, 100*time.Microsecond)
						if l.AllowNAt(now, hotKey, 1).Allowed() {
							admitted++
						}
					}
					sink.Add(int64(admitted))
				})
			})
			b.Run("hot-allow-par", func(b *testing.B) {
				clock := coarse.New(time.Millisecond)
				defer clock.Close()
				l := newLimiter(b, a, clock)
				b.ReportAllocs()
				b.ResetTimer()
				b.RunParallel(func(pb *testing.PB) {
					admitted := 0
					for pb.Next() {
						if l.Allow(hotKey).Allowed() {
							admitted++
						}
					}
					sink.Add(int64(admitted))
				})
			})
			b.Run("1k-at", func(b *testing.B) {
				l := prebuilt(b, hotKeys)
				b.ReportAllocs()
				now, admitted := kt.start(), 0
				for i := 0; b.Loop(); i++ {
					if i&(keyedStep-1) == 0 {
						now = now.Add(keyedStep * time.Microsecond)
					}
					if l.AllowNAt(now, keys[i%hotKeys], 1).Allowed() {
						admitted++
					}
				}
				kt.reached(now)
				sink.Add(int64(admitted))
			})
			b.Run("1k-at-par", func(b *testing.B) {
				l := prebuilt(b, hotKeys)
				var seq atomic.Int64
				b.ReportAllocs()
				b.ResetTimer()
				var clock parClock
				start := kt.start()
				b.RunParallel(func(pb *testing.PB) {
					i := int(seq.Add(1)) * 7919
					now, admitted := start, 0
					for k := 1; pb.Next(); k++ {
						i++
						now = clock.tick(now, k, time.Microsecond)
						if l.AllowNAt(now, keys[i%hotKeys], 1).Allowed() {
							admitted++
						}
					}
					clock.publish(now)
					sink.Add(int64(admitted))
				})
				kt.reached(clock.time())
			})
			b.Run("1k-allow", func(b *testing.B) {
				l := prebuilt(b, hotKeys)
				b.ReportAllocs()
				admitted := 0
				for i := 0; b.Loop(); i++ {
					if l.Allow(keys[i%hotKeys]).Allowed() {
						admitted++
					}
				}
				kt.reachedNow()
				sink.Add(int64(admitted))
			})
			b.Run("1m-at", func(b *testing.B) {
				l := prebuilt(b, manyKeys)
				b.ReportAllocs()
				now, admitted := kt.start(), 0
				for i := 0; b.Loop(); i++ {
					if i&(keyedStep-1) == 0 {
						now = now.Add(keyedStep * time.Microsecond)
					}
					if l.AllowNAt(now, keys[uniform[i&(manyKeys-1)]], 1).Allowed() {
						admitted++
					}
				}
				kt.reached(now)
				sink.Add(int64(admitted))
			})
			b.Run("1m-allow", func(b *testing.B) {
				l := prebuilt(b, manyKeys)
				b.ReportAllocs()
				admitted := 0
				for i := 0; b.Loop(); i++ {
					if l.Allow(keys[uniform[i&(manyKeys-1)]]).Allowed() {
						admitted++
					}
				}
				kt.reachedNow()
				sink.Add(int64(admitted))
			})
			b.Run("1m-at-par", func(b *testing.B) {
				l := prebuilt(b, manyKeys)
				var seq atomic.Int64
				b.ReportAllocs()
				b.ResetTimer()
				var clock parClock
				start := kt.start()
				b.RunParallel(func(pb *testing.PB) {
					i := int(seq.Add(1)) * 104729
					now, admitted := start, 0
					for k := 1; pb.Next(); k++ {
						i++
						now = clock.tick(now, k, time.Microsecond)
						if l.AllowNAt(now, keys[uniform[i&(manyKeys-1)]], 1).Allowed() {
							admitted++
						}
					}
					clock.publish(now)
					sink.Add(int64(admitted))
				})
				kt.reached(clock.time())
			})
		})
		for _, l := range []*local.Limiter{many, thousand} {
			if l != nil {
				l.Close()
			}
		}
		if clock != nil {
			clock.Close()
		}
	}
}

// floor is the least any keyed limiter can cost: find the key's counter in
// a read-only 64-shard Go map and add to it atomically.
type floor struct {
	seed   maphash.Seed
	shards [64]map[string]*paddedCounter
}

type paddedCounter struct {
	_ [56]byte
	n atomic.Int64
	_ [56]byte
}

func newFloor(ks []string) *floor {
	f := &floor{seed: maphash.MakeSeed()}
	for i := range f.shards {
		f.shards[i] = make(map[string]*paddedCounter, len(ks)/64+1)
	}
	for _, k := range ks {
		f.shards[maphash.String(f.seed, k)>>58][k] = new(paddedCounter)
	}
	return f
}

func (f *floor) hit(k string) int64 {
	return f.shards[maphash.String(f.seed, k)>>58][k].n.Add(1)
}

// wordGCRA is the floor of a hot key under RunParallel: GCRA at 10,000
// per second, one word in a cache line of its own, decided inline with one
// load and one compare-and-swap (the TAT in µs; a burst of 10,000). It has
// no key to find, no Limit to read and no Decision to build: whatever a
// Limiter on one key loses to a second core beyond what this loses is its
// own.
type wordGCRA struct {
	_   [56]byte
	tat atomic.Int64
	_   [56]byte
}

func (w *wordGCRA) allow(now int64) bool {
	const interval, tau = 100, 1_000_000 // µs
	for {
		tat := w.tat.Load()
		next := max(tat, now) + interval
		if next-now > tau {
			return false
		}
		if w.tat.CompareAndSwap(tat, next) {
			return true
		}
	}
}

// BenchmarkFloor: the same cases as BenchmarkLocal, with the floor.
func BenchmarkFloor(b *testing.B) {
	b.Run("hot-at", func(b *testing.B) {
		f := newFloor([]string{hotKey})
		b.ReportAllocs()
		for b.Loop() {
			f.hit(hotKey)
		}
	})
	b.Run("hot-at-par", func(b *testing.B) {
		f := newFloor([]string{hotKey})
		b.ReportAllocs()
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				f.hit(hotKey)
			}
		})
	})
	// hot-word, hot-word-par: the least an exact limiter on one shared word
	// costs, under the harness of Local's hot-at and hot-at-par, whose loops
	// they copy on purpose: a loop shared through a func value, an
	// interface or a type parameter calls the decider indirectly (Go calls
	// a type parameter's methods through its dictionary), a call per
	// request. As the floor, it must not pay what Local's cases do not.
	b.Run("hot-word", func(b *testing.B) {
		var w wordGCRA
		b.ReportAllocs()
		now, admitted := t0, 0
		for b.Loop() {
			now = now.Add(100 * time.Microsecond)
			if w.allow(now.UnixMicro()) {
				admitted++
			}
		}
		sink.Add(int64(admitted))
	})
	b.Run("hot-word-par", func(b *testing.B) {
		var w wordGCRA
		var clock parClock
		b.ReportAllocs()
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			now, admitted := t0, 0
			for k := 1; pb.Next(); k++ {
				now = clock.tick(now, k, 100*time.Microsecond)
				if w.allow(now.UnixMicro()) {
					admitted++
				}
			}
			sink.Add(int64(admitted))
		})
	})
	b.Run("1k-at", func(b *testing.B) {
		setupKeys()
		f := newFloor(keys[:hotKeys])
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			f.hit(keys[i%hotKeys])
		}
	})
	b.Run("1k-at-par", func(b *testing.B) {
		setupKeys()
		f := newFloor(keys[:hotKeys])
		var seq atomic.Int64
		b.ReportAllocs()
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			i := int(seq.Add(1)) * 7919
			for pb.Next() {
				i++
				f.hit(keys[i%hotKeys])
			}
		})
	})
	b.Run("1m-at", func(b *testing.B) {
		setupKeys()
		f := newFloor(keys)
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			f.hit(keys[uniform[i&(manyKeys-1)]])
		}
	})
	b.Run("1m-at-par", func(b *testing.B) {
		setupKeys()
		f := newFloor(keys)
		var seq atomic.Int64
		b.ReportAllocs()
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			i := int(seq.Add(1)) * 104729
			for pb.Next() {
				i++
				f.hit(keys[uniform[i&(manyKeys-1)]])
			}
		})
	})
}

// BenchmarkPeer: the libraries people use instead.
func BenchmarkPeer(b *testing.B) {
	// x/time/rate at 10,000 per second, burst 10,000, like limitFor.
	newX := func() *rate.Limiter { return rate.NewLimiter(10000, 10000) }
	b.Run("xrate/hot-at", func(b *testing.B) {
		l := newX()
		b.ReportAllocs()
		now := t0
		for b.Loop() {
			now = now.Add(100 * time.Microsecond)
			l.AllowN(now, 1)
		}
	})
	b.Run("xrate/hot-allow", func(b *testing.B) {
		l := newX()
		b.ReportAllocs()
		for b.Loop() {
			l.Allow()
		}
	})
	b.Run("xrate/hot-allow-par", func(b *testing.B) {
		l := newX()
		b.ReportAllocs()
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				l.Allow()
			}
		})
	})
	// A sync.Map of limiters, as people write it for many keys.
	syncMap := func(ks []string) *sync.Map {
		var m sync.Map
		for _, k := range ks {
			m.Store(k, newX())
		}
		return &m
	}
	allowKey := func(m *sync.Map, k string, now time.Time) bool {
		v, ok := m.Load(k)
		if !ok {
			v, _ = m.LoadOrStore(k, newX())
		}
		return v.(*rate.Limiter).AllowN(now, 1)
	}
	b.Run("xrate-syncmap/hot-at", func(b *testing.B) {
		m := syncMap([]string{hotKey})
		b.ReportAllocs()
		now := t0
		for b.Loop() {
			now = now.Add(100 * time.Microsecond)
			allowKey(m, hotKey, now)
		}
	})
	b.Run("xrate-syncmap/1k-at", func(b *testing.B) {
		setupKeys()
		m := syncMap(keys[:hotKeys])
		b.ReportAllocs()
		now := t0
		for i := 0; b.Loop(); i++ {
			if i&(keyedStep-1) == 0 {
				now = now.Add(keyedStep * time.Microsecond)
			}
			allowKey(m, keys[i%hotKeys], now)
		}
	})
	b.Run("xrate-syncmap/1m-at", func(b *testing.B) {
		setupKeys()
		m := syncMap(keys)
		b.ReportAllocs()
		now := t0
		for i := 0; b.Loop(); i++ {
			if i&(keyedStep-1) == 0 {
				now = now.Add(keyedStep * time.Microsecond)
			}
			allowKey(m, keys[uniform[i&(manyKeys-1)]], now)
		}
	})
	// uber-go/ratelimit blocks in Take until the request may go; at 10^9
	// per second it never waits, so this is its bookkeeping cost.
	b.Run("uber/hot-take", func(b *testing.B) {
		l := ratelimit.New(1e9, ratelimit.WithoutSlack)
		b.ReportAllocs()
		for b.Loop() {
			l.Take()
		}
	})
	b.Run("uber/hot-take-par", func(b *testing.B) {
		l := ratelimit.New(1e9, ratelimit.WithoutSlack)
		b.ReportAllocs()
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				l.Take()
			}
		})
	})
	b.Run("time.Now", func(b *testing.B) {
		var s int64
		for b.Loop() {
			s += time.Now().UnixNano()
		}
		sink.Add(s)
	})
}
