package keyed

import "unsafe"

// What a Store counts, and its estimate of the heap it holds: for
// monitoring, off the hot path.

// Stats are a Store's counters.
type Stats struct {
	Keys      int    // keys held now
	Evictions uint64 // keys evicted since New, idle
	Overflows uint64 // new keys refused because the store was full
	// Bytes estimates the heap the store holds: itself, its shards, their
	// tables and an entry per key, each rounded up to the allocator's size
	// class; what a value allocates beyond its entry is not counted.
	Bytes int64
}

// Stats returns the counters. It locks each shard in turn: for monitoring,
// not per request.
func (s *Store[V]) Stats() Stats {
	var (
		slotSize  = unsafe.Sizeof(slot[V]{})
		entrySize = AllocSize(unsafe.Sizeof(Entry[V]{}))
		tableSize = AllocSize(unsafe.Sizeof(table[V]{}))
	)
	// The Store, the tombstone, the empty table and the shards.
	st := Stats{Bytes: AllocSize(unsafe.Sizeof(*s)) + entrySize + tableSize}
	st.Bytes += AllocSize(uintptr(len(s.shards)) * unsafe.Sizeof(shard[V]{}))
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		st.Keys += sh.live
		st.Evictions += sh.evictions
		st.Overflows += sh.overflows
		if t := sh.tab.Load(); t != s.empty {
			st.Bytes += tableSize + AllocSize(uintptr(len(t.slots))*slotSize)
		}
		sh.mu.Unlock()
	}
	st.Bytes += int64(st.Keys) * entrySize
	return st
}

// sizeClasses are the Go allocator's object sizes (internal/runtime/gc);
// a small object takes the first that holds it.
var sizeClasses = [...]uintptr{8, 16, 24, 32, 48, 64, 80, 96, 112, 128, 144, 160, 176, 192, 208, 224, 240, 256,
	288, 320, 352, 384, 416, 448, 480, 512, 576, 640, 704, 768, 896, 1024, 1152, 1280, 1408, 1536, 1792, 2048,
	2304, 2688, 3072, 3200, 3456, 4096, 4864, 5376, 6144, 6528, 6784, 6912, 8192, 9472, 9728, 10240, 10880,
	12288, 13568, 14336, 16384, 18432, 19072, 20480, 21760, 24576, 27264, 28672, 32768}

// AllocSize estimates what the Go allocator takes for an object of n bytes
// that holds pointers, as every object of a Store does: its size class,
// after the 8-byte header such an object carries past 512 bytes (the
// default 64 shards, 8 KiB, take 9.25 KiB); past 32 KiB, whole 8 KiB pages.
func AllocSize(n uintptr) int64 {
	switch {
	case n > sizeClasses[len(sizeClasses)-1]-8:
		return int64((n + 8191) &^ 8191)
	case n > 512:
		n += 8
	}
	for _, c := range sizeClasses {
		if n <= c {
			return int64(c)
		}
	}
	return int64(n) // not reached
}
