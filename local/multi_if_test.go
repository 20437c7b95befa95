package local_test

import (
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/local"
)

// remaining returns what l has left for key at t0, charging nothing.
func remaining(l *local.Limiter, key string) int64 { return l.AllowNAt(t0, key, 0).Remaining() }

// TestCheckMultiAt: CheckMultiAt answers as AllowMultiAt would, writes the
// Decisions of a refusal, and charges nothing, whatever the answer.
func TestCheckMultiAt(t *testing.T) {
	small := newLimiter(t, local.Limit{Algorithm: local.FixedWindow, Quota: 2, Window: time.Minute}, local.Config{})
	big := newLimiter(t, local.Limit{Algorithm: local.TokenBucket, Quota: 5, Window: time.Minute}, local.Config{})
	reqs := []local.Request{{small, "k", 1}, {big, "k", 1}}
	out := make([]local.Decision, 2)

	for range 3 {
		assert.True(t, local.CheckMultiAt(t0, reqs, out), "room in both")
		for i, d := range out {
			assert.False(t, d.Allowed(), "out[%d] of a check: %v", i, d)
			assert.Equal(t, local.ReasonOK, d.Reason(), "out[%d]", i)
		}
		assert.Equal(t, int64(2), remaining(small, "k"), "small charged by a check")
		assert.Equal(t, int64(5), remaining(big, "k"), "big charged by a check")
	}

	// Same key twice: the sum of the costs is checked.
	assert.False(t, local.CheckMultiAt(t0, []local.Request{{small, "j", 1}, {small, "j", 2}}, out), "3 of 2 on one key")
	assert.Equal(t, int64(2), remaining(small, "j"))

	require.True(t, local.AllowMultiAt(t0, []local.Request{{small, "k", 2}}, out))
	assert.False(t, local.CheckMultiAt(t0, reqs, out), "small is spent")
	assert.Equal(t, local.ReasonLimited, out[0].Reason())
	assert.Equal(t, local.ReasonOK, out[1].Reason())
	assert.False(t, out[1].Allowed())
	assert.Equal(t, int64(5), remaining(big, "k"), "big charged by a refused check")
	assert.False(t, local.AllowMultiAt(t0, reqs, make([]local.Decision, 2)), "AllowMultiAt disagrees with the check")
}

// TestAllowMultiIfAt: commit is the last condition. It is called once when
// every request has room, never otherwise; the requests are charged only
// if it returns true.
func TestAllowMultiIfAt(t *testing.T) {
	a := newLimiter(t, local.Limit{Algorithm: local.FixedWindow, Quota: 3, Window: time.Minute}, local.Config{})
	b := newLimiter(t, local.Limit{Algorithm: local.GCRA, Quota: 10, Window: time.Minute, Burst: 10}, local.Config{})
	reqs := []local.Request{{a, "k", 1}, {b, "k", 2}}
	out := make([]local.Decision, 2)
	calls := 0
	answer := false
	commit := func() bool {
		calls++
		return answer
	}

	assert.False(t, local.AllowMultiIfAt(t0, reqs, out, commit), "commit refused")
	assert.Equal(t, 1, calls)
	assert.False(t, out[0].Allowed() || out[1].Allowed(), "refused, yet %v", out)
	assert.Equal(t, local.ReasonOK, out[0].Reason(), "had room")
	assert.Equal(t, int64(3), remaining(a, "k"), "charged though commit refused")
	assert.Equal(t, int64(10), remaining(b, "k"), "charged though commit refused")

	answer = true
	assert.True(t, local.AllowMultiIfAt(t0, reqs, out, commit))
	assert.Equal(t, 2, calls)
	assert.True(t, out[0].Allowed() && out[1].Allowed(), "%v", out)
	assert.Equal(t, int64(2), remaining(a, "k"))
	assert.Equal(t, int64(8), remaining(b, "k"))

	// A request without room: commit is not called, nothing is charged.
	assert.False(t, local.AllowMultiIfAt(t0, []local.Request{{a, "k", 1}, {b, "k", 9}}, out, commit))
	assert.Equal(t, 2, calls, "commit called though a request had no room")
	assert.Equal(t, local.ReasonLimited, out[1].Reason())
	assert.Equal(t, int64(2), remaining(a, "k"))

	// nil commit is AllowMultiAt.
	assert.True(t, local.AllowMultiIfAt(t0, reqs, out, nil))
	assert.Equal(t, int64(1), remaining(a, "k"))
}

// TestAllowMultiIfAtHoldsKeys: commit runs with the keys locked, so plain
// decisions racing on the same key cannot take the room commit's caller
// counts on: the admissions of both kinds never pass the limit. A commit
// that ran with the keys unlocked would see its room taken and be charged
// past the limit or report an admission not charged.
func TestAllowMultiIfAtHoldsKeys(t *testing.T) {
	// 600 attempts in all, 300 of each kind: the plain ones alone cannot
	// use the limit up, so multi decisions reach commit however the
	// goroutines are scheduled.
	const limit = 400
	l := newLimiter(t, local.Limit{Algorithm: local.FixedWindow, Quota: limit, Window: time.Minute}, local.Config{})
	other := newLimiter(t, local.Limit{Algorithm: local.FixedWindow, Quota: 1 << 20, Window: time.Minute}, local.Config{})
	var admitted, commits atomic.Int64
	var wg sync.WaitGroup
	for g := range 6 {
		wg.Go(func() {
			out := make([]local.Decision, 2)
			reqs := []local.Request{{l, "k", 1}, {other, "k", 1}}
			for range 100 {
				if g%2 == 0 {
					if l.AllowNAt(t0, "k", 1).Allowed() {
						admitted.Add(1)
					}
					continue
				}
				ok := local.AllowMultiIfAt(t0, reqs, out, func() bool {
					commits.Add(1)
					runtime.Gosched() // let the plain decisions run meanwhile
					return true
				})
				if ok {
					admitted.Add(1)
				}
			}
		})
	}
	wg.Wait()
	require.Positive(t, commits.Load(), "no multi decision reached commit")
	assert.Equal(t, int64(limit), admitted.Load(), "admitted other than the limit")
	assert.Equal(t, int64(0), remaining(l, "k"))
}

// TestMultiIfNoAllocations: CheckMultiAt and AllowMultiIfAt, with a commit
// closure of the caller's, allocate nothing, as AllowMultiAt.
func TestMultiIfNoAllocations(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	l := newLimiter(t, local.Limit{Algorithm: local.FixedWindow, Quota: 1 << 40, Window: time.Minute}, local.Config{})
	reqs := []local.Request{{l, "hot", 1}, {l, "other", 1}}
	out := make([]local.Decision, 2)
	n := 0
	assert.Zero(t, testing.AllocsPerRun(1000, func() { local.CheckMultiAt(t0, reqs, out) }), "CheckMultiAt")
	assert.Zero(t, testing.AllocsPerRun(1000, func() {
		local.AllowMultiIfAt(t0, reqs, out, func() bool { n++; return true })
	}), "AllowMultiIfAt")
	assert.Positive(t, n)
}

// BenchmarkAllowMultiAt measures a two-rule decision on hot keys: plain,
// and with a commit condition.
func BenchmarkAllowMultiAt(b *testing.B) {
	lim := local.Limit{Algorithm: local.FixedWindow, Quota: 1 << 40, Window: time.Minute}
	l1, l2 := newLimiter(b, lim, local.Config{}), newLimiter(b, lim, local.Config{})
	reqs := []local.Request{{l1, "hot", 1}, {l2, "hot", 1}}
	out := make([]local.Decision, 2)
	b.Run("plain", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			local.AllowMultiAt(t0, reqs, out)
		}
	})
	b.Run("if", func(b *testing.B) {
		b.ReportAllocs()
		n := 0
		for b.Loop() {
			local.AllowMultiIfAt(t0, reqs, out, func() bool { n++; return true })
		}
	})
}
