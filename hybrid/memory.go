package hybrid

import "github.com/hybridlimit/hybridlimit/local"

// RuleStats are figures for sizing a Limiter's rules (Limiter.RuleStats).
type RuleStats struct {
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
}

// RuleStats returns the Limiter's rules, their keys, and an estimate of the
// heap they hold (also reported as the hybridlimit.rules and
// hybridlimit.memory gauges). It locks each rule's table shards in turn:
// for monitoring, not per request.
func (l *Limiter) RuleStats() RuleStats {
	l.mu.Lock()
	rules := make([]*ruleState, 0, len(l.rules))
	for _, rs := range l.rules {
		rules = append(rules, rs)
	}
	l.mu.Unlock()
	out := RuleStats{Rules: len(rules)}
	for _, rs := range rules {
		st := rs.mode.stats()
		out.Keys += st.Keys
		out.Bytes += rs.bytes(st)
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

// bytes estimates the heap rs holds (RuleStats.Bytes): its fixed part and
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
