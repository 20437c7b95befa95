// Package netproxy is a TCP proxy on loopback for tests and benchmarks: it
// stands for a slow link between regions. Each chunk read on one side is
// written to the other a fixed latency later, in order, without holding
// back the chunks behind it (a queue of delivery times per direction, not a
// sleep per read); the link can be cut and healed.
package netproxy

import (
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Proxy forwards the connections it accepts on Addr to a target address,
// each direction delayed by the latency. It is safe for concurrent use;
// Close stops every goroutine it started.
type Proxy struct {
	ln      net.Listener
	target  string
	latency atomic.Int64 // one-way, ns
	bytes   atomic.Int64 // forwarded, both directions

	mu     sync.Mutex
	cut    bool
	closed bool
	links  map[*link]struct{}
	held   map[net.Conn]struct{} // accepted while cut: never forwarded
	wg     sync.WaitGroup
}

// link is one proxied connection: the client's side and the target's.
type link struct {
	client, server net.Conn
	once           sync.Once
	done           chan struct{} // closed when the link closes
}

func (k *link) close() {
	k.once.Do(func() {
		close(k.done)
		k.client.Close()
		k.server.Close()
	})
}

// chunk is bytes read on one side and the time they are due on the other.
type chunk struct {
	at time.Time
	b  []byte
}

// queueLen bounds the chunks in flight per direction; a full queue holds
// the reader back (TCP's own flow control beyond it).
const queueLen = 1024

// dialTimeout bounds the dial to the target.
const dialTimeout = time.Second

// Start listens on a free loopback port and forwards what it accepts to
// target, each direction delayed by latency (one way).
func Start(target string, latency time.Duration) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{ln: ln, target: target, links: map[*link]struct{}{}, held: map[net.Conn]struct{}{}}
	p.latency.Store(int64(latency))
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is the address the proxy listens on.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// SetLatency sets the one-way latency of the chunks read from now on.
func (p *Proxy) SetLatency(d time.Duration) { p.latency.Store(int64(d)) }

// Bytes is the count of bytes forwarded so far, both directions.
func (p *Proxy) Bytes() int64 { return p.bytes.Load() }

// Cut closes every connection and holds those accepted from now on open
// without forwarding a byte (a black hole: the client's calls time out)
// until Heal.
func (p *Proxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = true
	for k := range p.links {
		k.close()
	}
}

// Heal forwards new connections again, and closes those held while cut so
// their clients dial afresh.
func (p *Proxy) Heal() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = false
	for c := range p.held {
		c.Close()
		delete(p.held, c)
	}
}

// Close stops listening, closes every connection and waits for the
// proxy's goroutines to end.
func (p *Proxy) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	err := p.ln.Close()
	for k := range p.links {
		k.close()
	}
	for c := range p.held {
		c.Close()
	}
	p.held = nil
	p.mu.Unlock()
	p.wg.Wait()
	return err
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		p.mu.Lock()
		switch {
		case p.closed:
			c.Close()
		case p.cut:
			p.held[c] = struct{}{}
		default:
			p.wg.Add(1)
			go p.connect(c)
		}
		p.mu.Unlock()
	}
}

// connect dials the target for client c and forwards both ways until
// either side closes, the link is cut or the proxy closed.
func (p *Proxy) connect(c net.Conn) {
	defer p.wg.Done()
	s, err := net.DialTimeout("tcp", p.target, dialTimeout)
	if err != nil {
		c.Close()
		return
	}
	k := &link{client: c, server: s, done: make(chan struct{})}
	p.mu.Lock()
	if p.closed || p.cut {
		p.mu.Unlock()
		k.close()
		return
	}
	p.links[k] = struct{}{}
	p.wg.Add(2)
	p.mu.Unlock()
	go p.forward(k, s, c)
	go p.forward(k, c, s)
	<-k.done
	p.mu.Lock()
	delete(p.links, k)
	p.mu.Unlock()
}

// forward copies src to dst, each chunk written the latency after it was
// read; a reader goroutine queues the chunks, this one delivers them, so a
// chunk's wait does not delay the reading of those behind it. It closes
// the link when either side fails.
func (p *Proxy) forward(k *link, dst, src net.Conn) {
	defer p.wg.Done()
	defer k.close()
	q := make(chan chunk, queueLen)
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		defer close(q)
		buf := make([]byte, 32<<10)
		for {
			n, err := src.Read(buf)
			if n > 0 {
				c := chunk{at: time.Now().Add(time.Duration(p.latency.Load())), b: append([]byte(nil), buf[:n]...)}
				select {
				case q <- c:
				case <-k.done:
					return
				}
			}
			if err != nil {
				return
			}
		}
	}()
	t := time.NewTimer(0)
	defer t.Stop()
	for c := range q {
		if d := time.Until(c.at); d > 0 {
			t.Reset(d)
			select {
			case <-t.C:
			case <-k.done:
				return
			}
		}
		p.bytes.Add(int64(len(c.b))) // before the write, so a reader of the echo sees it counted
		if _, err := dst.Write(c.b); err != nil {
			return
		}
	}
}
