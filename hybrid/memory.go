package hybrid

import (
	"time"

	"github.com/hybridlimit/hybridlimit/local"
)

// Stats are a Limiter's figures (Limiter.Stats): its rules', for sizing,
// and its gossip node's, zero without Config.Gossip. The gossip's counts
// are cumulative since New.
type Stats struct {
	Rules int // rules registered
	Keys  int // keys their tables hold (hybridlimit.keys, summed)
	// Bytes estimates the heap the rules hold: each rule's fixed part, as
	// measured for its mode, and its tables of keys as laid out: a
	// table's shards (Config.Shards), a table in each shard that holds a
	// key, and an entry per key; the same for a failure policy's table once
	// a policy has decided. A sliding window log's requests and a
	// sub-window counter's counts, kept beside their keys' entries, are not
	// counted. For sizing, not accounting.
	Bytes int64

	// GossipAddr is the "host:port" the gossip node advertises, which the
	// other nodes list in their GossipConfig.Seeds; with
	// Memberlist.BindPort 0, the port it bound.
	GossipAddr string
	// GossipMembers counts the gossip cluster's members, this node and
	// suspected ones included, and while Redis is out of reach those
	// declared dead since it was last reachable, which may be a partition's
	// far side (hybridlimit.gossip.members): the nodes the Gossip policy
	// splits a limit among.
	GossipMembers int
	// GossipKeys counts the keys the gossip node tracks now.
	GossipKeys            int
	GossipBytesSent       uint64 // hybridlimit.gossip.io, sent
	GossipBytesReceived   uint64 // hybridlimit.gossip.io, received
	GossipRecordsSent     uint64 // records handed to memberlist, by broadcast or push/pull
	GossipRecordsReceived uint64 // peers' records accepted as newer than held
	// GossipRecordsDropped counts records dropped: queue or store full
	// (GossipConfig.MaxQueued, MaxRecords), or malformed.
	GossipRecordsDropped uint64
	GossipMalformed      uint64 // messages rejected as malformed (also in GossipRecordsDropped)
	// GossipKeysDropped counts reports of keys beyond GossipConfig.MaxKeys,
	// which the gossip does not track.
	GossipKeysDropped uint64

	// GlobalRounds counts the rounds this node led as its region's
	// exchanger with Config.Global (rules of global reach), GlobalFailures
	// those that failed (both hybridlimit.global.rounds), GlobalKeys the
	// keys the last one carried (hybridlimit.global.keys), and GlobalRTT
	// is the smoothed round trip to the global store. Zero on a node that
	// never led, and without Config.Global.
	GlobalRounds, GlobalFailures, GlobalKeys int64
	GlobalRTT                                time.Duration
}

// Stats returns the Limiter's rules, their keys, and an estimate of the
// heap they hold (also reported as the hybridlimit.rules and
// hybridlimit.memory gauges), and its gossip node's address and figures.
// It locks each rule's table shards in turn: for monitoring, not per
// request. It is safe for concurrent use.
func (l *Limiter) Stats() Stats {
	l.mu.Lock()
	rules := make([]*ruleState, 0, len(l.rules))
	for _, rs := range l.rules {
		rules = append(rules, rs)
	}
	l.mu.Unlock()
	out := Stats{Rules: len(rules)}
	for _, rs := range rules {
		st := rs.mode.stats()
		out.Keys += st.Keys
		out.Bytes += rs.bytes(st)
	}
	if l.gossip != nil {
		l.gossip.stats(&out)
	}
	if l.sync != nil {
		g := l.sync.GlobalStats()
		out.GlobalRounds, out.GlobalFailures, out.GlobalKeys, out.GlobalRTT = g.Rounds, g.Failed, g.Keys, g.RTT
	}
	return out
}

// The heap a registered rule holds besides its tables of keys, by the mode
// it runs in, as measured on 64-bit platforms after a collection: its
// state and counters, its Redis and lease forms, its place in the Limiter,
// and a Local rule's limiter without its table; and the syncer's record of
// a hybrid key it looks after. TestMemoryPerRule holds them to the
// measure.
const (
	localRuleBytes   = 1300
	centralRuleBytes = 1900
	hybridRuleBytes  = 2500
	hybridKeyBytes   = 40
)

// bytes estimates the heap rs holds (Stats.Bytes): its fixed part and
// its tables, st being its mode's Stats.
func (rs *ruleState) bytes(st local.Stats) int64 {
	b := st.Bytes
	switch m := rs.mode.(type) {
	case *localRule:
		b += localRuleBytes
	case *centralRule:
		b += centralRuleBytes + m.fail.bytes()
	case *hybridRule:
		b += hybridRuleBytes + int64(st.Keys)*hybridKeyBytes + m.fail.bytes()
	}
	return b
}

// bytes estimates the heap the failure policy's limiter holds: nothing
// until a policy first decides on it.
func (f *failover) bytes() int64 {
	if p := f.part.Load(); p != nil {
		return p.Stats().Bytes
	}
	return 0
}
