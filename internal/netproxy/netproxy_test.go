package netproxy

import (
	"bufio"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/internal/leakcheck"
)

// echo starts a TCP echo server on loopback and returns its address; the
// test's cleanup stops it and its connections.
func echo(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			wg.Add(1)
			go func() { defer wg.Done(); io.Copy(c, c); c.Close() }()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return ln.Addr().String()
}

func start(t *testing.T, target string, latency time.Duration) *Proxy {
	t.Helper()
	p, err := Start(target, latency)
	require.NoError(t, err)
	t.Cleanup(func() { p.Close() })
	return p
}

func dial(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, time.Second)
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	return c
}

// roundTrip writes msg on c and reads it back, within timeout.
func roundTrip(c net.Conn, msg []byte, timeout time.Duration) (time.Duration, error) {
	t0 := time.Now()
	c.SetDeadline(t0.Add(timeout))
	if _, err := c.Write(msg); err != nil {
		return 0, err
	}
	got := make([]byte, len(msg))
	if _, err := io.ReadFull(c, got); err != nil {
		return 0, err
	}
	if string(got) != string(msg) {
		return 0, errors.New("echoed bytes differ")
	}
	return time.Since(t0), nil
}

func TestLatency(t *testing.T) {
	leakcheck.Check(t)
	for _, d := range []time.Duration{0, 20 * time.Millisecond, 50 * time.Millisecond} {
		t.Run(d.String(), func(t *testing.T) {
			p := start(t, echo(t), d)
			c := dial(t, p.Addr())
			var best time.Duration
			for i := range 5 {
				rtt, err := roundTrip(c, []byte("ping"), 2*time.Second)
				require.NoError(t, err)
				if i == 0 || rtt < best {
					best = rtt
				}
			}
			// Two one-way delays; the slack allows for a shared machine.
			assert.GreaterOrEqual(t, best, 2*d)
			assert.Less(t, best, 2*d+30*time.Millisecond)
			assert.Equal(t, int64(5*2*4), p.Bytes())
		})
	}
}

// TestPipelined writes a chunk every 5ms for 200ms through a 50ms link: a
// queue delivers the last echo about 100ms after its write; a sleep per
// read would hold it back by the 100ms of each chunk before it.
func TestPipelined(t *testing.T) {
	leakcheck.Check(t)
	const d = 50 * time.Millisecond
	p := start(t, echo(t), d)
	c := dial(t, p.Addr())
	c.SetDeadline(time.Now().Add(10 * time.Second))
	const n = 40
	last := make(chan time.Time, 1)
	go func() {
		for i := range n {
			c.Write([]byte{byte(i)})
			if i == n-1 {
				last <- time.Now()
			}
			time.Sleep(5 * time.Millisecond)
		}
	}()
	got := make([]byte, n)
	_, err := io.ReadFull(c, got)
	require.NoError(t, err)
	lag := time.Since(<-last)
	for i := range n {
		assert.Equal(t, byte(i), got[i])
	}
	assert.GreaterOrEqual(t, lag, 2*d)
	assert.Less(t, lag, 2*d+100*time.Millisecond)
}

// TestOrder runs several connections at once, each writing a numbered
// stream in small writes as fast as it can, and checks every stream comes
// back whole and in order.
func TestOrder(t *testing.T) {
	leakcheck.Check(t)
	p := start(t, echo(t), 10*time.Millisecond)
	const conns, per = 8, 5000
	var wg sync.WaitGroup
	errs := make(chan error, conns)
	for range conns {
		c := dial(t, p.Addr())
		c.SetDeadline(time.Now().Add(20 * time.Second))
		wg.Add(2)
		go func() {
			defer wg.Done()
			var b [4]byte
			for i := range uint32(per) {
				binary.BigEndian.PutUint32(b[:], i)
				if _, err := c.Write(b[:]); err != nil {
					errs <- err
					return
				}
			}
		}()
		go func() {
			defer wg.Done()
			r := bufio.NewReader(c)
			var b [4]byte
			for i := range uint32(per) {
				if _, err := io.ReadFull(r, b[:]); err != nil {
					errs <- err
					return
				}
				if got := binary.BigEndian.Uint32(b[:]); got != i {
					errs <- errors.New("out of order")
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		assert.NoError(t, err)
	}
	assert.Equal(t, int64(conns*per*4*2), p.Bytes())
}

func TestCutHeal(t *testing.T) {
	leakcheck.Check(t)
	p := start(t, echo(t), 0)
	before := dial(t, p.Addr())
	_, err := roundTrip(before, []byte("a"), time.Second)
	require.NoError(t, err)

	p.Cut()
	// The connection open at the cut is closed.
	assertClosed(t, before)
	// A new one is accepted and held: nothing comes back.
	during := dial(t, p.Addr())
	_, err = roundTrip(during, []byte("b"), 200*time.Millisecond)
	var ne net.Error
	require.ErrorAs(t, err, &ne)
	assert.True(t, ne.Timeout())

	p.Heal()
	// The one held is closed, and new ones forward again.
	assertClosed(t, during)
	after := dial(t, p.Addr())
	_, err = roundTrip(after, []byte("c"), time.Second)
	assert.NoError(t, err)
}

// assertClosed checks the proxy closed c: a read ends at once, with EOF or
// a reset, not at the deadline.
func assertClosed(t *testing.T, c net.Conn) {
	t.Helper()
	c.SetDeadline(time.Now().Add(time.Second))
	_, err := io.ReadAll(c)
	var ne net.Error
	assert.False(t, errors.As(err, &ne) && ne.Timeout(), "closed, not timed out: %v", err)
}

func TestClose(t *testing.T) {
	leakcheck.Check(t)
	p, err := Start(echo(t), 30*time.Millisecond)
	require.NoError(t, err)
	c := dial(t, p.Addr())
	_, err = c.Write([]byte("in flight"))
	require.NoError(t, err)
	p.Cut()
	held := dial(t, p.Addr())
	require.NoError(t, p.Close())
	assert.NoError(t, p.Close(), "Close is idempotent")
	assertClosed(t, c)
	assertClosed(t, held)
	_, err = net.DialTimeout("tcp", p.Addr(), 200*time.Millisecond)
	assert.Error(t, err, "nothing listens after Close")
}
