package keyed

import (
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// newIdleStore returns a store of cfg whose entries are idle while their
// value is zero.
func newIdleStore(t testing.TB, cfg Config) *Store[int] {
	s, err := New[int](cfg, func(v *int, _ int64) bool { return *v == 0 }, nil)
	require.NoError(t, err)
	return s
}

// TestLockLooksUpAgain: Lock never returns an evicted entry; after an
// eviction it returns the key's new entry.
func TestLockLooksUpAgain(t *testing.T) {
	s := newIdleStore(t, Config{Shards: 1})
	old := s.Lock("k", 0)
	require.NotNil(t, old)
	old.Unlock()
	require.Equal(t, 1, s.Sweep(0))
	assert.True(t, old.Evicted())

	e := s.Lock("k", 0)
	require.NotNil(t, e)
	defer e.Unlock()
	assert.NotSame(t, old, e)
	assert.False(t, e.Evicted())
}

// TestLockFull: Lock returns nil for a new key the store has no room for.
func TestLockFull(t *testing.T) {
	s := newIdleStore(t, Config{Shards: 1, MaxKeys: 1})
	e := s.Lock("a", 0)
	require.NotNil(t, e)
	e.Value = 1 // not idle: cannot be evicted to make room
	e.Unlock()
	assert.Nil(t, s.Lock("b", 0))
}

// TestLockAllGroups: requests on one entry form one group, each entry is
// locked once, groups come in address order, and requests without an
// entry are left out.
func TestLockAllGroups(t *testing.T) {
	s := newIdleStore(t, Config{})
	a, b := s.Get("a", 0), s.Get("b", 0)
	ents := []*Entry[int]{b, nil, a, b, a}
	order := make([]int, len(ents))
	lk, ok := LockAll(ents, order)
	require.True(t, ok)

	var groups [][]int
	var seen []*Entry[int]
	for k := lk.First(); k < lk.Len(); {
		e, group, next := lk.Group(k)
		assert.False(t, e.mu.TryLock(), "entry not locked")
		for _, i := range group {
			assert.Same(t, e, ents[i])
		}
		groups = append(groups, append([]int(nil), group...))
		seen = append(seen, e)
		k = next
	}
	require.Len(t, groups, 2)
	assert.ElementsMatch(t, []int{2, 4}, groupOf(groups, seen, a))
	assert.ElementsMatch(t, []int{0, 3}, groupOf(groups, seen, b))
	assert.Less(t, addr(seen[0]), addr(seen[1]), "groups out of address order")

	lk.Unlock()
	for _, e := range []*Entry[int]{a, b} {
		require.True(t, e.mu.TryLock(), "entry left locked")
		e.mu.Unlock()
	}
}

func groupOf(groups [][]int, seen []*Entry[int], e *Entry[int]) []int {
	for i, s := range seen {
		if s == e {
			return groups[i]
		}
	}
	return nil
}

// TestLockAllEvicted: an entry evicted since its lookup makes LockAll
// report false with nothing left locked.
func TestLockAllEvicted(t *testing.T) {
	s := newIdleStore(t, Config{})
	a, b := s.Get("a", 0), s.Get("b", 0)
	b.Value = 1
	require.Equal(t, 1, s.Sweep(0)) // evicts a
	ents := []*Entry[int]{a, b}
	_, ok := LockAll(ents, make([]int, 2))
	require.False(t, ok)
	for _, e := range ents {
		require.True(t, e.mu.TryLock(), "entry left locked")
		e.mu.Unlock()
	}
}

// TestLockAllNoDeadlock: calls over the same entries listed in opposite
// orders all finish.
func TestLockAllNoDeadlock(t *testing.T) {
	s := newIdleStore(t, Config{})
	a, b, c := s.Get("a", 0), s.Get("b", 0), s.Get("c", 0)
	lists := [][]*Entry[int]{{a, b, c}, {c, b, a}, {b, c, a}}
	var wg sync.WaitGroup
	for _, list := range lists {
		wg.Go(func() {
			ents := append([]*Entry[int](nil), list...)
			order := make([]int, len(ents))
			for range 2000 {
				lk, ok := LockAll(ents, order)
				if !ok {
					continue
				}
				for k := lk.First(); k < lk.Len(); {
					e, _, next := lk.Group(k)
					e.Value++
					k = next
				}
				lk.Unlock()
			}
		})
	}
	wg.Wait()
	for _, e := range []*Entry[int]{a, b, c} {
		assert.Equal(t, 3*2000, e.Value, "a lost update: the entries were not locked")
	}
}

// TestStandalone: an entry marked standalone is told apart from a key's.
func TestStandalone(t *testing.T) {
	s := newIdleStore(t, Config{})
	var shared Entry[int]
	shared.MakeStandalone()
	assert.True(t, shared.Standalone())
	assert.False(t, s.Get("", 0).Standalone(), "the empty key's entry")
	assert.False(t, s.Get("k", 0).Standalone())
}

// TestNewRejects: New names the bad field, matches ErrInvalidConfig, and
// leaves its own prefix out of the message for callers that add theirs.
func TestNewRejects(t *testing.T) {
	idle := func(v *int, _ int64) bool { return *v == 0 }
	for _, c := range []struct {
		name  string
		cfg   Config
		idle  func(*int, int64) bool
		field string
	}{
		{"Shards", Config{Shards: 3}, idle, "Shards 3"},
		{"MaxKeys", Config{MaxKeys: -1}, idle, "MaxKeys -1"},
		{"idle", Config{}, nil, "idle function"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := New[int](c.cfg, c.idle, nil)
			require.Error(t, err)
			assert.ErrorIs(t, err, ErrInvalidConfig)
			assert.True(t, strings.HasPrefix(err.Error(), c.field), "err = %q, want it to start with %q", err, c.field)
		})
	}
}
