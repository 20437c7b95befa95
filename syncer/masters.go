package syncer

import (
	"errors"
	"sync"
	"time"
)

// masters are, on a Cluster, the masters whose last pipeline found them
// out of reach: their keys' exchanges fail at once, without a dial, until
// a backoff runs out (masterBackoffMin, doubling to masterBackoffMax), so
// that a dead master does not hold every round for Timeout and delay the
// other masters' keys. The first pipeline to reach one again clears it.
type masters struct {
	mu   sync.Mutex
	down map[string]*masterDown // by address
}

type masterDown struct {
	retry   time.Time
	backoff time.Duration
}

const (
	masterBackoffMin = 100 * time.Millisecond
	masterBackoffMax = 2 * time.Second
)

// errMasterDown fails an exchange whose Cluster master is in its backoff:
// it wraps as ErrUnavailable.
var errMasterDown = errors.New("the key's Cluster master was out of reach at its last exchange; tried again after a backoff")

// skip reports whether addr's calls fail at once at now.
func (m *masters) skip(addr string, now time.Time) bool {
	if addr == "" {
		return false
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	d := m.down[addr]
	return d != nil && now.Before(d.retry)
}

// failed records that addr was out of reach at now.
func (m *masters) failed(addr string, now time.Time) {
	if addr == "" {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	d := m.down[addr]
	if d == nil {
		if m.down == nil {
			m.down = map[string]*masterDown{}
		}
		d = &masterDown{backoff: masterBackoffMin}
		m.down[addr] = d
	} else {
		d.backoff = min(2*d.backoff, masterBackoffMax)
	}
	d.retry = now.Add(d.backoff)
}

// ok records that addr answered.
func (m *masters) ok(addr string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.down, addr)
}
