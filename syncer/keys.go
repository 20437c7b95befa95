package syncer

import (
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"math"
	"strings"

	"github.com/hybridlimit/hybridlimit/internal/config"
	"github.com/hybridlimit/hybridlimit/internal/keyname"
	"github.com/hybridlimit/hybridlimit/internal/localx"
	"github.com/hybridlimit/hybridlimit/local"
)

// defaultPrefix starts every Redis key when Keyspace.Prefix is empty.
const defaultPrefix = config.KeyPrefix

// digestBytes is how much of the SHA-256 (or HMAC-SHA256) of a user key its
// Redis name keeps (keyname.Digest): a lease holds the same raw digest.
const digestBytes = keyname.DigestSize

// Keyspace names the Redis keys of a (rule, key) pair. Its zero value is
// usable: prefix "hl", plain SHA-256 digests, one hash tag per rule and key.
// Every process sharing limits must use the same Keyspace.
//
// Names have the form
//
//	<prefix>:{<rule>:<digest>}:<part>     (default)
//	<prefix>:{<digest>}:<rule>:<part>     (SharedKeyTag)
//
// The braces are a Redis Cluster hash tag: all the keys of one rule and user
// key live in one slot, so each script touches one node. The user key never
// reaches Redis: only its digest, the first 128 bits of SHA-256 (or of
// HMAC-SHA256 under Secret), base64url-encoded, so keys of any bytes and any
// length are safe, and identical in every process.
type Keyspace struct {
	// Prefix starts every key. Default "hl". It must not contain '{' or
	// '}', which would change the hash tag.
	Prefix string
	// Secret, when set, keys the digest (HMAC-SHA256): the Redis key names
	// then reveal nothing about the user keys, even to someone who can guess
	// them (user IDs, IP addresses). Every process must share it.
	Secret []byte
	// SharedKeyTag puts all the rules of one user key under one hash tag,
	// so a multi-rule decision over one key is a single script even on a
	// Cluster (otherwise: reserve, then commit or refund). The price: one
	// hot user key concentrates all its rules on one node. Changing it
	// renames every key, which resets all limits.
	SharedKeyTag bool
}

// withDefaults returns ks with its default Prefix if it has none.
func (ks Keyspace) withDefaults() Keyspace {
	if ks.Prefix == "" {
		ks.Prefix = defaultPrefix
	}
	return ks
}

// validate reports a bad Keyspace, in an error wrapping ErrInvalidConfig
// that names the field.
func (ks *Keyspace) validate() error {
	if strings.ContainsAny(ks.Prefix, "{}") {
		return invalidConfig("Keyspace.Prefix", fmt.Sprintf("%q", ks.Prefix), "must not contain '{' or '}'")
	}
	return nil
}

// prefix returns the Prefix, or the default for a Keyspace a Config did
// not fill in (one a caller uses to name keys: ruleKeys, digest).
func (ks *Keyspace) prefix() string {
	if ks.Prefix == "" {
		return defaultPrefix
	}
	return ks.Prefix
}

// digestLen is the length of a digest as it appears in key names.
const digestLen = (digestBytes*8 + 5) / 6

// digest returns the digest of a user key that names it in Redis.
func (ks *Keyspace) digest(key string) string { return encodeDigest(ks.rawDigest(key)) }

// encodeDigest returns a raw digest as names hold it.
func encodeDigest(d [digestBytes]byte) string {
	var enc [digestLen]byte
	putDigest(&enc, d)
	return string(enc[:])
}

// putDigest writes a raw digest, as names hold it, into enc: what
// encodeDigest returns, without an allocation.
func putDigest(enc *[digestLen]byte, d [digestBytes]byte) {
	base64.RawURLEncoding.Encode(enc[:], d[:])
}

// rawDigest returns the digest of a user key, raw: what digest encodes,
// and what a lease holds.
func (ks *Keyspace) rawDigest(key string) [digestBytes]byte { return keyname.Digest(ks.Secret, key) }

// ruleKeys returns the names of rule and key's state (part "s") and of its
// log list (part "l", used by the sliding window log only). The window
// algorithms keep their state in a hash, the bucket algorithms in a string:
// a rule that changes family finds a key of the other type, deletes it
// (and the log) and starts afresh, as local.Limiter.SetLimit does.
func (ks *Keyspace) ruleKeys(rule *Rule, key string) (state, log string) {
	return ks.keys(rule.name, ks.digest(key))
}

// scriptKeys returns the names a single-rule script of r takes: its state,
// and its log for the sliding window log. It is on central mode's path to
// Redis, and allocates only what it returns.
func (ks *Keyspace) scriptKeys(r *Rule, key string) []string {
	var enc [digestLen]byte
	putDigest(&enc, ks.rawDigest(key))
	if r.limit.Algorithm() == local.SlidingWindowLog {
		s, l := ks.keys(r.name, string(enc[:]))
		return []string{s, l}
	}
	return []string{ks.name(r.name, string(enc[:]), "s")}
}

func (ks *Keyspace) keys(rule, digest string) (state, log string) {
	return ks.name(rule, digest, "s"), ks.name(rule, digest, "l")
}

// name returns the name of part of the state of rule and the user key
// whose digest is given, in one allocation.
func (ks *Keyspace) name(rule, digest, part string) string {
	p := ks.prefix()
	var b strings.Builder
	b.Grow(len(p) + len(rule) + len(digest) + len(part) + 5)
	b.WriteString(p)
	b.WriteString(":{")
	if ks.SharedKeyTag {
		b.WriteString(digest)
		b.WriteString("}:")
		b.WriteString(rule)
		b.WriteString(":")
	} else {
		b.WriteString(rule)
		b.WriteString(":")
		b.WriteString(digest)
		b.WriteString("}:")
	}
	b.WriteString(part)
	return b.String()
}

// Rule is a named limit as Redis knows it: the name is part of every key
// name, so two rules of one user key never share state. Build one with
// NewRule. A Rule is immutable and safe for concurrent use.
type Rule struct {
	name   string
	limit  localx.Limit
	fp     string // the parameters joined by ':', stored with the state
	args   []any  // fp and the parameters, as the central scripts take them
	bucket bool   // a bucket algorithm: state in a string, a script of its own
	bargs  []any  // rl:el:tau (the bucket's fingerprint), and burst, rl, el, tau packed (packNumbers): the bucket script's arguments
	lpack  []byte // the parameters' numbers packed as the lease scripts take them, after the request's
}

// maxRuleName is the longest rule name accepted, in bytes.
const maxRuleName = config.MaxRuleName

// NewRule validates name and lim and returns the Rule; an error wraps
// ErrInvalidRule. A name is 1 to 128 bytes of letters, digits and "-_.:/"
// (it becomes part of Redis key names and of metrics); braces, which would
// break the hash tag, are rejected. The limit is validated as package local
// validates it, and the error then wraps local.ErrInvalidConfig too.
func NewRule(name string, lim local.Limit) (*Rule, error) {
	if err := validRuleName(name); err != nil {
		return nil, err
	}
	l, err := localx.NewLimit(lim)
	if err != nil {
		return nil, fmt.Errorf("%w: rule %q: Limit: %w", ErrInvalidRule, name, err)
	}
	return newRule(name, l)
}

// newRule is NewRule for a limit already validated: what package hybrid
// holds.
func newRule(name string, lim localx.Limit) (*Rule, error) {
	if err := validRuleName(name); err != nil {
		return nil, err
	}
	if !lim.Valid() {
		return nil, fmt.Errorf("%w: rule %q: zero Limit", ErrInvalidRule, name)
	}
	p := lim.Params()
	step, ws := lim.Counter()
	rl, el, tau := lim.Emission()
	nums := []int64{int64(p.Algorithm), p.Quota, p.Window.Microseconds(), p.Burst, step, ws, rl, el, tau}
	parts := make([]string, len(nums))
	for i, v := range nums {
		parts[i] = fmt.Sprint(v)
	}
	// An anchored rule's fingerprint says so; the others' stay as they were.
	anchored := "0"
	if lim.Anchored() {
		anchored = "1"
	}
	r := &Rule{name: name, limit: lim, fp: strings.Join(parts, ":")}
	if lim.Anchored() {
		r.fp += ":1"
	}
	r.args = append(r.args, r.fp)
	for _, s := range parts {
		r.args = append(r.args, s)
	}
	r.args = append(r.args, anchored)
	r.lpack = appendNumbers(nil, append(nums, int64(boolFlag(lim.Anchored())))...)
	if a := lim.Algorithm(); a == local.TokenBucket || a == local.LeakyBucket || a == local.GCRA {
		r.bucket = true
		// A bucket's state holds a fingerprint of its own, the three numbers
		// its decisions depend on (see bucket.lua): shorter than fp, and
		// the same for the same rate and burst under any bucket algorithm.
		r.bargs = []any{parts[6] + ":" + parts[7] + ":" + parts[8], packNumbers(p.Burst, rl, el, tau)}
	}
	return r, nil
}

// validRuleName reports, as an error wrapping ErrInvalidRule, whether name
// cannot name a rule: it must be 1 to 128 bytes of letters, digits and
// -_.:/.
func validRuleName(name string) error {
	if err := keyname.CheckRule(name); err != nil {
		return fmt.Errorf("%w: name %q: %w", ErrInvalidRule, name, err)
	}
	return nil
}

// slot returns the Redis Cluster hash slot of a key name: CRC16 (XMODEM)
// of its hash tag, modulo 16384.
func slot(key string) int {
	if s := strings.IndexByte(key, '{'); s >= 0 {
		if e := strings.IndexByte(key[s+1:], '}'); e > 0 {
			key = key[s+1 : s+1+e]
		}
	}
	var crc uint16
	for i := 0; i < len(key); i++ {
		crc ^= uint16(key[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return int(crc) % 16384
}

// packNumbers packs integers as little-endian IEEE doubles (struct's '<d'
// each), exact below 2^53, which the limit's validation keeps them under.
func packNumbers(xs ...int64) string {
	return string(appendNumbers(make([]byte, 0, 8*len(xs)), xs...))
}

// appendNumbers appends xs to b packed as packNumbers does.
func appendNumbers(b []byte, xs ...int64) []byte {
	for _, x := range xs {
		b = binary.LittleEndian.AppendUint64(b, math.Float64bits(float64(x)))
	}
	return b
}
