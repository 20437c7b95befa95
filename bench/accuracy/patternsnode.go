package accuracy

import (
	"bufio"
	"container/heap"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hybridlimit/hybridlimit/hybrid"
	"github.com/hybridlimit/hybridlimit/internal/localx"
)

// Event is one decision of the api-patterns workload, as a node logs it in
// its .pat file (fixed-size, little-endian). Times are µs since T0.
type Event struct {
	Sched  uint32 // when it was due (a retry: the decision before it, plus its RetryAfter)
	Start  uint32 // when the call was made, by the node's clock
	End    uint32 // when it returned
	Key    uint32 // the user's (client's) id in its stream
	IP     uint32 // two rules: the IP's id
	Reset  uint32 // ResetAfter, µs (two rules: the user rule's)
	Retry  uint32 // RetryAfter, µs (two rules: the longest of the two)
	Window int32  // the window it counted in: fixed window by its ResetAfter (windowOf), else by the node's clock
	Want   uint32 // retry: the client's request index
	Stream uint8
	Flags  uint8 // evAllowed, evWaited, evDegraded
	Reason uint8 // the user rule's local.Reason (bits 0-3); two rules: the IP rule's (bits 4-7)
	Phase  uint8 // limit change: the phase in force when it was decided
	// Attempt is 0 for a first try, n for a retry pattern's n-th retry.
	Attempt uint8
	Node    uint8
	_       [2]byte
}

// The bits of Event.Flags.
const (
	evAllowed  = 1 << iota // admitted
	evWaited               // the decision waited for a lease (those hybridlimit.lease.waits counts)
	evDegraded             // decided by a failure policy without Redis
)

// Allowed reports whether the request was admitted.
func (e Event) Allowed() bool { return e.Flags&evAllowed != 0 }

// Waited reports whether the decision waited for a lease.
func (e Event) Waited() bool { return e.Flags&evWaited != 0 }

// WriteEvents writes evs to path.
func WriteEvents(path string, evs []Event) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := bufio.NewWriterSize(f, 1<<20)
	if err := binary.Write(w, binary.LittleEndian, evs); err != nil {
		f.Close()
		return err
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// ReadEvents reads a .pat file.
func ReadEvents(path string) ([]Event, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	size := binary.Size(Event{})
	if len(data)%size != 0 {
		return nil, fmt.Errorf("accuracy: %s: %d bytes, not a whole number of events", path, len(data))
	}
	evs := make([]Event, len(data)/size)
	if err := binary.Read(bytesReader(data), binary.LittleEndian, evs); err != nil {
		return nil, fmt.Errorf("accuracy: %s: %w", path, err)
	}
	return evs, nil
}

// bytesReader is an io.Reader over b.
func bytesReader(b []byte) io.Reader { return &byteReader{b: b} }

type byteReader struct{ b []byte }

func (r *byteReader) Read(p []byte) (int, error) {
	if len(r.b) == 0 {
		return 0, io.EOF
	}
	n := copy(p, r.b)
	r.b = r.b[n:]
	return n, nil
}

// arrivalHeap orders the arrivals a node learns of while it runs (the
// retry pattern's, sent by whichever node decided the request before) by
// due time.
type arrivalHeap []patArrival

func (h arrivalHeap) Len() int           { return len(h) }
func (h arrivalHeap) Less(i, j int) bool { return h[i].At < h[j].At }
func (h arrivalHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *arrivalHeap) Push(x any)        { *h = append(*h, x.(patArrival)) }
func (h *arrivalHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// dynQueue is a node's queue of arrivals learned while it runs: the
// workers and the socket's reader push, the generator pops. Safe for
// concurrent use.
type dynQueue struct {
	mu   sync.Mutex
	h    arrivalHeap
	wake chan struct{} // a push, for a generator waiting on a later arrival
}

func (q *dynQueue) push(a patArrival) {
	q.mu.Lock()
	heap.Push(&q.h, a)
	q.mu.Unlock()
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

// peek returns the earliest arrival, if any.
func (q *dynQueue) peek() (patArrival, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.h) == 0 {
		return patArrival{}, false
	}
	return q.h[0], true
}

func (q *dynQueue) pop() patArrival {
	q.mu.Lock()
	defer q.mu.Unlock()
	return heap.Pop(&q.h).(patArrival)
}

// The wire form of a patArrival between nodes.
const arrivalWire = 20

func encodeArrival(b []byte, a patArrival) {
	binary.LittleEndian.PutUint32(b[0:], a.At)
	binary.LittleEndian.PutUint32(b[4:], a.Key)
	binary.LittleEndian.PutUint32(b[8:], a.IP)
	binary.LittleEndian.PutUint32(b[12:], a.Want)
	b[16], b[17], b[18], b[19] = a.Stream, a.Node, a.Change, a.Attempt
}

func decodeArrival(b []byte) patArrival {
	return patArrival{
		At: binary.LittleEndian.Uint32(b[0:]), Key: binary.LittleEndian.Uint32(b[4:]), IP: binary.LittleEndian.Uint32(b[8:]),
		Want: binary.LittleEndian.Uint32(b[12:]), Stream: b[16], Node: b[17], Change: b[18], Attempt: b[19],
	}
}

// nodeSocket names node n's socket for run s: a Linux abstract Unix
// socket, so that nothing is left in the file system.
func nodeSocket(s Spec, n int) *net.UnixAddr {
	return &net.UnixAddr{Name: fmt.Sprintf("@hybridlimit-accuracy-%s-%d-n%d", s.ID, s.T0, n), Net: "unixgram"}
}

// patRequestTimeout bounds a hybrid decision that waits for a lease, as a
// server's request deadline would.
const patRequestTimeout = time.Second

// patNode is one node process of the api-patterns workload.
type patNode struct {
	spec    Spec
	node    int
	l       *hybrid.Limiter
	rules   [][2]*hybrid.Rule // per stream: the user's rule, and the IP's (two rules)
	limits  [][]localx.Limit  // the limit-change streams' limits, per phase
	clients [][]RetryClient
	q       dynQueue
	conn    *net.UnixConn
	peers   []*net.UnixAddr

	mu    sync.RWMutex // a limit change excludes decisions, so each knows its phase
	phase atomic.Int32

	sent, received, lost atomic.Int64
	sendErr              atomic.Pointer[string] // the first send that failed
	unav, errs           atomic.Int64
	firstErr             atomic.Pointer[string]
}

// patWorker is what one worker goroutine records.
type patWorker struct {
	evs        []Event
	lat, waits Slices
}

// runPatternsNode is RunNode for the api-patterns workload: a generator
// hands each arrival, on time, to Spec.Workers goroutines that decide it
// (in hybrid mode too, so that requests that wait for a lease wait side by
// side, as a server's would), and the retry pattern's next requests go to
// the node they are for over a Unix datagram socket. It writes out+".pat"
// (the events) and out+".json" (its NodeSummary).
func runPatternsNode(spec Spec, node int, out string) error {
	sched, clients := spec.patternsSchedule(node)
	p := &patNode{spec: spec, node: node, clients: clients, rules: make([][2]*hybrid.Rule, numStreams), limits: make([][]localx.Limit, numStreams)}
	p.q.wake = make(chan struct{}, 1)
	rs := &rounds{t0: spec.T0}
	cc := &cmdCounter{}
	ctx := context.Background()
	if spec.Mode != ModeCentral && spec.Mode != ModeHybrid {
		return fmt.Errorf("node %d: the api-patterns workload runs central or hybrid, not %q", node, spec.Mode)
	}
	client := nodeClient(spec)
	defer client.Close()
	client.AddHook(cc)
	if err := client.Ping(ctx).Err(); err != nil {
		return fmt.Errorf("node %d: redis: %w", node, err)
	}
	l, err := newLimiter(spec, node, client, "acc:"+spec.ID, rs)
	if err != nil {
		return err
	}
	p.l = l
	defer l.Close()
	mode := hybrid.Hybrid
	if spec.Mode == ModeCentral {
		mode = hybrid.Central
	}
	modeRun := ""
	for st := range numStreams {
		sm := streamOf(st)
		user, ip, err := patLimit(sm, 0)
		if err != nil {
			return err
		}
		for j, lim := range []localx.Limit{user, ip} {
			if !lim.Valid() {
				continue
			}
			r := hybrid.Rule{Name: "pat-" + sm.pattern + "-" + sm.algo + []string{"", "-ip"}[j], Limit: lim.Params(), Mode: mode}
			if mode == hybrid.Hybrid {
				if err := setWait(&r, spec.Wait); err != nil {
					return err
				}
			}
			if p.rules[st][j], err = l.Register(r); err != nil {
				return err
			}
			if m := p.rules[st][j].Mode.String(); modeRun == "" || m != spec.Mode {
				modeRun = m
			}
		}
		if sm.pattern == PatChange {
			for ph := range PatPhases {
				lim, _, err := patLimit(sm, ph)
				if err != nil {
					return err
				}
				p.limits[st] = append(p.limits[st], lim)
			}
		}
	}

	if p.conn, err = net.ListenUnixgram("unixgram", nodeSocket(spec, node)); err != nil {
		return fmt.Errorf("node %d: %w", node, err)
	}
	for n := range spec.Nodes {
		p.peers = append(p.peers, nodeSocket(spec, n))
	}
	go p.receive()

	T0 := spec.T0
	endRel := spec.Duration().Microseconds()
	deadline := endRel + grace.Microseconds()
	work := make(chan patArrival, 4096)
	workers := make([]*patWorker, spec.Workers)
	var wg sync.WaitGroup
	for i := range workers {
		w := &patWorker{}
		workers[i] = w
		wg.Add(1)
		go func() {
			defer wg.Done()
			for a := range work {
				p.decide(w, a)
			}
		}()
	}
	var changes []int64
	scheduled := 0
	time.Sleep(time.Until(time.UnixMicro(T0)))
	cpu0 := cpuTime()
	timer := time.NewTimer(time.Hour)
	i := 0
	for {
		now := time.Now().UnixMicro() - T0
		if now > deadline {
			break
		}
		// The earliest of the schedule's next arrival and the queue's.
		next, fromQueue, have := patArrival{}, false, false
		if i < len(sched) {
			next, have = sched[i], true
		}
		if d, ok := p.q.peek(); ok && (!have || d.At < next.At) {
			next, fromQueue, have = d, true, true
		}
		if !have || int64(next.At) > now {
			wait := deadline - now
			if have {
				wait = min(wait, int64(next.At)-now)
			}
			timer.Reset(time.Duration(wait) * time.Microsecond)
			select {
			case <-timer.C:
			case <-p.q.wake:
				timer.Stop() // no stale tick after Stop (Go 1.23 timers)
			}
			continue
		}
		if fromQueue {
			p.q.pop()
		} else {
			i++
		}
		if next.Change > 0 {
			changes = append(changes, p.change(int(next.Change)))
			continue
		}
		if int64(next.At) < endRel {
			scheduled++
		}
		work <- next
	}
	close(work)
	wg.Wait()
	cpu := cpuTime() - cpu0
	p.conn.Close()
	sctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	if err := l.Shutdown(sctx); err != nil {
		p.noteErr(fmt.Errorf("shutdown: %w", err))
	}
	cancel()

	sum := &NodeSummary{Node: node, ModeRun: modeRun, Scheduled: scheduled, CPU: cpu, Changes: changes}
	var evs []Event
	for _, w := range workers {
		evs = append(evs, w.evs...)
		sum.Latency = mergeSlices(sum.Latency, w.lat)
		sum.Waits = mergeSlices(sum.Waits, w.waits)
	}
	for _, e := range evs {
		sum.Reasons[e.Reason&7]++
		if e.Waited() {
			sum.Waited++
		}
	}
	sum.Decided = len(evs)
	sum.Errors = int(p.errs.Load())
	sum.Unavailable = p.unav.Load()
	sum.Sent, sum.Received, sum.Lost = p.sent.Load(), p.received.Load(), p.lost.Load()
	if s := p.firstErr.Load(); s != nil {
		sum.FirstErr = *s
	} else if s := p.sendErr.Load(); s != nil {
		sum.FirstErr = *s
	}
	sum.Rounds = rs.times()
	sum.RoundKeys = rs.keys.Load()
	sum.Redis = cc.snapshot()
	sum.Latency.Trim()
	sum.Waits.Trim()
	if err := WriteEvents(out+".pat", evs); err != nil {
		return err
	}
	return WriteSummary(out+".json", sum)
}

// mergeSlices adds b's histograms into a's, second by second.
func mergeSlices(a, b Slices) Slices {
	for i, h := range b {
		for len(a) <= i {
			a = append(a, nil)
		}
		a[i].merge(h)
	}
	return a
}

// receive reads the arrivals other nodes send into the queue, until the
// socket is closed.
func (p *patNode) receive() {
	buf := make([]byte, 64)
	for {
		n, _, err := p.conn.ReadFromUnix(buf)
		if err != nil {
			return
		}
		if n == arrivalWire {
			p.received.Add(1)
			p.q.push(decodeArrival(buf))
		}
	}
}

// send hands a to the node it is for: this node's own queue, or another's
// socket.
func (p *patNode) send(a patArrival) {
	if int(a.Node) == p.node {
		p.q.push(a)
		return
	}
	var b [arrivalWire]byte
	encodeArrival(b[:], a)
	// A busy node's socket queue is short (net.unix.max_dgram_qlen, often
	// 10): a full one refuses with EAGAIN, so try again for a while.
	var err error
	for range sendTries {
		if _, err = p.conn.WriteToUnix(b[:], p.peers[a.Node]); err == nil {
			p.sent.Add(1)
			return
		}
		if !errors.Is(err, syscall.EAGAIN) && !errors.Is(err, syscall.ENOBUFS) {
			break
		}
		time.Sleep(sendBackoff)
	}
	p.lost.Add(1)
	s := "send to node " + strconv.Itoa(int(a.Node)) + ": " + err.Error()
	p.sendErr.CompareAndSwap(nil, &s)
}

// How often, and how far apart, a node tries to send a retry request to a
// node whose socket queue is full: up to a second in all.
const (
	sendTries   = 2000
	sendBackoff = 500 * time.Microsecond
)

// change moves the limit-change streams into phase ph, every decision
// excluded meanwhile, and returns when it was done (µs since T0).
func (p *patNode) change(ph int) int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	for st := range numStreams {
		if len(p.limits[st]) > ph {
			if err := p.l.SetLimit(p.rules[st][0], p.limits[st][ph].Params()); err != nil {
				p.noteErr(err)
			}
		}
	}
	p.phase.Store(int32(ph))
	return time.Now().UnixMicro() - p.spec.T0
}

func (p *patNode) noteErr(err error) {
	if err != nil && !errors.Is(err, context.Canceled) {
		p.errs.Add(1)
		s := err.Error()
		p.firstErr.CompareAndSwap(nil, &s)
	}
}

// decide decides arrival a and records it in w; for the retry pattern it
// sends the client's next request on.
func (p *patNode) decide(w *patWorker, a patArrival) {
	st := streamOf(int(a.Stream))
	ctx := context.Background()
	if p.spec.Mode == ModeHybrid {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, patRequestTimeout)
		defer cancel()
	}
	user := "u" + strconv.FormatUint(uint64(a.Key), 10)
	T0 := p.spec.T0
	p.mu.RLock()
	var phase uint8
	if st.pattern == PatChange {
		phase = uint8(p.phase.Load())
	}
	t0 := time.Now()
	var d hybrid.Decision
	var allowed, degraded, wt bool
	var reason uint8
	var retry time.Duration
	var err error
	if st.pattern == PatMulti {
		reqs := [2]hybrid.Request{
			{Rule: p.rules[a.Stream][0], Key: user, N: 1},
			{Rule: p.rules[a.Stream][1], Key: "ip" + strconv.FormatUint(uint64(a.IP), 10), N: 1},
		}
		var out [2]hybrid.Decision
		allowed, err = p.l.AllowMulti(ctx, reqs[:], out[:])
		d = out[0]
		reason = uint8(out[0].Reason())&0xF | uint8(out[1].Reason())<<4
		retry = max(out[0].RetryAfter(), out[1].RetryAfter())
		degraded = out[0].Degraded() || out[1].Degraded()
		wt = waited(out[0]) || waited(out[1])
	} else {
		d, err = p.l.Allow(ctx, p.rules[a.Stream][0], user)
		allowed, reason, retry, degraded, wt = d.Allowed(), uint8(d.Reason())&0xF, d.RetryAfter(), d.Degraded(), waited(d)
	}
	t1 := time.Now()
	p.mu.RUnlock()
	if degraded || (err != nil && errors.Is(err, hybrid.ErrUnavailable)) {
		p.unav.Add(1)
		if errors.Is(err, hybrid.ErrUnavailable) {
			err = nil
		}
	}
	p.noteErr(err)
	start, end := t0.UnixMicro()-T0, t1.UnixMicro()-T0
	if wt {
		w.waits.Add(start, t1.Sub(t0))
	} else {
		w.lat.Add(start, t1.Sub(t0))
	}
	// The window a fixed-window decision counted in, from its ResetAfter on
	// the clock it was decided by; the decision's time is its return for a
	// central round trip or a wait, else its call.
	at := t0.UnixMicro()
	if p.spec.Mode == ModeCentral || wt {
		at = t1.UnixMicro()
	}
	reset := d.ResetAfter()
	if st.algo != AlgoFixed {
		reset = 0
	}
	e := Event{
		Sched: a.At, Start: uint32(start), End: uint32(end), Key: a.Key, IP: a.IP,
		Reset: uint32(d.ResetAfter().Microseconds()), Retry: uint32(retry.Microseconds()),
		Window: windowOf(at, reset, T0, p.spec.W()), Want: a.Want, Stream: a.Stream, Reason: reason,
		Phase: phase, Attempt: a.Attempt, Node: uint8(p.node),
	}
	if allowed {
		e.Flags |= evAllowed
	}
	if wt {
		e.Flags |= evWaited
	}
	if degraded {
		e.Flags |= evDegraded
	}
	w.evs = append(w.evs, e)
	if st.pattern == PatRetry {
		c := p.clients[a.Stream][a.Key]
		next, ok := nextRetry(p.spec.Seed, p.spec.Nodes, c, a, allowed, float64(end), float64(retry.Microseconds()),
			float64(p.spec.W()), float64(p.spec.Duration().Microseconds()))
		if ok {
			p.send(next)
		}
	}
}
