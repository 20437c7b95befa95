package redisbench

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/redis/go-redis/v9"

	"github.com/hybridlimit/hybridlimit/internal/syncx"
	"github.com/hybridlimit/hybridlimit/local"
)

// memTarget builds the state of n user keys and returns, for each, the
// names of the Redis keys holding it: the state first, then the log.
type memTarget struct {
	name   string
	n      int
	create func(b *testing.B, e *env, n int) [][]string
}

// memCentral: every key with one admitted request. The rules' windows are
// an hour, so no key expires while it is measured.
func memCentral(a local.Algorithm) memTarget {
	return memTarget{name: a.String(), n: 1000, create: func(b *testing.B, e *env, n int) [][]string {
		cen, r := e.central(b), rule(b, a.String(), local.Limit{Algorithm: a, Quota: admitLimit, Window: time.Hour})
		fill(b, func(ctx context.Context, k int) (bool, error) {
			d, err := cen.AllowN(ctx, r, userKeys[k], 1)
			return d.Allowed(), err
		}, n, 1)
		return names(n, func(k int) []string { s, _ := syncx.Keys(e.keyspace(), r, userKeys[k]); return []string{s} })
	}}
}

// memLog: the sliding window log with entries requests in its window, one
// per entry, at limit l.
func memLog(name string, l, entries int64, n int) memTarget {
	return memTarget{name: name, n: n, create: func(b *testing.B, e *env, n int) [][]string {
		cen := e.central(b)
		r := rule(b, fmt.Sprintf("log%d", l), local.Limit{Algorithm: local.SlidingWindowLog, Quota: l, Window: logWindow})
		t0, step := time.Now().UnixMicro(), logWindow.Microseconds()/l
		count := make([]int64, n)
		fill(b, func(ctx context.Context, k int) (bool, error) {
			d, err := syncx.AllowNAt(ctx, cen, time.UnixMicro(t0+count[k]*step), r, userKeys[k], 1)
			count[k]++
			if err == nil && !d.Allowed() {
				err = fmt.Errorf("request %d of key %d refused", count[k], k)
			}
			return d.Allowed(), err
		}, n, int(entries))
		return names(n, func(k int) []string { s, l := syncx.Keys(e.keyspace(), r, userKeys[k]); return []string{s, l} })
	}}
}

func memTargets() []memTarget {
	return []memTarget{
		memCentral(local.FixedWindow),
		memCentral(local.SlidingWindowCounter),
		memLog("sliding_window_log-1entry", 1000, 1, 1000),
		memLog("sliding_window_log-L10", 10, 10, 1000),
		memLog("sliding_window_log-L100", 100, 100, 1000),
		memLog("sliding_window_log-L1000", 1000, 1000, 100),
		memCentral(local.TokenBucket),
		memCentral(local.LeakyBucket),
		memCentral(local.GCRA),
		{name: "peer-redis_rate", n: 1000, create: func(b *testing.B, e *env, n int) [][]string {
			rl := redis_rate.NewLimiter(e.client)
			fill(b, func(ctx context.Context, k int) (bool, error) {
				res, err := rl.Allow(ctx, e.prefix+":"+userKeys[k], redis_rate.PerHour(admitLimit))
				return err == nil && res.Allowed > 0, err
			}, n, 1)
			return names(n, func(k int) []string { return []string{"rate:" + e.prefix + ":" + userKeys[k]} })
		}},
		{name: "peer-incr_expire", n: 1000, create: func(b *testing.B, e *env, n int) [][]string {
			w := ":" + strconv.FormatInt(time.Now().Unix()/3600, 10)
			fill(b, func(ctx context.Context, k int) (bool, error) {
				key := e.prefix + ":fw:" + userKeys[k] + w
				pipe := e.client.Pipeline()
				pipe.Incr(ctx, key)
				pipe.Expire(ctx, key, time.Hour)
				_, err := pipe.Exec(ctx)
				return err == nil, err
			}, n, 1)
			return names(n, func(k int) []string { return []string{e.prefix + ":fw:" + userKeys[k] + w} })
		}},
	}
}

// build flushes the server, builds t's state and returns its keys and the
// growth of used_memory. The state is built through a client of its own,
// closed before memory is read again: its 64 connections' buffers would
// otherwise count (mem_clients_normal lags behind them).
func build(b *testing.B, e *env, t memTarget) ([][]string, float64) {
	b.Helper()
	e.flush(b)
	e.central(b) // the scripts are loaded before the baseline
	conns := connectedClients(b, e.client)
	before := usedMemory(b, e.client)
	fe := *e
	fe.client = e.newClient()
	keys := t.create(b, &fe, t.n)
	fe.client.Close()
	waitClients(b, e.client, conns)
	return keys, usedMemory(b, e.client) - before
}

func names(n int, f func(k int) []string) [][]string {
	out := make([][]string, n)
	for k := range out {
		out[k] = f(k)
	}
	return out
}

// BenchmarkMemory/<target> builds each target's state for n user keys and
// reports, per user key:
//
//	B/key        the median of MEMORY USAGE <key> SAMPLES 0 summed over the
//	             Redis keys of one user key (key name, value, dict entry)
//	state-B/key  the state (hash or string) alone (median); log-B/key: the log list
//	used-B/key   the growth of INFO memory's used_memory over n, read with
//	             only the measuring connection open: the dict tables and the
//	             expires dict included. A private server only.
//	keys         n
//
// Run it once, with -benchtime 1x.
func BenchmarkMemory(b *testing.B) {
	e := newEnv(b)
	ctx := context.Background()
	// The first state of a kind built on a server grows used_memory by
	// 50KB to 130KB more than the same state built again: build a hash and a
	// log first, unmeasured.
	build(b, e, memCentral(local.FixedWindow))
	build(b, e, memLog("warm-up", 1000, 1, 1000))
	for _, t := range memTargets() {
		b.Run(t.name, func(b *testing.B) {
			keys, used := build(b, e, t)

			pipe := e.client.Pipeline()
			cmds := make([][]*redis.IntCmd, len(keys))
			for i, ks := range keys {
				for _, k := range ks {
					cmds[i] = append(cmds[i], pipe.MemoryUsage(ctx, k, 0))
				}
			}
			if _, err := pipe.Exec(ctx); err != nil && err != redis.Nil {
				b.Fatal(err)
			}
			var total, state, log []float64
			for i, cs := range cmds {
				sum := 0.0
				for j, c := range cs {
					v, err := c.Result()
					if err != nil { // redis.Nil: the key is missing
						b.Fatalf("MEMORY USAGE %s: %v", keys[i][j], err)
					}
					sum += float64(v)
					if j == 0 {
						state = append(state, float64(v))
					} else {
						log = append(log, float64(v))
					}
				}
				total = append(total, sum)
			}
			b.ReportMetric(0, "ns/op")
			b.ReportMetric(median(total), "B/key")
			b.ReportMetric(median(state), "state-B/key")
			if len(keys[0]) > 1 {
				b.ReportMetric(median(log), "log-B/key")
			}
			if e.private {
				b.ReportMetric(used/float64(t.n), "used-B/key")
			}
			b.ReportMetric(float64(t.n), "keys")
		})
	}
}

func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// connectedClients returns INFO clients' connected_clients.
func connectedClients(b *testing.B, c *redis.Client) int {
	b.Helper()
	info, err := c.Info(context.Background(), "clients").Result()
	if err != nil {
		b.Fatal(err)
	}
	for line := range strings.Lines(info) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "connected_clients:"); ok {
			n, err := strconv.Atoi(v)
			if err != nil {
				b.Fatal(err)
			}
			return n
		}
	}
	b.Fatal("INFO clients: no connected_clients")
	return 0
}

// waitClients waits until the server has at most n clients connected.
func waitClients(b *testing.B, c *redis.Client, n int) {
	b.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for connectedClients(b, c) > n {
		if time.Now().After(deadline) {
			b.Fatalf("more than %d clients still connected", n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// usedMemory returns INFO memory's used_memory.
func usedMemory(b *testing.B, c *redis.Client) float64 {
	b.Helper()
	info, err := c.Info(context.Background(), "memory").Result()
	if err != nil {
		b.Fatal(err)
	}
	for line := range strings.Lines(info) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "used_memory:"); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				b.Fatal(err)
			}
			return f
		}
	}
	b.Fatal("INFO memory: no used_memory")
	return 0
}
