package httplimit

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hybridlimit/hybridlimit/hybrid"
	"github.com/hybridlimit/hybridlimit/internal/config"
)

// rulesKeys are the Redis names of the published rules: one hash (fields
// version and rules) and the channel that announces a new version. Both
// carry the hash tag {rules}, which no limiter key can have (their tags
// hold a rule name and a digest), so they live in one Cluster slot.
type rulesKeys struct {
	hash    string
	channel string
}

func keysOf(ks hybrid.Keyspace) (rulesKeys, error) {
	prefix := ks.Prefix
	if prefix == "" {
		prefix = config.KeyPrefix
	}
	if strings.ContainsAny(prefix, "{}") {
		return rulesKeys{}, fmt.Errorf("%w: Keyspace.Prefix %q: must not contain '{' or '}'", ErrInvalidConfig, prefix)
	}
	return rulesKeys{hash: prefix + ":{rules}:doc", channel: prefix + ":{rules}:changed"}, nil
}

// publishScript stores a new version and announces it in one step, so a
// watcher that hears the message finds the rules it announces. The epoch,
// set when the hash is created, tells a version 1 published after Redis
// lost the hash from the version 1 before. The hash has no TTL: it is
// configuration, kept until replaced.
var publishScript = redis.NewScript(`
local v = redis.call('HINCRBY', KEYS[1], 'version', 1)
redis.call('HSETNX', KEYS[1], 'epoch', ARGV[3])
redis.call('HSET', KEYS[1], 'rules', ARGV[1])
redis.call('PUBLISH', ARGV[2], v)
return v
`)

// PublishRules validates rules, stores them in Redis under the keyspace
// as a new version, and announces it to every WatchRedis on the same
// keyspace. It returns the new version number, which counts up from 1.
//
// The rules are stored as a JSON rules document (docs/rules.md), in the
// hash <prefix>:{rules}:doc, and announced on the channel
// <prefix>:{rules}:changed; both share one hash tag, so this works on a
// Redis Cluster too. Bad rules are refused with a *RuleError, and nothing
// is written.
func PublishRules(ctx context.Context, c redis.Scripter, ks hybrid.Keyspace, rules []Rule) (int64, error) {
	keys, err := keysOf(ks)
	if err != nil {
		return 0, err
	}
	data, err := marshalRules(rules)
	if err != nil {
		return 0, err
	}
	epoch := make([]byte, 8)
	rand.Read(epoch)
	return publishScript.Run(ctx, c, []string{keys.hash}, data, keys.channel, hex.EncodeToString(epoch)).Int64()
}

// redisSource is the rules published in Redis, followed.
type redisSource struct {
	w    *Watcher
	c    redis.UniversalClient
	keys rulesKeys
	ps   *redis.PubSub

	version string // the epoch and version last read, applied or rejected; "" for none
}

// WatchRedis applies the rules last published under the keyspace (see
// PublishRules), if any, and then each new version until ctx ends or Close
// is called.
//
// A new version is announced by pub/sub, so every node applies it within
// a round trip; the version number is also read every PollInterval
// (default 1s), and whenever the subscription is re-established, so a lost
// message or a dropped connection delays a version by at most about
// PollInterval. A version that does not parse, or that apply refuses, is
// logged and counted (hybridlimit.http.rules.reloads, result=rejected), and
// the previous rules keep serving; so is one larger than a rules document
// may be (512 KiB), which is not fetched (its length is read with HSTRLEN
// first).
//
// If Redis cannot be read at the start, WatchRedis logs it and keeps
// trying in the background; the caller's rules, if any, keep serving. A
// published version that is bad at the start is returned as an error,
// having started nothing. apply is called from one goroutine at a time.
func WatchRedis(ctx context.Context, c redis.UniversalClient, ks hybrid.Keyspace, apply func([]Rule) error, cfg WatchConfig) (*Watcher, error) {
	if c == nil {
		return nil, fmt.Errorf("%w: client: required", ErrInvalidConfig)
	}
	keys, err := keysOf(ks)
	if err != nil {
		return nil, err
	}
	w, err := newWatcher(cfg, "redis", defaultRedisPollInterval, apply)
	if err != nil {
		return nil, err
	}
	s := &redisSource{w: w, c: c, keys: keys}
	// Subscribe first: a version published while the first one is read
	// is then announced to us.
	s.ps = c.Subscribe(ctx, keys.channel)
	if err := s.check(ctx); err != nil && !errors.Is(err, errUnreachable) {
		s.ps.Close()
		return nil, err
	}
	ctx, w.stop = context.WithCancel(ctx)
	kick := make(chan struct{}, 1)
	w.wg.Go(func() { s.receive(ctx, kick) })
	w.wg.Go(func() { s.run(ctx, kick) })
	return w, nil
}

// errUnreachable marks a check that could not read Redis.
var errUnreachable = errors.New("httplimit: rules: Redis unreachable")

// receive turns the subscription's messages, and its confirmations (sent
// again on every reconnection), into kicks of run.
func (s *redisSource) receive(ctx context.Context, kick chan<- struct{}) {
	backoff := 10 * time.Millisecond
	for {
		msg, err := s.ps.Receive(ctx)
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			// The next Receive reconnects; wait a little so a Redis that is
			// down is not dialled in a loop.
			t := time.NewTimer(backoff)
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
			backoff = min(2*backoff, time.Second)
			continue
		}
		backoff = 10 * time.Millisecond
		switch msg.(type) {
		case *redis.Message, *redis.Subscription:
			select {
			case kick <- struct{}{}:
			default: // a check is already due
			}
		}
	}
}

// run checks the version on each kick and each poll until ctx ends.
func (s *redisSource) run(ctx context.Context, kick <-chan struct{}) {
	defer s.ps.Close() // ends receive's Receive, which the context does not
	poll := time.NewTicker(s.w.cfg.PollInterval)
	defer poll.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-kick:
		case <-poll.C:
		}
		s.check(ctx)
	}
}

// The bounds of a poll's read of the rules in Redis.
const (
	readFloor   = 250 * time.Millisecond
	readCeiling = 5 * time.Second
)

// check reads the version and, when it changed, the rules, and loads them.
func (s *redisSource) check(ctx context.Context) error {
	// A poll's read may take up to its interval, at least readFloor (a
	// short interval must not fail every read on a busy Redis), at most
	// readCeiling.
	ctx, cancel := context.WithTimeout(ctx, min(max(s.w.cfg.PollInterval, readFloor), readCeiling))
	defer cancel()
	vals, err := s.c.HMGet(ctx, s.keys.hash, "version", "epoch").Result()
	if err == nil {
		if vals[0] == nil {
			// Nothing published, or Redis lost it (flushed, restarted
			// empty): the rules in force stay.
			return nil
		}
		if s.tag(vals) == s.version {
			return nil
		}
		// A document past maxRulesSize is refused before it is read.
		var n int64
		if n, err = s.c.HStrLen(ctx, s.keys.hash, "rules").Result(); err == nil && n > maxRulesSize {
			v, _ := vals[0].(string)
			s.version = s.tag(vals)
			return s.w.reject(ctx, v, tooLarge(n))
		}
		if err == nil {
			// All three in one read: the rules are those of the version.
			vals, err = s.c.HMGet(ctx, s.keys.hash, "version", "epoch", "rules").Result()
		}
	}
	if err != nil {
		if errors.Is(ctx.Err(), context.Canceled) {
			return nil // closing
		}
		s.w.log.Warn("httplimit: cannot read the rules from Redis", "error", err)
		return fmt.Errorf("%w: %w", errUnreachable, err)
	}
	if vals[0] == nil {
		return nil // deleted between the two reads
	}
	v, _ := vals[0].(string)
	doc, _ := vals[2].(string)
	s.version = s.tag(vals)
	return s.w.load(ctx, []byte(doc), v)
}

// tag is a version's identity: its epoch and its number.
func (s *redisSource) tag(vals []any) string {
	v, _ := vals[0].(string)
	e, _ := vals[1].(string)
	return e + "/" + v
}
