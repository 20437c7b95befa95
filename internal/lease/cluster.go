package lease

import (
	"sync"
	"sync/atomic"

	"github.com/hybridlimit/hybridlimit/internal/keyed"
)

// Cluster is what the sync rounds learn of the cluster and the leases read:
// the live nodes and Redis's clock. It also holds the keys handed from the
// hot path to the syncer (Rule.Notify), and the signals that wake the
// syncer's loop. One Cluster is shared by a syncer and all its Rules; it is
// safe for concurrent use.
type Cluster struct {
	least int64        // the nodes to assume at least (SyncConfig.Nodes)
	nodes atomic.Int64 // live nodes as the registry last counted them
	// offset is Redis time − node time, the best measure the replies gave
	// (clock): a new key starts from it until its own first reply, so that
	// its first decisions already fall in Redis's windows, not the node
	// clock's.
	offset atomic.Int64
	// regions is the regions' count the global store gave, for the rules
	// of global reach; 0: unknown, or none.
	regions atomic.Int64
	clock   struct {
		sync.Mutex
		offset, unc, at int64 // the best measure, its uncertainty, and the node time it was made at
	}
	// outage is the Redis time (µs, estimated) of the last round that
	// found Redis unreachable; 0 before any. partial is that of the last
	// exchange that found a Cluster master unreachable while the others
	// answered: it touches only the keys whose exchanges failed.
	outage, partial atomic.Int64

	// round is closed when a round's replies are applied (RoundDone), for
	// the requests that wait for a lease; nil until one waits.
	round atomic.Pointer[chan struct{}]

	queues [queueShards]queue
	first  queue // keys for the next first-lease round
	// soon holds the keys of the syncer's set that want an exchange before
	// the next regular round (urgent, or waited for): an early round looks
	// after them without going over every key of the set.
	soon      queue
	wake      chan struct{}
	wakeFirst chan struct{}
	// woken counts the takings of wake's signal (Wanted, WakeTaken): a
	// key signals once between two (Lease.woke), not at every refusal.
	woken atomic.Uint32
	// waiting is set when a key a request waits for joins the list of the
	// next first-lease round (TakeWaiting).
	waiting atomic.Bool
	// asleep: the syncer's loop, with no key to look after, runs its next
	// regular round only to register again; a key handed over wakes it
	// (Sleep, Notify).
	asleep atomic.Bool
}

// NewCluster returns a Cluster that assumes at least least live nodes.
func NewCluster(least int) *Cluster {
	return &Cluster{least: int64(least), wake: make(chan struct{}, 1), wakeFirst: make(chan struct{}, 1)}
}

// Nodes returns the number of live nodes, as last counted, and at least the
// number the Cluster was made with.
func (c *Cluster) Nodes() int64 { return max(c.nodes.Load(), c.least) }

// SetNodes records the live nodes as counted.
func (c *Cluster) SetNodes(n int64) { c.nodes.Store(n) }

// Regions returns the regions' count as last read (the rules of global
// reach); 0 when unknown.
func (c *Cluster) Regions() int64 { return c.regions.Load() }

// SetRegions records the regions' count as read.
func (c *Cluster) SetRegions(n int64) { c.regions.Store(n) }

// Offset returns Redis time − node time, as best measured.
func (c *Cluster) Offset() int64 { return c.offset.Load() }

// driftPer is how long the node's and Redis's clocks take to drift 1µs
// apart, at most (100 ppm): a measure of their offset grows that much less
// certain as it ages.
const driftPer = 10_000

// Measure takes a measure of Redis time − node time, offset, made at node
// time now from a reply whose send and receipt were 2 × unc apart (the
// midpoint of the two is taken for the time Redis read its clock, so the
// error is at most unc), and returns the offset to use for the key it
// came from. A measure at least as certain as the best one, aged, becomes
// the best; a less certain one that agrees with the best within the two
// uncertainties is replaced by it: a reply late in a long pipeline, which
// Redis ran well after the midpoint, does not put the key's clock off. One
// that disagrees (another master of a Cluster, with a clock of its own) is
// the key's.
func (c *Cluster) Measure(offset, unc, now int64) int64 {
	b := &c.clock
	b.Lock()
	defer b.Unlock()
	aged := b.unc + max(now-b.at, 0)/driftPer
	switch {
	case b.at == 0 || unc <= aged:
		b.offset, b.unc, b.at = offset, unc, now
		c.offset.Store(offset)
		return offset
	case abs(offset-b.offset) <= unc+aged:
		return b.offset
	}
	return offset
}

func abs(x int64) int64 {
	if x < 0 {
		return -x
	}
	return x
}

// Wake is signalled when a key asks for an early round.
func (c *Cluster) Wake() <-chan struct{} { return c.wake }

// WakeFirst is signalled when a key asks for a first-lease round.
func (c *Cluster) WakeFirst() <-chan struct{} { return c.wakeFirst }

// Wanted reports, and clears, whether a key asked for an early round.
func (c *Cluster) Wanted() bool {
	if !wanted(c.wake) {
		return false
	}
	c.WakeTaken()
	return true
}

// WakeTaken records that the signal of Wake was received: the keys that
// want an early round signal again at their next decision.
func (c *Cluster) WakeTaken() { c.woken.Add(1) }

// TakeWaiting reports, and clears, whether a key that a request waits for
// joined the next first-lease round since the last call: that round runs
// at once, without waiting FirstGap after the last.
func (c *Cluster) TakeWaiting() bool { return c.waiting.Swap(false) }

// WantedFirst reports, and clears, whether a key asked for a first-lease
// round.
func (c *Cluster) WantedFirst() bool { return wanted(c.wakeFirst) }

// NextRound returns a channel closed once the next round's replies are
// applied. A request that waits for its lease takes it while it holds its
// entry's lock, so that a reply applied after its decision wakes it.
func (c *Cluster) NextRound() <-chan struct{} {
	for {
		if p := c.round.Load(); p != nil {
			return *p
		}
		ch := make(chan struct{})
		if c.round.CompareAndSwap(nil, &ch) {
			return ch
		}
	}
}

// RoundDone wakes the requests waiting for a round (NextRound): the syncer
// calls it after each round, answered or failed.
func (c *Cluster) RoundDone() {
	if p := c.round.Swap(nil); p != nil {
		close(*p)
	}
}

const queueShards = 16

// Handed is a key handed to the syncer, with the rule it was decided under.
type Handed struct {
	Rule  *Rule
	Entry *keyed.Entry[Lease]
}

type queue struct {
	mu    sync.Mutex
	items []Handed
	_     [64 - 8 - 24]byte // a cache line each: shards are pushed to from every core
}

func (q *queue) push(r *Rule, e *keyed.Entry[Lease]) {
	q.mu.Lock()
	q.items = append(q.items, Handed{r, e})
	q.mu.Unlock()
}

// pending reports whether q holds keys.
func (q *queue) pending() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.items) > 0
}

// take empties q and returns what it held.
func (q *queue) take() []Handed {
	q.mu.Lock()
	items := q.items
	q.items = nil
	q.mu.Unlock()
	return items
}

// TakeHanded empties the queues of keys handed over for the next round and
// returns them; f sees each, in no set order.
func (c *Cluster) TakeHanded(f func(Handed)) {
	for i := range c.queues {
		for _, h := range c.queues[i].take() {
			f(h)
		}
	}
}

// Sleep records that the syncer's loop, with no key to look after, will
// run its next regular round only to register again, later than the
// interval: the next key handed over (Notify) wakes it. It returns false,
// awake, if a key was handed over since the last round took them. (Notify
// pushes, then reads asleep; Sleep sets asleep, then reads the queues: one
// of the two sees the other.)
func (c *Cluster) Sleep() bool {
	c.asleep.Store(true)
	for i := range c.queues {
		if c.queues[i].pending() {
			c.asleep.Store(false)
			return false
		}
	}
	return true
}

// Awake records that the syncer's loop runs a round every interval.
func (c *Cluster) Awake() { c.asleep.Store(false) }

// TakeSoon empties the list of the syncer's keys that asked for an early
// round (urgent, or waited for) and returns it; each leaves it (Soon) when
// the syncer looks at it next.
func (c *Cluster) TakeSoon() []Handed { return c.soon.take() }

// TakeFirst empties the list of keys waiting for a first-lease round and
// returns it.
func (c *Cluster) TakeFirst() []Handed { return c.first.take() }

// Notify hands a key to the syncer after Decide or Charge signalled: the
// key joins the next round, which an urgent key (its lease running low)
// brings forward. A key's first request, and a lease granted on a guess
// running low, ask for the next first-lease round instead. The caller holds
// the entry's lock. Notify does not block and, for a key already handed
// over, costs a check.
func (r *Rule) Notify(e *keyed.Entry[Lease]) {
	c, k := r.cluster, &e.Value
	if k.flags&(flagQueued|flagActive) == 0 {
		k.flags |= flagQueued
		c.queues[uintptr(k.Digest[0])%queueShards].push(r, e)
		if c.asleep.Load() && c.asleep.CompareAndSwap(true, false) {
			signal(c.wake) // the loop looks after keys at every interval again
		}
	} else if k.flags&(flagActive|flagSoon) == flagActive && (k.flags&flagUrgent != 0 || k.wait > 0) {
		k.flags |= flagSoon
		c.soon.push(r, e)
	}
	switch {
	case k.WantsFirst(r):
		if k.flags&(flagFirst|flagInFlight) == 0 {
			k.flags |= flagFirst
			c.first.push(r, e)
			if k.wait > 0 {
				c.waiting.Store(true) // a request waits: no gap
			}
			signal(c.wakeFirst)
		}
	case k.flags&flagUrgent != 0:
		// Once until the signal is taken: a key refused at every request
		// of a flood would otherwise signal each time.
		if w := c.woken.Load() + 1; k.woke != w {
			k.woke = w
			signal(c.wake)
		}
	}
}

// signal wakes whoever waits on c, unless it is already signalled: a key
// refused at every request of a flood would otherwise take c's lock each
// time for a send that fails. (len is a hint read without the lock; a
// stale one only tries the send.)
func signal(c chan struct{}) {
	if len(c) == cap(c) {
		return
	}
	select {
	case c <- struct{}{}:
	default:
	}
}

// wanted reports, and clears, whether c was signalled.
func wanted(c chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}
