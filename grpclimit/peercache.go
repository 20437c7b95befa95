package grpclimit

import (
	"net"
	"sync/atomic"
	"unsafe"
)

// peerCache remembers the keys of recent peers' addresses, so that a call
// on a connection seen before is keyed without formatting its address: a
// grpc.Server gives every call of a connection the same *net.TCPAddr.
// It is direct-mapped by the address's pointer, an entry replaced by the
// next peer that maps to it; an entry holds its address, so the pointer
// cannot be reused for another while it is cached. Safe for concurrent
// use.
type peerCache struct {
	slots [peerCacheSize]atomic.Pointer[peerKey]
}

// peerCacheSize is the number of peers remembered: a power of two.
const peerCacheSize = 256

type peerKey struct {
	addr *net.TCPAddr
	key  string
}

func (c *peerCache) slot(a *net.TCPAddr) *atomic.Pointer[peerKey] {
	p := uintptr(unsafe.Pointer(a))
	return &c.slots[(p>>4^p>>12)&(peerCacheSize-1)]
}

// get returns the key of a, and false when it is not cached.
func (c *peerCache) get(a *net.TCPAddr) (string, bool) {
	if e := c.slot(a).Load(); e != nil && e.addr == a {
		return e.key, true
	}
	return "", false
}

// put caches key as a's.
func (c *peerCache) put(a *net.TCPAddr, key string) {
	c.slot(a).Store(&peerKey{addr: a, key: key})
}
