package fallback_test

import (
	"fmt"
	"time"

	"github.com/hashicorp/memberlist"

	"github.com/hybridlimit/hybridlimit/hybrid"
)

// Two Limiters on loopback gossip to each other, sharing an encryption key
// and a cluster label; the second lists the first's address in its Seeds.
// The gossip is configured through package hybrid alone: hybrid.GossipConfig
// is this package's Config, and hybrid.Stats reports the gossip's figures.
func Example() {
	key := []byte("0123456789abcdef0123456789abcdef") // AES-256; load it from a secret store
	start := func(name string, seeds ...string) *hybrid.Limiter {
		ml := memberlist.DefaultLocalConfig()
		ml.Name, ml.BindAddr, ml.BindPort = name, "127.0.0.1", 0
		l, err := hybrid.New(hybrid.Config{
			Gossip: &hybrid.GossipConfig{
				Memberlist: ml,
				Seeds:      seeds,
				Keys:       [][]byte{key},
				Label:      "example",
				Interval:   20 * time.Millisecond,
			},
		})
		if err != nil {
			panic(err)
		}
		return l
	}
	a := start("a")
	defer a.Close()
	b := start("b", a.Stats().GossipAddr)
	defer b.Close()

	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if a.Stats().GossipMembers == 2 && b.Stats().GossipMembers == 2 {
			break
		}
	}
	fmt.Println("a's members:", a.Stats().GossipMembers)
	fmt.Println("b's members:", b.Stats().GossipMembers)
	// Output:
	// a's members: 2
	// b's members: 2
}
