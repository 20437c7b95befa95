// Package syncer keeps rate limits in Redis: it is hybridlimit's Redis
// side. A user takes it to decide in Redis without a hybrid.Limiter: a
// Central decides each request under a Rule with one atomic script, exact
// across any number of processes. Package hybrid runs its central mode on
// the same Central, and its hybrid mode on the syncer described below.
//
// Most users want package hybrid. Use syncer for central decisions alone:
// no local state, no goroutine, no failure policy (an error wrapping
// ErrUnavailable tells the caller Redis could not decide, and the caller
// chooses what to do).
//
// # Central decisions
//
// NewRule names a local.Limit; NewCentral takes a go-redis client and a
// Keyspace. Central.AllowN decides with one EVALSHA that reads and writes
// the key's state, its TTL included, so concurrent processes never race and
// a rejected request writes nothing. Scripts read Redis's clock: the
// processes' clocks need not agree. Central.Ping checks that Redis can
// decide. Each algorithm of package local has a Lua twin that makes the
// same decisions from the same state.
//
// # Keys
//
// A Keyspace names the keys: <prefix>:{<rule>:<digest>}:<part>, where the
// digest is the first 128 bits of SHA-256 (or HMAC-SHA256 under a secret) of
// the user key. User keys of any bytes never reach Redis, and the hash tag
// keeps one key's state in one Cluster slot. Every key has a TTL that
// follows its state. hybrid.Keyspace is this type.
//
// # The hybrid mode's syncer
//
// The syncer looks after the keys of hybrid rules: each node decides
// locally against a lease (the state machine of package internal/lease,
// whose requests the syncer encodes for the lease scripts and whose replies
// it decodes), and nothing is admitted without one, save a bounded
// cold-start allowance counted as debt. Window rules (fixed window, sliding
// window counter) lease a count per window; bucket rules (token bucket,
// leaky bucket, GCRA) a share of the rate and of the burst. Shares follow
// each node's demand, reported at every exchange. While a window's budget
// lasts the window at the demands reported, a node is granted its part by
// demand in one exchange; when it will not, a fixed window's grants are
// paced: each node holds what lasts it three PaceGaps, and asks for more in
// the small first-lease rounds when what it holds lasts less than two, so
// that the nodes run out of the budget together, as one exact limiter
// would. Otherwise a key syncs when its lease runs low (at most every
// MinGap) or ends, for the next window's grant, and to report debt; an idle
// key costs nothing. hybrid.SyncConfig tunes it; docs/accuracy.md derives
// each bound and sets it beside its measurement.
//
// # What it does not export
//
// What serves package hybrid and the module's tests stays unexported, so
// that it can change without breaking users: the syncer, its configuration
// and its figures; central decisions over several rules as one (use
// hybrid.Limiter.AllowMulti, which combines rules of every mode) and at a
// time passed in (for simulations on a virtual clock); the names and
// digests of keys. The module's other packages reach them through
// internal/syncx.
//
// # Exactness
//
// The scripts compute in Lua's doubles on integers below 2^53 (package local
// bounds every product of a limit's parameters by 2^51) and make the same
// decisions as package local: the shared vectors (internal/vectors) and a
// randomized differential test run both and compare every field.
package syncer
