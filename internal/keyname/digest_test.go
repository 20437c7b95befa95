package keyname

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestDigest: the first 128 bits of SHA-256, or of HMAC-SHA256 under a
// secret; the plain digest of "user-42" is the one syncer's key names
// have always held.
func TestDigest(t *testing.T) {
	for _, tt := range []struct {
		secret []byte
		key    string
	}{{nil, "user-42"}, {nil, ""}, {[]byte("cluster secret"), "user-42"}, {[]byte("s"), "203.0.113.7"}} {
		var want []byte
		if len(tt.secret) > 0 {
			m := hmac.New(sha256.New, tt.secret)
			m.Write([]byte(tt.key))
			want = m.Sum(nil)
		} else {
			sum := sha256.Sum256([]byte(tt.key))
			want = sum[:]
		}
		got := Digest(tt.secret, tt.key)
		assert.Equal(t, want[:DigestSize], got[:], "secret %q, key %q", tt.secret, tt.key)
	}
	d := Digest(nil, "user-42")
	assert.Equal(t, "bYlKo-6AJUnX80Dnwc8NHA", base64.RawURLEncoding.EncodeToString(d[:]))
	assert.NotEqual(t, d, Digest([]byte("s"), "user-42"), "a secret changes the digest")
}
