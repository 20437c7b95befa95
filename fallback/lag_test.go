package fallback

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// TestPeerAge: a snapshot counts this node's own records as old as the
// peers' latest records are at that moment, each sending peer once (its
// latest record, whatever the key), idle peers left out, and the transit
// delay alone when no peer is sending.
func TestPeerAge(t *testing.T) {
	n := &node{cfg: config{Interval: 200 * time.Millisecond}, remote: map[digest][]*peer{}}
	n.lag = float64(5 * time.Millisecond)
	now := int64(100 * time.Second)
	add := func(origin string, key byte, age time.Duration) {
		r := record{origin: origin, key: digest{key}, seq: uint64(now - int64(age))}
		n.remote[r.key] = append(n.remote[r.key], &peer{record: r, at: now})
	}
	assert.Equal(t, int64(5*time.Millisecond), n.peerAge(now), "no peer: the transit delay")

	add("a", 1, 20*time.Millisecond)
	add("a", 2, 150*time.Millisecond) // a's older record of another key
	add("b", 1, 60*time.Millisecond)
	add("c", 2, 2*time.Second) // idle: older than the delay and two intervals
	assert.Equal(t, int64(40*time.Millisecond), n.peerAge(now), "the mean of a's and b's latest records' ages")

	n.remote = map[digest][]*peer{}
	add("c", 1, time.Second)
	assert.Equal(t, int64(5*time.Millisecond), n.peerAge(now), "only idle peers: the transit delay")
}
