package fallback

import (
	"sync"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestTableWindows(t *testing.T) {
	tb := newTable(10)
	k := digest{1}
	tb.observe(&k, 100, 3, 2)
	tb.observe(&k, 100, 1, 1)
	e := tb.shard(&k).m[k]
	require.NotNil(t, e)
	w, c := e.counts()
	assert.Equal(t, int64(100), w)
	assert.Equal(t, int64(3), c)
	assert.Equal(t, int64(4), e.asked.Load(), "refused requests count as demand")

	tb.observe(&k, 101, 5, 0)
	w, c = e.counts()
	assert.Equal(t, int64(101), w)
	assert.Equal(t, int64(0), c, "a new window starts at zero")

	tb.observe(&k, 100, 1, 1) // a late report for the old window
	w, c = e.counts()
	assert.Equal(t, int64(101), w)
	assert.Equal(t, int64(0), c)
	assert.Equal(t, int64(10), e.asked.Load())

	far := int64(101) + 1<<26 // a window far from the last: still later
	tb.observe(&k, far, 1, 1)
	w, c = e.counts()
	assert.Equal(t, far, w)
	assert.Equal(t, int64(1), c)
}

func TestTableFirstWindowAnywhere(t *testing.T) {
	tb := newTable(10)
	k := digest{2}
	tb.observe(&k, 1<<27+5, 1, 1) // more than half the packed range from zero
	tb.observe(&k, 1<<27+5, 1, 1)
	w, c := tb.shard(&k).m[k].counts()
	assert.Equal(t, int64(1<<27+5), w)
	assert.Equal(t, int64(2), c)
}

func TestTableConcurrentExact(t *testing.T) {
	tb := newTable(10)
	k := digest{3}
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for range 1000 {
				tb.observe(&k, 9, 1, 1)
			}
		})
	}
	wg.Wait()
	_, c := tb.shard(&k).m[k].counts()
	assert.Equal(t, int64(4000), c)
}

func TestTableCap(t *testing.T) {
	tb := newTable(2)
	for i := range 5 {
		tb.observe(&digest{byte(i)}, 0, 1, 1)
	}
	assert.Equal(t, int64(2), tb.n.Load())
	assert.Equal(t, uint64(3), tb.dropped.Load())
	tb.remove([]digest{{0}, {9}})
	assert.Equal(t, int64(1), tb.n.Load())
}

func TestShardPadding(t *testing.T) {
	assert.Equal(t, uintptr(64), unsafe.Sizeof(shard{}))
}

func TestHotPathAllocs(t *testing.T) {
	n := &node{table: newTable(10)}
	n.snap.Store(&snapshot{keys: map[digest]estimate{{1}: {Known: true, Share: 0.5}}, members: 2})
	k := digest{1}
	n.Observe(k, 1, 1, 1)
	assert.Zero(t, testing.AllocsPerRun(100, func() { n.Observe(k, 1, 1, 1) }))
	var e estimate
	assert.Zero(t, testing.AllocsPerRun(100, func() { e = n.Estimate(k) }))
	assert.Zero(t, testing.AllocsPerRun(100, func() { e = n.Estimate(digest{7}) }))
	assert.Equal(t, 0.5, n.Estimate(k).Share)
	assert.Equal(t, 0.5, e.Share, "an unknown key splits evenly")
}

func BenchmarkObserve(b *testing.B) {
	n := &node{table: newTable(1 << 20)}
	keys := make([]digest, 1024)
	for i := range keys {
		keys[i] = digest{byte(i), byte(i >> 8), 1}
		n.Observe(keys[i], 1, 1, 1)
	}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			n.Observe(keys[i&1023], 1, 1, 1)
			i++
		}
	})
}

func BenchmarkEstimate(b *testing.B) {
	n := &node{}
	keys := make([]digest, 1024)
	m := make(map[digest]estimate, len(keys))
	for i := range keys {
		keys[i] = digest{byte(i), byte(i >> 8), 1}
		m[keys[i]] = estimate{Known: true, Share: 0.5}
	}
	n.snap.Store(&snapshot{keys: m, members: 2})
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		var s float64
		for pb.Next() {
			s += n.Estimate(keys[i&1023]).Share
			i++
		}
		_ = s
	})
}

func TestTableReport(t *testing.T) {
	tb := newTable(10)
	k := digest{2}
	tb.report(&k, 100, 3, 7, 0)
	tb.report(&k, 100, 2, 5, 0) // absolute: the later report replaces the count
	e := tb.shard(&k).m[k]
	require.NotNil(t, e)
	w, c := e.counts()
	assert.Equal(t, int64(100), w)
	assert.Equal(t, int64(5), c)
	assert.Equal(t, int64(5), e.asked.Load(), "asked adds up")

	tb.report(&k, 101, 1, 9, 0)
	tb.report(&k, 100, 1, 50, 0) // a late report for the old window: demand only
	w, c = e.counts()
	assert.Equal(t, int64(101), w)
	assert.Equal(t, int64(9), c)
	assert.Equal(t, int64(7), e.asked.Load())
}
