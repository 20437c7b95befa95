package keyed

import (
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestEmptyShards: a new store's shards share one table without slots, so
// a store holding no key costs its shards alone; a shard's first key gets
// it a table of its own, and a sweep that empties the shard gives it back.
func TestEmptyShards(t *testing.T) {
	s := newIdleStore(t, Config{Shards: 4})
	for i := range s.shards {
		require.Same(t, s.empty, s.shards[i].tab.Load(), "shard %d has a table before its first key", i)
	}
	empty := s.Stats().Bytes

	e := s.Lock("k", 0)
	require.NotNil(t, e)
	e.Value = 1 // not idle
	e.Unlock()
	tables := 0
	for i := range s.shards {
		if s.shards[i].tab.Load() != s.empty {
			tables++
		}
	}
	assert.Equal(t, 1, tables, "one key, one shard with a table")
	assert.Greater(t, s.Stats().Bytes, empty)
	assert.Same(t, e, s.Get("k", 0), "the key is found in its table")

	e.Lock()
	e.Value = 0
	e.Unlock()
	require.Equal(t, 1, s.Sweep(0))
	for i := range s.shards {
		assert.Same(t, s.empty, s.shards[i].tab.Load(), "shard %d keeps a table with no key", i)
	}
	assert.Equal(t, empty, s.Stats().Bytes)
}

// TestEmptyShardRefills: a shard emptied by a sweep takes keys again, as
// many as before, and finds every one.
func TestEmptyShardRefills(t *testing.T) {
	s := newIdleStore(t, Config{Shards: 1})
	for round := range 3 {
		for i := range 100 {
			e := s.Lock("key-"+strconv.Itoa(i), 0)
			require.NotNil(t, e, "round %d key %d", round, i)
			e.Value = 1
			e.Unlock()
		}
		for i := range 100 {
			e := s.Get("key-"+strconv.Itoa(i), 0)
			e.Lock()
			assert.Equal(t, 1, e.Value, "round %d key %d: a new entry, not the key's", round, i)
			e.Value = 0
			e.Unlock()
		}
		require.Equal(t, 100, s.Sweep(0))
		require.Same(t, s.empty, s.shards[0].tab.Load())
		assert.Equal(t, 0, s.Stats().Keys)
	}
}
