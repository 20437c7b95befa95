// Package fallback keeps a cluster's rate limits approximately while Redis
// is down, from per-key counts the nodes gossip to each other with
// hashicorp/memberlist.
//
// A Node runs all the time, not only in outages, so that membership and
// each node's demand are warm when Redis fails. The caller reports every
// decision with Observe (a key digest, the window id, how many were asked
// for and how many admitted); every Config.Interval the node gossips a small
// record for each busy key (digest, window, what it consumed, its demand as
// a moving average that counts refused requests too), hottest keys first,
// each replacing the node's older record still queued. Push/pull state
// exchange repairs lost packets. Packets stay within memberlist's
// UDPBufferSize however many keys are active.
//
// While Redis is down, Estimate gives a key's split from the last snapshot
// of the records: the node may admit up to its own count plus its
// demand-weighted share of what the window has left (Estimate.Allowance),
// and token bucket and GCRA rules give it rate × share and burst × share
// (Estimate.Bucket). Dividing evenly would starve nodes that take most of
// the traffic; admitting while the gossiped sum is below the limit would let
// every node take the remainder at once. While members are only suspected
// the member count the split assumes does not fall, so a partition does not
// hand each side the whole limit before memberlist declares the far side
// dead.
//
// Every packet and stream is encrypted and authenticated with the keyring
// in Config.Keys, and carries Config.Label: a node without the key cannot
// join, nor inject counts. Only digests of keys go on the wire.
//
// Observe and Estimate are for the hot path: Estimate reads an immutable
// snapshot through an atomic pointer, without allocating or locking;
// Observe takes one shard's read lock and updates atomics.
package fallback
