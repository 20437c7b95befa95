// Package outage runs limiter nodes as separate OS processes through a
// Redis outage: the node (RunNode, which internal/cmd/gossipnode wraps) and
// the driver that starts, kills and stops nodes and collects what they
// admitted per window (Proc, Collect). The process tests of the gossip
// fallback and the outage benchmark (bench/cmd/outage) use both.
package outage
