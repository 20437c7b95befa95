// Package hybrid is hybridlimit's public Limiter: rules decided locally,
// centrally in Redis, or in hybrid mode, where each node decides in
// nanoseconds against leases of the global budget that a background syncer
// exchanges with Redis.
//
// The common case needs this package alone (and go-redis): it names the
// limits (Limit and the algorithms) and the decisions (Decision) of package
// local, and the Redis keyspace (Keyspace) of package syncer, which stay
// available for a limiter without Redis (local.Limiter) or central
// decisions without a Limiter (syncer.Central). SyncConfig tunes the syncer
// of Hybrid rules and GossipConfig the gossip.
//
// It does not export the syncer, the leases, the gossip node or the
// simulation controls its tests use: they are the module's plumbing, in its
// internal packages. A decision's Reason is a local.Reason; Allowed,
// RetryAfter and Degraded are what a caller usually reads.
//
// # Modes
//
// Each registered Rule runs in one Mode:
//
//   - Local: this process alone, no network (package local). A cluster of N
//     processes admits up to N × the limit.
//   - Central: every decision is one atomic Lua script in Redis (package
//     syncer, Central): exact across the cluster, one round trip each.
//   - Hybrid: the decision is made from the key's in-memory lease, never
//     waiting on Redis; the syncer reports what was admitted and fetches new
//     leases in batched rounds, driven by need. Leases outstanding never sum
//     past the limit; the cold-start allowance (ε × limit ÷ nodes per node,
//     SyncConfig.Epsilon) is the only over-admission, bounded by ε + N/L.
//     Every leasable limit runs Hybrid, however small; the sliding window
//     log, which keeps every request, runs Central (the registered Rule's
//     Mode tells).
//
// Each field of Config documents its default, and docs/operating.md#defaults
// lists them all.
//
// # Decisions
//
// Allow, AllowN and AllowMulti return a Decision by value. Its Capacity is
// the most a single request may cost under the rule (the rule's, never a
// lease's): Limit.Quota for the window algorithms, the burst for the
// buckets. In hybrid mode Remaining is the node's estimate of what the whole
// cluster may still admit (its lease, plus what the others held unused at
// the last sync); a rejection's Remaining is what the node may admit at
// once, less than the cost. A key's first requests on a node are decided at
// once, within the cold-start allowance (docs/accuracy.md). A request the
// lease cannot decide, where Redis may have room (past the allowance, a
// grant used up before the window's budget, a limit just changed), waits
// about one round trip for the key's exchange with Redis, which decides it
// (Rule.Wait: WaitInFlight, the default); WaitNever refuses it at once
// instead, and WaitFirst gives a key no allowance. A refusal's RetryAfter
// is the cluster's: a window whose budget is used up says its end.
//
// # When Redis fails
//
// The rule's Policy decides what Redis cannot: FailOpen admits, FailClosed
// rejects, FailLocal (the default without gossip) gives each node an even
// part of the limit, and Gossip (the default with Config.Gossip) each
// node's own count plus its demand-weighted share of what the window has
// left, from the counts the nodes gossip (package fallback, configured by
// Config.Gossip, a *GossipConfig; Stats reports the gossip's address and
// figures). A hybrid lease
// held is used to its end first. A decision made by a policy is an ordinary
// one: its error is nil and Decision.Degraded reports it; a non-nil error
// means misuse (ErrUnknownRule, ErrRedis). Once the Limiter knows Redis is
// unavailable, central decisions go to the policy without a call (a circuit
// breaker), and a background probe PINGs Redis, with backoff, until it
// answers. Ping serves a health endpoint, and Config.RequireRedis makes New
// fail when Redis does not answer. When Redis answers again, each node
// reports what it admitted without it once (reports are absolute per
// window), and, under Gossip, replies in a window the outage touched
// grant nothing on top of what the node held for a while (a bucket rule's,
// none of Redis's burst), so no lease comes on top of use Redis does not
// know yet. After Shutdown every rule decides locally, on this node's part
// of its limit.
//
// # Lifecycle and metrics
//
// New starts the syncer and a sweeper of idle keys; Shutdown reports what is
// unreported, hands leases back, leaves the registry of live nodes and stops
// every goroutine; Close does the same within 2s.
// Unregister does it for one rule and releases what the rule held, so that
// rules can come and go for the Limiter's life; Stats estimates what the
// rules hold. The Limiter reports OpenTelemetry metrics
// (hybridlimit.decisions, hybridlimit.sync.*, hybridlimit.keys,
// hybridlimit.rules, hybridlimit.memory, hybridlimit.redis.available,
// hybridlimit.mode.changes, hybridlimit.gossip.*, …) to Config.MeterProvider,
// and a span per sync round (hybridlimit.sync; hybridlimit.handback for the
// first after an outage) to Config.TracerProvider.
//
// See docs/accuracy.md for the hybrid mode's bounds and their measurements,
// and docs/redis.md for what is kept in Redis.
package hybrid
