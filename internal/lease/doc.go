// Package lease is the node side of the hybrid mode: one key's lease state
// machine. A Lease decides requests locally against what Redis granted the
// node (Decide, Check, Charge, Fallback), says when the key needs an
// exchange with Redis (Due), builds that exchange as a typed request
// (Request) and takes in the typed reply (ApplyWindow, ApplyBucket).
//
// The package never talks to Redis: package syncer runs the rounds, encodes
// the requests for its scripts and decodes their replies. What the rounds
// learn of the cluster (its live nodes, Redis's clock) reaches the leases
// through a shared Cluster, which also hands keys from the hot path to the
// syncer (Rule.Notify).
//
// Times are µs: node time (the limiter's clock) unless said to be Redis
// time, which is node time plus an offset learned from the replies.
package lease
