// Package gossiphook carries package fallback's gossip node to package
// hybrid, which runs it for Config.Gossip: the node, its estimates and its
// figures are the module's plumbing, not part of fallback's API (which is
// its Config alone). Package fallback sets New when it loads; package
// hybrid asserts its type once and starts nodes with it. This package
// cannot import fallback.
package gossiphook

import (
	"errors"
	"log/slog"
	"math"
	"time"

	"github.com/hashicorp/memberlist"
)

// Digest names a key on the gossip: a collision-resistant digest of the
// rule and the key that every node computes alike. It is the 16 bytes of a
// lease's digest (package hybrid checks the sizes match) salted by the
// rule; the raw user key never leaves the node.
type Digest = [16]byte

// New starts a gossip node: a func(Config) (Node, error), set by package
// fallback. The error wraps ErrInvalidConfig for a Config it rejects.
var New any

// ErrInvalidConfig is wrapped by the error of a Config the node rejects;
// hybrid.New wraps that error in its own ErrInvalidConfig.
var ErrInvalidConfig = errors.New("fallback: invalid config")

// Config is hybrid.GossipConfig, field for field (hybrid converts one to
// the other; its doc comments are the fields' documentation).
type Config struct {
	Memberlist      *memberlist.Config
	Seeds           []string
	RejoinInterval  time.Duration
	Keys            [][]byte
	Insecure        bool
	Label           string
	Interval        time.Duration
	DemandHalfLife  time.Duration
	Reserve         float64
	RecordTTL       time.Duration
	MaxKeys         int
	MaxRecords      int
	MaxQueued       int
	MaxStateRecords int
	LeaveTimeout    time.Duration
	Logger          *slog.Logger
}

// Node is one running member of the gossip cluster. Its methods are safe
// for concurrent use; Report and Estimate are for the hot path and do not
// block on the network.
type Node interface {
	// Report records that key was asked for asked requests (refused ones
	// included) and that this node admitted consumed in all in window (the
	// caller's window id, the same on every node; 0 for the bucket
	// algorithms) of limit per window (0 for the bucket algorithms). A
	// report for an earlier window than the key's latest counts as demand
	// only.
	Report(key Digest, window, asked, consumed, limit int64)
	// Estimate returns this node's share of key's budget from the last
	// snapshot, without allocating or locking.
	Estimate(key Digest) Estimate
	// Members returns the count of members the estimates assume, this node
	// and suspected ones included, and during an outage (Outage) those
	// declared dead since Redis was last reachable, as of the last snapshot.
	Members() int
	// Outage tells the node whether Redis is out of reach (down). While it
	// is, the member count the estimates split by falls neither below least
	// (0 for none) nor below the members seen since Redis was last
	// reachable, but those that left: a member declared dead may be the far
	// side of a partition, which splits the limit among itself too.
	Outage(down bool, least int)
	// Stats returns the node's figures without blocking on the network.
	Stats() Stats
	// Addr returns the "host:port" this node advertises, which peers list
	// in their Seeds. With BindPort 0 the port is the one bound.
	Addr() string
	// Close leaves the cluster, shuts the node down and stops its
	// goroutines. It is idempotent.
	Close() error
}

// Stats is a node's gossip figures, cumulative since it started except
// where said.
type Stats struct {
	Members         int // members now, this node and suspected ones included
	Keys            int // keys this node tracks now
	BytesSent       uint64
	BytesReceived   uint64
	RecordsSent     uint64 // records handed to memberlist, by broadcast or push/pull
	RecordsReceived uint64 // peers' records accepted as newer than held
	RecordsDropped  uint64 // records dropped: queue full, store full, or malformed
	Malformed       uint64 // messages rejected as malformed (also in RecordsDropped)
	KeysDropped     uint64 // observations of keys beyond Config.MaxKeys
}

// Estimate is what a node may admit for one key while Redis is down, from
// the last snapshot of gossiped records. It is a small value, returned
// without allocation.
type Estimate struct {
	// Known reports whether any node has gossiped a record for the key. When
	// it is false the other fields hold an even split: Share is 1/Members
	// and the counts are zero.
	Known bool
	// Window is the window id the counts are of (the caller's, as reported;
	// 0 for the bucket algorithms).
	Window int64
	// Own is this node's count in Window as it gossiped it as long ago as
	// the peers' latest records were queued, on average, so that Own and
	// the others' counts in Total are of about the same time. For a window
	// rule's key with demand it is at least the node's claim: its share of
	// the limit, which it may admit before it hears of the others' counts,
	// as far as the others' counts and claims leave room.
	Own int64
	// Total is the sum of every node's count in Window in the snapshot, Own
	// included, and the counts of nodes that have died since; for a window
	// rule, each member with demand counts at least its claim.
	Total int64
	// Share is this node's demand-weighted share, in [0, 1], of what the
	// window has left (and of a bucket's rate and burst).
	Share float64
	// Members is the count of nodes the split assumes: memberlist's
	// members, suspected ones included, so it drops only once memberlist
	// declares a node dead or the node leaves; and while Redis is out of
	// reach, those declared dead since it was last reachable too.
	Members int
}

// Allowance returns how many this node may have admitted in total in the
// estimate's window for a limit of limit: its own count plus its share of
// what the window has left. Every node that works from the same snapshot
// gets allowances that sum to at most limit.
func (e Estimate) Allowance(limit int64) int64 {
	left := max(limit-e.Total, 0)
	return e.Own + int64(math.Floor(e.Share*float64(left)))
}

// AllowanceIn is Allowance for the caller's current window: when the
// snapshot's counts are of an earlier window (no record of window has
// arrived yet), nothing is counted in window and the node may admit its
// share of the whole limit.
func (e Estimate) AllowanceIn(window, limit int64) int64 {
	if e.Window != window {
		e.Own, e.Total = 0, 0
	}
	return e.Allowance(limit)
}
