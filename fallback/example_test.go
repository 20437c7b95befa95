package fallback_test

import (
	"crypto/sha256"
	"fmt"
	"time"

	"github.com/hashicorp/memberlist"

	"github.com/hybridlimit/hybridlimit/fallback"
)

// Two nodes on loopback, sharing an encryption key and a cluster label,
// split a fixed window's limit of 100 by their demand.
func Example() {
	key := []byte("0123456789abcdef0123456789abcdef") // AES-256; load it from a secret store
	node := func(name string, seeds ...string) *fallback.Node {
		ml := memberlist.DefaultLocalConfig()
		ml.Name, ml.BindAddr, ml.BindPort = name, "127.0.0.1", 0
		n, err := fallback.New(fallback.Config{
			Memberlist: ml,
			Seeds:      seeds,
			Keys:       [][]byte{key},
			Label:      "example",
			Interval:   20 * time.Millisecond,
		})
		if err != nil {
			panic(err)
		}
		return n
	}
	a := node("a")
	defer a.Close()
	b := node("b", a.Addr())
	defer b.Close()

	// The caller's digest of rule and key (hybrid uses its keyspace's).
	sum := sha256.Sum256([]byte("login:alice"))
	var k fallback.Digest
	copy(k[:], sum[:])

	// Node a sees three times b's traffic in window 7.
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		a.Observe(k, 7, 3, 3)
		b.Observe(k, 7, 1, 1)
		ea, eb := a.Estimate(k), b.Estimate(k)
		if ea.Known && eb.Known && ea.Members == 2 && eb.Members == 2 && ea.Share > 0.6 && eb.Share < 0.4 {
			break
		}
	}
	fmt.Println("members:", a.Estimate(k).Members)
	fmt.Println("a's share is larger:", a.Estimate(k).Share > b.Estimate(k).Share)
	// Output:
	// members: 2
	// a's share is larger: true
}
