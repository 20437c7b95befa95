// Package netsplit partitions memberlist nodes on loopback, for the tests
// of the gossip: each node runs on a Transport of one Net, whose Split cuts
// the packets and streams between groups of nodes, as a network partition
// would, and whose Heal joins them again. It needs no privileges and no
// firewall; every node of a test must run on the Net for a cut to be whole
// (each side drops what it sends across).
package netsplit

import (
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/memberlist"
)

// ErrCut is the error of a stream dialled across a cut.
var ErrCut = errors.New("netsplit: partitioned")

// Net is the network a test's nodes run on: whole until Split, and again
// after Heal. Its methods are safe for concurrent use.
type Net struct {
	mu   sync.RWMutex
	side map[string]int // a node's "host:port" → its group, while split
}

// New returns a whole Net.
func New() *Net { return &Net{} }

// Split cuts every group of addresses ("host:port", as Transport.Addr
// gives them) off from the others: packets sent across are lost, streams
// dialled across refused. An address in no group reaches every node.
func (n *Net) Split(groups ...[]string) {
	side := map[string]int{}
	for i, g := range groups {
		for _, a := range g {
			side[a] = i + 1
		}
	}
	n.mu.Lock()
	n.side = side
	n.mu.Unlock()
}

// Heal makes the Net whole again.
func (n *Net) Heal() {
	n.mu.Lock()
	n.side = nil
	n.mu.Unlock()
}

// cut reports whether from and to are on different sides of a split.
func (n *Net) cut(from, to string) bool {
	n.mu.RLock()
	defer n.mu.RUnlock()
	a, b := n.side[from], n.side[to]
	return a != 0 && b != 0 && a != b
}

// Transport is memberlist's NetTransport on a free loopback port, whose
// packets and streams its Net cuts: set it as memberlist.Config.Transport
// (which makes memberlist ignore BindAddr and BindPort).
type Transport struct {
	*memberlist.NetTransport
	net  *Net
	addr string
}

var _ memberlist.NodeAwareTransport = (*Transport)(nil)

// Transport returns a new Transport on n, bound to 127.0.0.1 on a free
// port. Its owner is the memberlist it is given to, whose Shutdown shuts
// it down.
func (n *Net) Transport() (*Transport, error) {
	cfg := &memberlist.NetTransportConfig{
		BindAddrs: []string{"127.0.0.1"},
		Logger:    log.New(io.Discard, "", 0),
	}
	var err error
	// Port 0 binds UDP and TCP apart, and another process may take the
	// TCP port in between: memberlist retries the same way.
	for range 10 {
		var nt *memberlist.NetTransport
		if nt, err = memberlist.NewNetTransport(cfg); err == nil {
			addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(nt.GetAutoBindPort()))
			return &Transport{NetTransport: nt, net: n, addr: addr}, nil
		}
		if !strings.Contains(err.Error(), "address already in use") {
			break
		}
	}
	return nil, fmt.Errorf("netsplit: transport: %w", err)
}

// Addr returns the "host:port" the transport is bound to, which the node
// advertises.
func (t *Transport) Addr() string { return t.addr }

// WriteTo sends b to addr, unless the Net is cut between them: then b is
// lost, as a datagram would be.
func (t *Transport) WriteTo(b []byte, addr string) (time.Time, error) {
	return t.WriteToAddress(b, memberlist.Address{Addr: addr})
}

// WriteToAddress is WriteTo for memberlist's node-aware calls.
func (t *Transport) WriteToAddress(b []byte, a memberlist.Address) (time.Time, error) {
	if t.net.cut(t.addr, a.Addr) {
		return time.Now(), nil
	}
	return t.NetTransport.WriteToAddress(b, a)
}

// DialTimeout dials addr, unless the Net is cut between them.
func (t *Transport) DialTimeout(addr string, timeout time.Duration) (net.Conn, error) {
	return t.DialAddressTimeout(memberlist.Address{Addr: addr}, timeout)
}

// DialAddressTimeout is DialTimeout for memberlist's node-aware calls.
func (t *Transport) DialAddressTimeout(a memberlist.Address, timeout time.Duration) (net.Conn, error) {
	if t.net.cut(t.addr, a.Addr) {
		return nil, fmt.Errorf("dial %s: %w", a.Addr, ErrCut)
	}
	return t.NetTransport.DialAddressTimeout(a, timeout)
}
