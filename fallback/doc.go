// Package fallback is the gossip that keeps a cluster's rate limits
// approximately while Redis is down, from per-key counts the nodes gossip to
// each other with hashicorp/memberlist. Package hybrid runs it: a Limiter
// whose Config.Gossip is set starts a gossip node and closes it with the
// Limiter, and its Gossip failure policy decides from the node's estimates.
//
// The package exports nothing: users configure the gossip as
// hybrid.Config.Gossip (a *hybrid.GossipConfig, so importing hybrid is
// enough), and hybrid.New wraps a bad field's error in its ErrInvalidConfig.
// The node, its estimates and its figures are the module's plumbing: a
// Limiter reports the figures in hybrid.Stats and as the
// hybridlimit.gossip.* metrics, and joins peers through GossipConfig.Seeds.
//
// The node runs all the time, not only in outages, so that membership and
// each node's demand are warm when Redis fails. The Limiter reports each
// key's figures to it at every sync round (a key digest, the window id, how
// many were asked for and how many admitted); every GossipConfig.Interval the
// node gossips a small record for each busy key (digest, window, what it
// consumed, its demand as a moving average that counts refused requests
// too), hottest keys first, each replacing the node's older record still
// queued. Push/pull state exchange repairs lost packets. Packets stay
// within memberlist's UDPBufferSize however many keys are active.
//
// While Redis is down, a key's split comes from the last snapshot of the
// records: the node may admit up to its own count plus its demand-weighted
// share of what the window has left, and token bucket and GCRA rules give
// it rate × share and burst × share. Dividing evenly would starve nodes
// that take most of the traffic; admitting while the gossiped sum is below
// the limit would let every node take the remainder at once. While members
// are only suspected the member count the split assumes does not fall; and
// while Redis is out of reach it does not fall when memberlist declares
// them dead either: a member seen since Redis was last reachable counts,
// at the live members' mean demand, until it is back or Redis is, unless
// it left (a Limiter's Close says so). A node cannot tell a dead peer from
// the far side of a partition, and a side that dropped the far side would
// split the whole limit among itself; so each side of a partition keeps
// about its members' part of the limit, and a node killed during an outage
// leaves its share idle until Redis returns (docs/outage.md).
//
// Every packet and stream is encrypted and authenticated with the keyring
// in GossipConfig.Keys, and carries GossipConfig.Label: a node without the
// key cannot join, nor inject counts. Only digests of keys go on the wire.
//
// The estimates are read on the hot path from an immutable snapshot
// through an atomic pointer, without allocating or locking; reporting a
// key's figures, off the hot path, takes one shard's read lock and updates
// atomics.
package fallback
