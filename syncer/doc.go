// Package syncer is everything of hybridlimit that talks to Redis: the Lua
// twins of package local's algorithms, central (exact) decisions, and, for the
// hybrid mode, the loop that exchanges leases with Redis.
//
// # Central mode
//
// A Central decides each request with one atomic script: the state, its
// TTL included, is read and written by a single EVALSHA, so any number of
// processes share a limit exactly. Scripts read Redis's clock; the At
// methods pass the time instead. A rejected request writes nothing.
//
// # Hybrid mode
//
// A Syncer looks after the keys of a hybrid limiter: each node decides
// locally against a lease (the state machine of package internal/lease,
// whose requests the Syncer encodes for the lease scripts and whose
// replies it decodes), and nothing is admitted without one, save a
// bounded cold-start allowance counted as debt. Window rules (fixed window,
// sliding window counter) lease a count per window; bucket rules (token
// bucket, leaky bucket, GCRA) a share of the rate and of the burst. Shares
// follow each node's demand, reported at every exchange. While a window's
// budget lasts the window at the demands reported, a node is granted its
// part by demand in one exchange; when it will not, a fixed window's grants
// are paced: each node holds what lasts it three PaceGaps, and asks for
// more in the small first-lease rounds when what it holds lasts less than
// two, so that the nodes run out of the budget together, as one exact
// limiter would. Otherwise a key syncs when its lease runs low (at most
// every MinGap) or ends, for the next window's grant, and to report debt;
// an idle key costs nothing.
// docs/accuracy.md derives each bound and sets it beside its measurement.
//
// # Keys
//
// A Keyspace names the keys: <prefix>:{<rule>:<digest>}:<part>, where the
// digest is the first 128 bits of SHA-256 (or HMAC-SHA256 under a secret) of
// the user key. User keys of any bytes never reach Redis, and the hash tag
// keeps one key's state in one Cluster slot. Every key has a TTL that
// follows its state.
//
// # Exactness
//
// The scripts compute in Lua's doubles on integers below 2^53 (package local
// bounds every product of a limit's parameters by 2^51) and make the same
// decisions as package local: the shared vectors (internal/vectors) and a
// randomized differential test run both and compare every field.
package syncer
