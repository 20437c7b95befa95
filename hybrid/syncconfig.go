package hybrid

import (
	"time"

	"github.com/hybridlimit/hybridlimit/internal/synchook"
)

// SyncConfig tunes the syncer of hybrid rules (Config.Sync): how often it
// exchanges leases with Redis, how it sizes them, and the cold-start
// allowance. Every zero field takes the default it documents, which New
// fills in as it starts the syncer (docs/operating.md#defaults lists them
// all); the durations derive from Interval unless set. The syncer reaches
// Redis through Config.Redis, names keys by Config.Keyspace and reads
// Config.Clock.
type SyncConfig struct {
	// NodeID names this node in Redis: each node of a cluster needs its own.
	// Default: 64 random bits, drawn by New.
	NodeID string
	// Interval is the regular sync period: usage is reported and leases
	// renewed at most this long after they are due. Default 100ms; at least
	// 1ms. Shorter means smaller leases and more scripts; longer means
	// coarser leases.
	Interval time.Duration
	// Horizon is how long a lease is sized to last at the key's current
	// demand. Default 2 × Interval.
	Horizon time.Duration
	// MinGap is the least time between two syncs of one key asked for early
	// (a lease running low, a first request), less a tenth: a key's gap is
	// read from the Limiter's clock, which may lag the loop's timers by its
	// resolution. It is also the retry-after of a request refused for want
	// of a lease. Default Interval ÷ 10.
	MinGap time.Duration
	// FirstGap is the least time between two first-lease rounds: small
	// rounds, run between the others, that exchange only the keys waiting
	// for their first lease, or for the correction of a lease granted before
	// their demand could be measured. A busy new key spends its cold-start
	// allowance in well under MinGap; these rounds bring its lease within
	// about a round trip, and each key takes part in at most two of them in
	// its life. Default MinGap ÷ 10.
	FirstGap time.Duration
	// PaceGap sizes the grants of a key whose grants are paced: a fixed
	// window's key whose budget, at the demand the nodes report, will not
	// last its window. Each node is then granted what lasts it 3 × PaceGap
	// at its demand, and asks for more in the first-lease rounds when what
	// it holds lasts less than 2 × PaceGap, so that the nodes run out of
	// the budget together and admit the same requests, but for a few, as
	// one exact limiter would. Shorter means fewer false rejections over
	// the limit, and more scripts while the budget lasts (see
	// docs/accuracy.md). Default MinGap ÷ 5; at most MinGap.
	PaceGap time.Duration
	// LeaseTTL is how long a bucket share is held without renewal. A node
	// that stops syncing (crashed, cut off) loses its share that long after
	// its last sync, and the others get it. Default 5 × Interval; more than
	// 2 × Interval.
	LeaseTTL time.Duration
	// DemandTTL is how long a node's reported demand counts in the others'
	// shares. Default 5 × Interval.
	DemandTTL time.Duration
	// IdleRelease is how long a key goes without requests before the node
	// gives its lease back. Default 3 × Interval.
	IdleRelease time.Duration
	// Safety is how long before its expiry a node stops using a share, for
	// the error of its estimate of Redis's clock. Default MinGap.
	Safety time.Duration
	// Epsilon is the cold-start allowance: a new key may admit ε × limit ÷
	// nodes per node, counted as debt, while its first lease is fetched.
	// Default 0.05; at most 1. Set NoColdStart to admit nothing before a
	// lease.
	Epsilon float64
	// NoColdStart turns the cold-start allowance off.
	NoColdStart bool
	// Nodes is the number of nodes to assume until Redis has counted them,
	// and the least assumed afterwards. Each node registers in Redis at its
	// rounds; the live count sizes the cold-start allowance, the shares kept
	// for nodes yet to ask for a new key, and the failure policy's split of
	// a limit. Default 0: no allowance until the first round.
	Nodes int
	// Batch is how many scripts go in one pipeline. Default 64: enough to
	// amortize the round trip, few enough not to block Redis for long (a
	// lease script runs for tens of µs) and for a pipeline to come back
	// well within Timeout on a busy machine.
	Batch int
	// Timeout bounds each pipelined exchange of Batch scripts, and each of
	// the sync loop's rounds: a round starts no pipeline after Timeout, and
	// leaves the keys it did not reach to the next one, which serves the
	// longest unsynced first. Default Interval.
	Timeout time.Duration
}

// tuning is c as package syncer takes it: a conversion, which stops
// compiling if the two types' fields part.
func (c SyncConfig) tuning() synchook.Tuning { return synchook.Tuning(c) }
