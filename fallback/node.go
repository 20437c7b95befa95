package fallback

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/memberlist"

	"github.com/hybridlimit/hybridlimit/internal/gossiphook"
)

// node is one member of the gossip cluster, the gossiphook.Node a
// hybrid.Limiter runs: it gossips this node's per-key counts and demand,
// keeps its peers', and answers Estimate from a snapshot rebuilt every
// Config.Interval. Observe, Report and Estimate are safe for concurrent use
// and meant for the hot path; Estimate neither allocates nor locks. A node
// runs from startNode until Close.
type node struct {
	cfg   config
	ml    *memberlist.Memberlist
	name  string
	log   *slog.Logger
	table *table
	queue *memberlist.TransmitLimitedQueue

	snap  atomic.Pointer[snapshot]
	stale atomic.Bool // records or members changed since the last snapshot

	memMu sync.Mutex        // guards mem, seen, least and left
	mem   map[string]string // members' names and addresses, from events
	// seen are the members seen since Redis was last reachable, but those
	// that left, while it is not (nil while it is); least is the least
	// member count to assume meanwhile (see Outage and liveMembers).
	seen  map[string]bool
	least int
	left  map[string]bool // members that announced they are leaving

	mu     sync.Mutex         // guards remote and nrec
	remote map[digest][]*peer // peers' records by key
	nrec   int

	keyring *memberlist.Keyring
	own     atomic.Pointer[[]record] // this node's records as last queued

	// ownPast are this node's past record sets, oldest first, so that a
	// snapshot counts its own records as old as the peers' it holds (see
	// rebuild and peerAge); lag is the moving average of how long peers'
	// records take to arrive (ns). Both belong to the loop, but lag, which delegates
	// update under mu.
	ownPast []ownAt
	lag     float64

	stats struct {
		bytesSent, bytesReceived     atomic.Uint64
		recordsSent, recordsReceived atomic.Uint64
		recordsDropped, malformed    atomic.Uint64
		members                      atomic.Int64
	}

	leaving   atomic.Bool // Close has begun: the node's meta says so
	stop      chan struct{}
	done      chan struct{}
	closeOnce sync.Once
	closeErr  error
	closed    atomic.Bool
}

// ownAt is this node's record set as queued at a time (unix ns).
type ownAt struct {
	at   int64
	recs *[]record
}

// peer is a peer's record as this node holds it.
type peer struct {
	record
	at int64 // unix nanoseconds when it arrived
}

// snapshot is what Estimate reads: built off the hot path, never changed
// once published.
type snapshot struct {
	keys    map[digest]estimate
	members int
}

var _ gossiphook.Node = (*node)(nil)

// startNode starts a node: memberlist on the configured address, and the
// loop that gossips and rebuilds the snapshot. It joins cfg.Seeds but does
// not fail when none answers (they are joined again every RejoinInterval).
//
// startNode works on a copy of cfg with its zero fields set to their
// defaults, and reports a bad field with an error wrapping
// gossiphook.ErrInvalidConfig.
func startNode(cfg config) (*node, error) {
	c := cfg.clone().withDefaults()
	if err := c.validate(); err != nil {
		return nil, err
	}
	mlc, err := c.memberlistConfig()
	if err != nil {
		return nil, err
	}
	n := newNode(c, mlc.Name, mlc.RetransmitMult)
	mlc.Delegate = delegate{n}
	if mlc.Events != nil {
		mlc.Events = events{n, mlc.Events}
	} else {
		mlc.Events = events{n: n}
	}
	n.keyring = mlc.Keyring
	ml, err := memberlist.Create(mlc)
	if err != nil {
		return nil, fmt.Errorf("fallback: start memberlist: %w", err)
	}
	n.ml = ml
	n.rebuild(time.Now())
	if len(c.Seeds) > 0 {
		if _, err := ml.Join(c.Seeds); err != nil {
			n.log.Warn("fallback: join seeds", "err", err)
		}
	}
	go n.run()
	return n, nil
}

// newNode returns a node's state without memberlist or the loop.
func newNode(c config, name string, retransmitMult int) *node {
	n := &node{
		cfg:    c,
		name:   name,
		log:    c.Logger,
		table:  newTable(c.MaxKeys),
		remote: make(map[digest][]*peer),
		mem:    map[string]string{name: ""},
		left:   map[string]bool{},
		stop:   make(chan struct{}),
		done:   make(chan struct{}),
	}
	if n.log == nil {
		n.log = slog.New(slog.DiscardHandler)
	}
	n.queue = &memberlist.TransmitLimitedQueue{
		NumNodes:       func() int { return max(int(n.stats.members.Load()), 1) },
		RetransmitMult: retransmitMult,
	}
	n.snap.Store(&snapshot{members: 1})
	return n
}

// Observe records that key was asked for asked requests (refused ones
// included) of which admitted were admitted, in window (the caller's window
// id, the same on every node: for fixed and sliding windows the window's
// start divided by its length; 0 for the bucket algorithms). A report for
// an earlier window than the key's latest is counted as demand only. It
// takes a shard's read lock, and allocates only for a key's first
// observation.
func (n *node) Observe(key digest, window, asked, admitted int64) {
	n.table.observe(&key, window, asked, admitted)
}

// Report is Observe with the count absolute: consumed is all this node
// admitted for key in window, as the caller counts it (hybrid's leases do,
// at each sync round, so that nothing is added on the hot path), and limit
// the key's limit per window (0 for the bucket algorithms), which the
// estimate holds the others' claims on (rebuild). A report for an earlier
// window than the key's latest is counted as demand only.
func (n *node) Report(key digest, window, asked, consumed, limit int64) {
	n.table.report(&key, window, asked, consumed, limit)
}

// Members returns the count of members the estimates assume, this node and
// suspected ones included, and while Redis is out of reach those declared
// dead since it was last reachable, as of the last snapshot.
func (n *node) Members() int { return n.snap.Load().members }

// Outage tells the node whether Redis is out of reach. While it is, the
// member count the estimates split by does not fall below least, nor below
// the members seen since Redis was last reachable but those that left: a
// member declared dead may be the far side of a partition, which would
// take the whole limit too were each side to split it among itself.
func (n *node) Outage(down bool, least int) {
	n.memMu.Lock()
	switch {
	case !down:
		n.seen, n.least = nil, 0
	case n.seen == nil:
		n.seen = make(map[string]bool, len(n.mem))
		for name := range n.mem {
			n.seen[name] = true
		}
		fallthrough
	default:
		n.least = least
	}
	n.memMu.Unlock()
	n.stale.Store(true)
}

// Estimate returns this node's share of key's budget from the last
// snapshot, without allocating or locking.
func (n *node) Estimate(key digest) estimate {
	s := n.snap.Load()
	if e, ok := s.keys[key]; ok {
		return e
	}
	return estimate{Share: 1 / float64(s.members), Members: s.members}
}

// Stats returns the node's gossip figures. It is safe for concurrent use
// and does not block on the network.
func (n *node) Stats() gossiphook.Stats {
	return gossiphook.Stats{
		Members:         int(n.stats.members.Load()),
		Keys:            int(n.table.n.Load()),
		BytesSent:       n.stats.bytesSent.Load(),
		BytesReceived:   n.stats.bytesReceived.Load(),
		RecordsSent:     n.stats.recordsSent.Load(),
		RecordsReceived: n.stats.recordsReceived.Load(),
		RecordsDropped:  n.stats.recordsDropped.Load(),
		Malformed:       n.stats.malformed.Load(),
		KeysDropped:     n.table.dropped.Load(),
	}
}

// Name returns this node's name in the cluster.
func (n *node) Name() string { return n.name }

// Addr returns the address and port this node advertises, which peers list
// in Seeds (or pass to Join). With BindPort 0 the port is the one bound.
func (n *node) Addr() string {
	ln := n.ml.LocalNode()
	return net.JoinHostPort(ln.Addr.String(), strconv.Itoa(int(ln.Port)))
}

// Keyring returns the live keyring (AddKey, UseKey, RemoveKey), for the
// tests of key rotation. It is nil when the node runs without encryption.
func (n *node) Keyring() *memberlist.Keyring { return n.keyring }

// Join joins the peers at addrs ("host:port") and returns how many
// answered.
func (n *node) Join(addrs ...string) (int, error) {
	if n.closed.Load() {
		return 0, errClosed
	}
	return n.ml.Join(addrs)
}

// Close leaves the cluster (waiting up to LeaveTimeout for the message to
// reach a peer), shuts memberlist down and stops every goroutine the node
// started. It is idempotent; later calls return the first call's error.
func (n *node) Close() error {
	n.closeOnce.Do(func() {
		n.closed.Store(true)
		close(n.stop)
		<-n.done
		// The peers learn from the node's meta that it leaves, not dies:
		// memberlist tells them only that it is gone.
		// Best effort: a peer that misses it counts the node as absent.
		n.leaving.Store(true)
		if err := n.ml.UpdateNode(n.cfg.LeaveTimeout); err != nil {
			n.log.Debug("fallback: announce leaving", "err", err)
		}
		err := n.ml.Leave(n.cfg.LeaveTimeout)
		n.closeErr = errors.Join(err, n.ml.Shutdown())
	})
	return n.closeErr
}

// run is the node's loop: records out and snapshot rebuilt every Interval,
// missing seeds joined every RejoinInterval.
func (n *node) run() {
	defer close(n.done)
	tick := time.NewTicker(n.cfg.Interval)
	defer tick.Stop()
	var rejoin <-chan time.Time
	if len(n.cfg.Seeds) > 0 {
		t := time.NewTicker(n.cfg.RejoinInterval)
		defer t.Stop()
		rejoin = t.C
	}
	last := time.Now()
	for {
		select {
		case <-n.stop:
			return
		case now := <-tick.C:
			n.publish(now, now.Sub(last).Seconds())
			last = now
			n.expire(now)
			// A newer own record set than the snapshot counts is due in
			// time even when nothing else changed (ownAsOf).
			if n.stale.Swap(false) || len(n.ownPast) > 1 {
				n.rebuild(now)
			}
		case <-rejoin:
			n.rejoin()
		}
	}
}

// rejoin joins the seeds whose address no member advertises.
func (n *node) rejoin() {
	have := map[string]bool{}
	n.memMu.Lock()
	for _, addr := range n.mem {
		have[addr] = true
	}
	n.memMu.Unlock()
	var missing []string
	for _, s := range n.cfg.Seeds {
		if !have[s] {
			missing = append(missing, s)
		}
	}
	if len(missing) == 0 {
		return
	}
	if _, err := n.ml.Join(missing); err != nil {
		n.log.Debug("fallback: rejoin seeds", "err", err)
	}
}

// publish updates each key's demand and queues the records of keys whose
// figures changed (or that are due a refresh), hottest first, at most
// MaxQueued of them; it forgets keys idle for RecordTTL. It publishes this
// node's current records for LocalState.
func (n *node) publish(now time.Time, dt float64) {
	nowNs := now.UnixNano()
	halfLife := n.cfg.DemandHalfLife.Seconds()
	refresh := int64(n.cfg.RecordTTL / 3)
	type due struct {
		e *entry
		r record
	}
	var dues []due
	var idle []digest
	n.table.each(func(k *digest, e *entry) {
		asked := e.asked.Load()
		e.demand = ewma(e.demand, float64(asked-e.lastAsked)/max(dt, 1e-9), dt, halfLife)
		if asked == e.lastAsked && e.demand < 1e-3 {
			e.demand = 0
		}
		e.lastAsked = asked
		window, consumed := e.counts()
		if e.demand > 0 {
			e.idleSince = 0
		} else if e.idleSince == 0 {
			e.idleSince = nowNs
		} else if nowNs-e.idleSince > int64(n.cfg.RecordTTL) {
			idle = append(idle, *k)
			return
		}
		same := e.sent.seq != 0 && window == e.sent.window && consumed == e.sent.consumed
		if same && near(e.demand, e.sent.demand) && (nowNs-e.sentAt < refresh || e.demand == 0) {
			return // unchanged, and fresh or idle
		}
		dues = append(dues, due{e, record{origin: n.name, key: *k, window: window, consumed: consumed,
			demand: e.demand, seq: max(uint64(nowNs), e.sent.seq+1)}})
	})
	n.table.remove(idle)
	slices.SortFunc(dues, func(a, b due) int { return cmp.Compare(b.r.demand, a.r.demand) })
	dues = dues[:min(len(dues), n.cfg.MaxQueued)] // the rest wait for the next round
	buf := make([]byte, 0, len(dues)*maxRecordLen/2)
	for i := range dues {
		d := &dues[i]
		d.e.sent, d.e.sentAt = d.r, nowNs
		start := len(buf)
		buf = appendRecord(buf, &d.r)
		n.enqueue(d.r.key, n.name, buf[start:len(buf):len(buf)])
	}
	n.prune()
	if len(dues) == 0 && len(idle) == 0 {
		return
	}
	n.stale.Store(true)
	own := make([]record, 0, n.table.n.Load())
	n.table.each(func(_ *digest, e *entry) {
		if e.sent.seq != 0 {
			own = append(own, e.sent)
		}
	})
	n.own.Store(&own)
	n.ownPast = append(n.ownPast, ownAt{nowNs, &own})
}

// near reports whether two demands differ by under 5%, so small drifts do
// not flood the cluster.
func near(a, b float64) bool {
	if a == b {
		return true
	}
	return a > 0 && b > 0 && a < b*1.05 && b < a*1.05
}

func (n *node) enqueue(key digest, origin string, msg []byte) {
	n.queue.QueueBroadcast(&broadcast{name: origin + "\x00" + string(key[:]), msg: msg})
}

// prune keeps the queue within MaxQueued, dropping the most-sent records.
func (n *node) prune() {
	if over := n.queue.NumQueued() - n.cfg.MaxQueued; over > 0 {
		n.stats.recordsDropped.Add(uint64(over))
		n.queue.Prune(n.cfg.MaxQueued)
	}
}

// receive stores a peer's record if it is newer than the one held, and
// reports whether it was.
func (n *node) receive(r record, now int64) bool {
	if r.origin == n.name {
		return false
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if d := now - int64(r.seq); d >= 0 && d < int64(maxLag) {
		// seq is the sender's clock when it queued the record.
		n.lag += (float64(d) - n.lag) / 16
	}
	peers := n.remote[r.key]
	for _, p := range peers {
		if p.origin == r.origin {
			if r.seq <= p.seq {
				return false
			}
			p.record, p.at = r, now
			n.stats.recordsReceived.Add(1)
			n.stale.Store(true)
			return true
		}
	}
	if n.nrec >= n.cfg.MaxRecords {
		n.stats.recordsDropped.Add(1)
		return false
	}
	n.remote[r.key] = append(peers, &peer{record: r, at: now})
	n.nrec++
	n.stats.recordsReceived.Add(1)
	n.stale.Store(true)
	return true
}

// expire drops peers' records older than RecordTTL.
func (n *node) expire(now time.Time) {
	cut := now.UnixNano() - int64(n.cfg.RecordTTL)
	n.mu.Lock()
	defer n.mu.Unlock()
	for k, peers := range n.remote {
		kept := peers[:0]
		for _, p := range peers {
			if p.at >= cut {
				kept = append(kept, p)
			}
		}
		clear(peers[len(kept):])
		if len(kept) < len(peers) {
			n.nrec -= len(peers) - len(kept)
			n.stale.Store(true)
		}
		if len(kept) == 0 {
			delete(n.remote, k)
		} else {
			n.remote[k] = kept
		}
	}
}
