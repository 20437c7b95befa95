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
// The scripts compute in Lua's doubles on integers below 2^53 (see
// local.MaxProduct) and make the same decisions as package local: the shared
// vectors (internal/vectors) and a randomized differential test run both and
// compare every field.
package syncer
