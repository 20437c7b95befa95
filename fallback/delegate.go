package fallback

import (
	"bytes"
	"cmp"
	"slices"
	"time"

	"github.com/hashicorp/memberlist"
)

// broadcast is one record in memberlist's queue, named by origin and key so
// a newer record replaces the older one still queued.
type broadcast struct {
	name string
	msg  []byte
}

var _ memberlist.NamedBroadcast = (*broadcast)(nil)

// Name returns origin and key: the record's identity in the queue.
func (b *broadcast) Name() string { return b.name }

// Invalidates reports whether o is an older record of the same origin and
// key.
func (b *broadcast) Invalidates(o memberlist.Broadcast) bool {
	nb, ok := o.(memberlist.NamedBroadcast)
	return ok && nb.Name() == b.name
}

// Message returns the encoded record.
func (b *broadcast) Message() []byte { return b.msg }

// Finished is called when the record leaves the queue; nothing to do.
func (b *broadcast) Finished() {}

// delegate is memberlist's view of a node. Its methods run on memberlist's
// goroutines and must not block: each takes n.mu at most briefly.
type delegate struct{ n *node }

var _ memberlist.Delegate = delegate{}

// metaLeaving is the meta of a node that is leaving the cluster.
var metaLeaving = []byte{1}

// NodeMeta is empty but for a node that is leaving (Close): its peers then
// drop it from the member count when it is gone, where they would keep
// counting a member declared dead while Redis is out of reach.
func (d delegate) NodeMeta(int) []byte {
	if d.n.leaving.Load() {
		return metaLeaving
	}
	return nil
}

// NotifyMsg takes a peer's record; a newer one is stored and passed on once,
// so it reaches every member and not only those its origin picked.
func (d delegate) NotifyMsg(b []byte) {
	n := d.n
	r, err := decodeRecord(b)
	if n.arrived(len(b), err) != nil {
		return
	}
	if n.receive(r, time.Now().UnixNano()) {
		n.enqueue(r.key, r.origin, appendRecord(make([]byte, 0, maxRecordLen), &r))
		n.prune()
	}
}

// arrived counts a message of size bytes, and a malformed one, and returns
// err.
func (n *node) arrived(size int, err error) error {
	n.stats.bytesReceived.Add(uint64(size))
	if err != nil {
		n.stats.malformed.Add(1)
		n.stats.recordsDropped.Add(1)
	}
	return err
}

func (d delegate) GetBroadcasts(overhead, limit int) [][]byte {
	msgs := d.n.queue.GetBroadcasts(overhead, limit)
	for _, m := range msgs {
		d.n.stats.bytesSent.Add(uint64(len(m)))
	}
	d.n.stats.recordsSent.Add(uint64(len(msgs)))
	return msgs
}

// LocalState sends this node's records and its peers', hottest first, at
// most MaxStateRecords: the repair path for lost packets.
func (d delegate) LocalState(bool) []byte {
	n := d.n
	var recs []*record
	if own := n.own.Load(); own != nil {
		for i := range *own {
			recs = append(recs, &(*own)[i])
		}
	}
	n.mu.Lock()
	for _, peers := range n.remote {
		for _, p := range peers {
			r := p.record
			recs = append(recs, &r)
		}
	}
	n.mu.Unlock()
	slices.SortFunc(recs, func(a, b *record) int { return cmp.Compare(b.demand, a.demand) })
	recs = recs[:min(len(recs), n.cfg.MaxStateRecords)]
	b := appendState(nil, recs)
	n.stats.bytesSent.Add(uint64(len(b)))
	n.stats.recordsSent.Add(uint64(len(recs)))
	return b
}

func (d delegate) MergeRemoteState(b []byte, _ bool) {
	n := d.n
	recs, err := decodeState(b)
	n.arrived(len(b), err)
	now := time.Now().UnixNano()
	for _, r := range recs {
		n.receive(r, now)
	}
}

// events keeps the member list from memberlist's notifications, which it
// makes under its own lock (reading memberlist's Members outside that lock
// races with its updates), and passes them on to the caller's delegate.
// It must not block.
type events struct {
	n    *node
	next memberlist.EventDelegate
}

var _ memberlist.EventDelegate = events{}

func (e events) NotifyJoin(m *memberlist.Node) {
	e.set(m)
	if e.next != nil {
		e.next.NotifyJoin(m)
	}
}

func (e events) NotifyUpdate(m *memberlist.Node) {
	e.set(m)
	if e.next != nil {
		e.next.NotifyUpdate(m)
	}
}

// NotifyLeave drops m from the members; and from those seen during an
// outage if it announced it was leaving: memberlist's event does not say
// whether a member left or died (it leaves m.State unset).
func (e events) NotifyLeave(m *memberlist.Node) {
	n := e.n
	n.memMu.Lock()
	delete(n.mem, m.Name)
	if n.left[m.Name] {
		delete(n.left, m.Name)
		delete(n.seen, m.Name)
	}
	n.memMu.Unlock()
	e.n.stale.Store(true)
	if e.next != nil {
		e.next.NotifyLeave(m)
	}
}

// set records m as a member, and whether it is leaving (its meta).
func (e events) set(m *memberlist.Node) {
	n := e.n
	n.memMu.Lock()
	n.mem[m.Name] = m.Address()
	if n.seen != nil {
		n.seen[m.Name] = true
	}
	if bytes.Equal(m.Meta, metaLeaving) {
		n.left[m.Name] = true
	} else {
		delete(n.left, m.Name)
	}
	n.memMu.Unlock()
	n.stale.Store(true)
}
