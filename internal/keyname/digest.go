package keyname

import (
	"crypto/hmac"
	"crypto/sha256"
)

// DigestSize is how much of the SHA-256 (or HMAC-SHA256) of a user key its
// digest keeps: 128 bits, collision-resistant (about 2^64 work to find any
// pair) and 22 characters of base64url in a Redis key name.
const DigestSize = 16

// Digest returns the digest that names a user key in Redis, raw: the first
// DigestSize bytes of the SHA-256 of key, or of its HMAC-SHA256 under
// secret when secret is not empty. syncer.Keyspace names keys by it, and a
// hybrid limiter's leases hold it; one function, so that the two agree.
func Digest(secret []byte, key string) [DigestSize]byte {
	if len(secret) > 0 {
		m := hmac.New(sha256.New, secret)
		m.Write([]byte(key))
		return [DigestSize]byte(m.Sum(nil))
	}
	sum := sha256.Sum256([]byte(key)) // on the stack: no allocation
	return [DigestSize]byte(sum[:DigestSize])
}
