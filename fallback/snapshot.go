package fallback

import (
	"time"
)

// rebuild recomputes every key's estimate from this node's last records
// and its peers', and publishes the snapshot. Of a window rule's key, whose
// limit this node knows, each member with demand holds at least its share
// of the limit (claim), and so do the absent members (holdAbsent).
func (n *node) rebuild(now time.Time) {
	members, absent, split := n.liveMembers()
	n.stats.members.Store(int64(split))
	acc := accs{}
	n.addOwn(acc, now)
	n.mu.Lock()
	for _, peers := range n.remote {
		for _, p := range peers {
			acc.count(&p.record, false)
			if members[p.origin] {
				acc.demand(&p.record, false)
			}
		}
	}
	if live := len(members); split > live {
		// The absent members are taken at the live ones' mean demand, so
		// the live members' shares sum to live ÷ split.
		for _, a := range acc {
			a.sum *= float64(split) / float64(live)
		}
	}
	for k, peers := range n.remote {
		a := acc[k]
		if a.limit = n.table.limitOf(&k); a.limit <= 0 {
			continue
		}
		for _, p := range peers {
			if members[p.origin] {
				a.held += a.claim(&p.record, split, n.cfg.Reserve)
			}
		}
	}
	n.holdAbsent(acc, absent, split-len(members), split)
	n.mu.Unlock()

	s := &snapshot{keys: make(map[digest]estimate, len(acc)), members: split}
	for k, a := range acc {
		sh := share(a.ownDemand, a.sum, split, n.cfg.Reserve)
		own, others := a.own, a.total-a.own+a.held
		if a.limit > 0 && a.ownDemand > 0 {
			// Its own claim, as far as the others' leave room for it: the
			// shares each node gives itself need not sum to 1.
			own = max(own, min(int64(sh*float64(a.limit)), a.limit-others))
		}
		s.keys[k] = estimate{
			Known:   true,
			Window:  a.window,
			Own:     own,
			Total:   own + others,
			Share:   sh,
			Members: split,
		}
	}
	n.snap.Store(s)
}

// holdAbsent holds, of each window rule's key in acc, the claims of the
// ghosts, the members the split counts beyond the live ones (those
// memberlist holds dead are absent, by name): each holds its share of the
// limit, 1 ÷ split at the live members' mean demand, less what the absent
// members' records count in the key's window. It keeps a side of a
// partition to its part of the limit once memberlist has declared the far
// side dead. The caller holds n.mu.
func (n *node) holdAbsent(acc accs, absent map[string]bool, ghosts, split int) {
	if ghosts <= 0 {
		return
	}
	for k, a := range acc {
		if a.limit <= 0 {
			a.limit = n.table.limitOf(&k)
		}
		if a.limit <= 0 {
			continue
		}
		var counted int64
		for _, p := range n.remote[k] {
			if absent[p.origin] && p.window == a.window {
				counted += p.consumed
			}
		}
		a.held += max(int64(ghosts)*a.limit/int64(split)-counted, 0)
	}
}

// liveMembers returns the members the estimates split among, this node
// included, as memberlist holds them, and the count the split assumes.
// memberlist keeps a suspected member among its members until it declares
// it dead, so the count does not drop while members are only suspected;
// and while Redis is out of reach (Outage) it does not drop when they are
// declared dead either, nor below the least count given: those are absent,
// by name, a partition's far side as likely as dead, and are counted at
// the live members' mean demand. A member that left is no longer counted.
func (n *node) liveMembers() (members, absent map[string]bool, split int) {
	members = map[string]bool{n.name: true}
	n.memMu.Lock()
	defer n.memMu.Unlock()
	for name := range n.mem {
		members[name] = true
	}
	split = len(members)
	if n.seen == nil {
		return members, nil, split
	}
	absent = map[string]bool{}
	for name := range n.seen {
		if !members[name] {
			absent[name] = true
		}
	}
	return members, absent, max(split+len(absent), n.least)
}

// addOwn adds this node's records to acc. Its counts are taken as old as
// the peers' latest are now (peerAge), and its demands as old as the
// peers' took to arrive (lag): a count fresher than the peers' would take
// a share of what they have admitted since, while the demands, moving
// averages, change little while a record waits for the snapshot.
func (n *node) addOwn(acc accs, now time.Time) {
	nowNs := now.UnixNano()
	n.mu.Lock()
	lag, age := int64(n.lag), n.peerAge(nowNs)
	n.mu.Unlock()
	older := n.ownAsOf(nowNs - max(lag, age)) // first: ownAsOf forgets what is older than its time
	newer := n.ownAsOf(nowNs - min(lag, age))
	counts, demands := older, newer
	if age < lag {
		counts, demands = newer, older
	}
	if counts != nil {
		for i := range *counts {
			acc.count(&(*counts)[i], true)
		}
	}
	if demands != nil {
		for i := range *demands {
			acc.demand(&(*demands)[i], true)
		}
	}
}

// keyAcc is one key's counts and demands, summed for a snapshot, with the
// key's limit per window (0 when this node knows none) and what the peers'
// claims hold beyond their counts.
type keyAcc struct {
	window, own, total int64
	limit, held        int64
	ownDemand, sum     float64
}

// claim returns what the member whose record is r holds in a's window
// beyond r's count: the rest of its share of the limit. Every node, until
// it hears of the others' counts in a window (and its own estimate sees to
// it after), may admit its share of the whole limit, not of what the
// window has left; were the others to split the remainder as if it had
// only admitted its count so far, the cluster would admit that claim
// twice. Past its share a member takes its share of the remainder, as this
// node does. A member with no demand holds nothing.
func (a *keyAcc) claim(r *record, members int, reserve float64) int64 {
	if a.limit <= 0 || r.window > a.window || !(r.demand > 0) {
		return 0
	}
	var count int64
	if r.window == a.window {
		count = r.consumed
	}
	return max(int64(share(r.demand, a.sum, members, reserve)*float64(a.limit))-count, 0)
}

// accs sums a snapshot's records by key. Counts are of the latest window
// any record names; demand counts only for members (the caller's choice),
// so a dead node's share goes to the living while what it admitted in the
// window still counts.
type accs map[digest]*keyAcc

func (m accs) of(r *record) *keyAcc {
	a := m[r.key]
	if a == nil {
		a = &keyAcc{window: r.window}
		m[r.key] = a
	}
	return a
}

// count adds r's count; self marks this node's own record.
func (m accs) count(r *record, self bool) {
	a := m.of(r)
	if r.window > a.window {
		a.window, a.total, a.own = r.window, 0, 0
	}
	if r.window == a.window {
		a.total += r.consumed
		if self {
			a.own = r.consumed
		}
	}
}

// demand adds r's demand; self marks this node's own record.
func (m accs) demand(r *record, self bool) {
	a := m.of(r)
	a.sum += r.demand
	if self {
		a.ownDemand = r.demand
	}
}

// peerAge returns how old, on average, the latest record of each peer that
// is sending is at now (unix ns): the age of the peers' counts this
// snapshot sums, which this node's own count must match. It is more than
// the records' delay in transit (lag): a record waits for the next
// snapshot after it arrives, and peers queue theirs on their own ticks. A
// peer whose latest record is older than two intervals past the delay is
// idle (its count has not moved) and not counted; with none sending, it is
// lag. The caller holds n.mu.
func (n *node) peerAge(now int64) int64 {
	latest := map[string]int64{}
	for _, peers := range n.remote {
		for _, p := range peers {
			latest[p.origin] = max(latest[p.origin], int64(p.seq))
		}
	}
	idle := int64(n.lag) + 2*int64(n.cfg.Interval)
	var sum, cnt int64
	for _, seq := range latest {
		if a := now - seq; a >= 0 && a <= idle {
			sum += a
			cnt++
		}
	}
	if cnt == 0 {
		return int64(n.lag)
	}
	return sum / cnt
}

// maxLag bounds the delay of peers' records that the lag average takes in,
// and how far back this node's own records are kept.
const maxLag = 2 * time.Second

// ownAsOf returns this node's record set as queued at or before t (unix
// ns), or the oldest one kept, and forgets the ones before it. A snapshot
// counts this node's records as old as its peers' (peerAge): were its own
// fresher, each node would take its share of a remainder that the others
// have already eaten into since their records left, and the cluster would
// admit about (1 − share) × rate × that delay over the limit.
func (n *node) ownAsOf(t int64) *[]record {
	past := n.ownPast
	i := 0
	for i+1 < len(past) && past[i+1].at <= t {
		i++
	}
	if len(past) == 0 {
		return n.own.Load()
	}
	clear(past[:i])
	n.ownPast = past[i:]
	if cut := len(n.ownPast) - int(maxLag/n.cfg.Interval) - 1; cut > 0 {
		n.ownPast = n.ownPast[cut:]
	}
	return n.ownPast[0].recs
}
