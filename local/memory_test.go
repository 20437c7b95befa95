package local_test

import (
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/internal/clocktest"
	"github.com/hybridlimit/hybridlimit/internal/localx"
	"github.com/hybridlimit/hybridlimit/local"
)

// The memory budget of DESIGN.md: at most 128 bytes per key held, plus the
// key itself. The sliding window log holds one 16-byte (time, cost) pair per
// admitted request on top, in a ring whose capacity grows by doubling, and a
// ring header: a slice and three words (ring in ring.go), 48 bytes. The
// ring's first four pairs are allocated with its state and header (logState
// in ring.go), and stay unused once it outgrows them; a buffer a quarter
// full or less shrinks, to no less than 8 pairs.
const (
	memBudgetPerKey = 128
	logPairBytes    = 16
	logRingHeader   = 48
	logInlinePairs  = 4
	logMinShrunk    = 8 // a ring that outgrew its first pairs shrinks to no less
)

// heapInUse returns the bytes of live heap objects after a full collection.
// runtime.GC blocks until the collection and its sweep are done, so
// HeapAlloc then counts only what is reachable.
func heapInUse() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// perKey returns the heap bytes fill leaves reachable, divided by keys.
// Whatever fill's results hang from must be allocated before the call and
// kept alive after it by the caller.
func perKey(keys int, fill func()) float64 {
	before := heapInUse()
	fill()
	after := heapInUse()
	return (float64(after) - float64(before)) / float64(keys)
}

// ringBytes is what the log's pairs take holding pairs pairs: the inline
// pairs, and the buffer the ring moves to when it outgrows them, which
// doubles when full.
func ringBytes(pairs int64) float64 {
	b := int64(logInlinePairs * logPairBytes)
	if pairs > logInlinePairs {
		c := int64(1)
		for c < pairs {
			c *= 2
		}
		b += c * logPairBytes
	}
	return float64(b)
}

// TestMemoryPerKey measures the heap a Limiter holds per key, for every
// algorithm, and holds it to the budget of DESIGN.md. It inserts many keys,
// each admitted at one fixed time so that none is back in its initial state
// (and none may be evicted), and divides the growth of the live heap by the
// number of keys. The keys are built before the first measurement, so only
// what the Limiter allocates is counted, including any copy it keeps of a
// key. The budget allows for the key itself: the figure held to it is the
// total minus the allocation a copy of the key takes (strings.Clone),
// measured the same way, by cloning every key once.
func TestMemoryPerKey(t *testing.T) {
	if testing.Short() {
		t.Skip("allocates about 100 MB; skipped in -short mode")
	}
	if raceEnabled {
		t.Skip("the race detector changes allocation sizes")
	}
	const n = 200_000
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("user:%07d", i)
	}
	at := time.UnixMicro(1_700_006_400_000_000)

	clones := make([]string, n)
	keyBytes := perKey(n, func() {
		for i, k := range keys {
			clones[i] = strings.Clone(k)
		}
	})
	runtime.KeepAlive(clones)
	clones = nil
	require.GreaterOrEqual(t, keyBytes, float64(len(keys[0])), "a %d-byte key clone measured in bytes: the measurement is off", len(keys[0]))
	require.LessOrEqual(t, keyBytes, 2*float64(len(keys[0])), "a %d-byte key clone measured in bytes: the measurement is off", len(keys[0]))

	type row struct {
		name          string
		limit         int64
		keys          int
		total, budget float64
	}
	var rows []row
	// measure holds keys under p, each admitted perKeyCalls times; with
	// later, each is then admitted once more, a window after, when every
	// earlier request has left the window.
	measure := func(p local.Limit, keys []string, perKeyCalls int64, later bool) row {
		t.Helper()
		lim := p
		l, err := local.New(lim, local.Config{
			Clock:             clocktest.Wall{},
			NoBackgroundSweep: true,
			MaxKeys:           1 << 30,
		})
		require.NoError(t, err)
		defer l.Close()
		denied := 0
		total := perKey(len(keys), func() {
			for _, k := range keys {
				// Distinct microseconds, so a log holds one pair per request.
				for j := range perKeyCalls {
					if !l.AllowNAt(at.Add(time.Duration(j)*time.Microsecond), k, 1).Allowed() {
						denied++
					}
				}
				if later && !l.AllowNAt(at.Add(p.Window+time.Duration(perKeyCalls)*time.Microsecond), k, 1).Allowed() {
					denied++
				}
			}
		})
		runtime.KeepAlive(l)
		require.Zero(t, denied, "%v: requests denied; every key must be admitted to be held", lim)
		require.Equal(t, len(keys), l.Stats().Keys, "%v: keys held", lim)
		return row{name: p.Algorithm.String(), limit: p.Quota, keys: len(keys), total: total, budget: memBudgetPerKey}
	}

	for _, a := range localx.Algorithms() {
		if a == local.SlidingWindowLog || a == local.SubWindowCounter {
			continue
		}
		rows = append(rows, measure(local.Limit{Algorithm: a, Quota: 100, Window: time.Minute}, keys, 1, false))
	}
	// The log, full: Limit requests per key, at distinct microseconds. Fewer
	// keys at limit 100 keep the test near 50 MB; 20,000 is still plenty to
	// average over.
	for _, c := range []struct {
		limit int64
		keys  int
	}{{1, n}, {10, n}, {100, n / 10}} {
		r := measure(local.Limit{Algorithm: local.SlidingWindowLog, Quota: c.limit, Window: time.Minute}, keys[:c.keys], c.limit, false)
		r.budget = memBudgetPerKey + logRingHeader + ringBytes(c.limit)
		rows = append(rows, r)
	}
	// The log a window after it was full: one pair left, in the least
	// buffer a ring that outgrew its first pairs shrinks to (8 pairs), where
	// it kept the 128 pairs it grew to before it shrank.
	r := measure(local.Limit{Algorithm: local.SlidingWindowLog, Quota: 100, Window: time.Minute}, keys[:n/10], 100, true)
	r.name += ", a window later"
	r.budget = memBudgetPerKey + logRingHeader + ringBytes(logMinShrunk)
	rows = append(rows, r)

	// The sub-window counter keeps the log's ring, one pair per sub-window
	// with requests: one, and all 60 (sub-windows of 1µs).
	for _, c := range []struct {
		window time.Duration
		calls  int64
		keys   int
	}{{time.Minute, 1, n}, {60 * time.Microsecond, 60, n / 10}} {
		r := measure(local.Limit{Algorithm: local.SubWindowCounter, Quota: 100, Window: c.window, SubWindows: 60}, keys[:c.keys], c.calls, false)
		r.name += fmt.Sprintf(", %d of 60 sub-windows", c.calls)
		r.budget = memBudgetPerKey + logRingHeader + ringBytes(c.calls)
		rows = append(rows, r)
	}

	t.Logf("heap bytes per key held; key %q is %d bytes, a clone of it measured %.1f", keys[0], len(keys[0]), keyBytes)
	t.Logf("%-40s %6s %8s %11s %16s %8s", "algorithm", "limit", "keys", "total B/key", "minus key clone", "budget")
	for _, r := range rows {
		held := r.total - keyBytes
		t.Logf("%-40s %6d %8d %11.1f %16.1f %8.0f", r.name, r.limit, r.keys, r.total, held, r.budget)
		assert.LessOrEqual(t, held, r.budget, "%s (limit %d): bytes per key besides the key, within the budget", r.name, r.limit)
	}
}
