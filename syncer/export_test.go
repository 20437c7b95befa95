package syncer

import (
	"context"
	"time"

	"github.com/hybridlimit/hybridlimit/internal/localx"
	"github.com/hybridlimit/hybridlimit/internal/synchook"
	"github.com/hybridlimit/hybridlimit/local"
)

// The bound and the default the tests of package syncer_test use.
const (
	MaxRuleName    = maxRuleName
	DefaultTimeout = defaultTimeout
)

// The hybrid mode's syncer and its config, for the tests of package
// syncer_test.
type (
	Syncer     = syncer
	SyncConfig = syncConfig
	Tuning     = synchook.Tuning
)

// NewSyncer is newSyncer.
func NewSyncer(c SyncConfig) (*Syncer, error) { return newSyncer(c) }

// WithDefaults returns c with its defaults filled in, as newSyncer fills them.
func WithDefaults(c SyncConfig) SyncConfig { return c.withDefaults() }

// Digest returns the digest of a user key that names it in Redis under ks.
func Digest(ks *Keyspace, key string) string { return ks.digest(key) }

// Keys returns the names, under ks, of rule and key's state and log.
func Keys(ks *Keyspace, rule *Rule, key string) (state, log string) { return ks.ruleKeys(rule, key) }

// AllowNTime is Central.AllowN that also returns the time, in µs since the
// Unix epoch, the script decided at (Redis's clock, clamped as the state
// clamps it): the fifth value every script answers, so the tests can
// attribute each admission to its window.
func AllowNTime(ctx context.Context, c *Central, r *Rule, key string, n int64) (local.Decision, int64, error) {
	return c.decide(ctx, "", r, key, n)
}

// ScriptHashes returns the SHA1 of every script, as EVALSHA names them, by
// name.
func ScriptHashes() map[string]string {
	return map[string]string{
		"fixed": scriptFixed.Hash(), "log": scriptLog.Hash(), "counter": scriptCounter.Hash(),
		"bucket": scriptBucket.Hash(), "multi": scriptMulti.Hash(), "refund": scriptRefund.Hash(),
	}
}

// ScriptHash returns the SHA1 of the one-rule script of r's algorithm.
func ScriptHash(r *Rule) string { return scriptFor(r).Hash() }

// Slot is the Cluster hash slot syncer computes for a key name.
func Slot(key string) int { return slot(key) }

// Timeout returns the bound a Central puts on calls without a deadline.
func (c *Central) Timeout() time.Duration { return c.timeout }

// FirstPending returns how many keys wait for s's next first-lease round.
// It takes the list and hands each key back as its next request would, so
// that the list is as it was (its order aside).
func FirstPending(s *Syncer) int {
	items := s.cluster.TakeFirst()
	for _, it := range items {
		it.Entry.Lock()
		it.Entry.Value.TakeFirst()
		it.Rule.Notify(it.Entry)
		it.Entry.Unlock()
	}
	return len(items)
}

// SyncWithin is Syncer.SyncAt within budget, as the loop runs its rounds
// within Timeout: it starts no pipeline after budget and leaves the keys it
// did not reach to the next round.
func SyncWithin(s *Syncer, ctx context.Context, now int64, budget time.Duration) (synchook.RoundStats, error) {
	return s.round(ctx, now, false, true, budget)
}

// SyncEarly runs an early round at node time now, within budget: the keys
// handed over or urgent since the last round, and those it left.
func SyncEarly(s *Syncer, ctx context.Context, now int64, budget time.Duration) (synchook.RoundStats, error) {
	return s.round(ctx, now, false, false, budget)
}

// OutageNoted returns the Redis time of the last round that found Redis
// unreachable (lease.Cluster.Outage), 0 before any.
func OutageNoted(s *Syncer) int64 { return s.cluster.Outage() }

// ValidRuleName is validRuleName.
func ValidRuleName(name string) error { return validRuleName(name) }

// Request is request, one rule of a multi-rule decision.
type Request = request

// AllowNAt is c.allowNAt.
func AllowNAt(ctx context.Context, c *Central, now time.Time, r *Rule, key string, n int64) (local.Decision, error) {
	return c.allowNAt(ctx, now, r, key, n)
}

// AllowMulti is c.allowMulti: at now, or Redis's time for the zero Time.
func AllowMulti(ctx context.Context, c *Central, now time.Time, reqs []Request, out []local.Decision) (bool, error) {
	return c.allowMulti(ctx, now, reqs, out)
}

// Preload is c.preload.
func Preload(ctx context.Context, c *Central) error { return c.preload(ctx) }

// CentralKeyspace returns the Keyspace c names keys with.
func CentralKeyspace(c *Central) *Keyspace { return &c.ks }

// RuleLimit returns r's limit.
func RuleLimit(r *Rule) localx.Limit { return r.limit }

// RuleName returns r's name.
func RuleName(r *Rule) string { return r.name }
