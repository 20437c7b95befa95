package syncer_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hybridlimit/hybridlimit/internal/localx"
	"github.com/hybridlimit/hybridlimit/local"
	"github.com/hybridlimit/hybridlimit/syncer"
)

// Central mode: every decision is one atomic script in Redis, exact across
// any number of processes. The client must enable ContextTimeoutEnabled, so
// that a call to a paused server returns at its deadline.
func ExampleNewCentral() {
	client := redis.NewClient(&redis.Options{
		Addr:                  os.Getenv("HYBRIDLIMIT_REDIS_ADDR"),
		ContextTimeoutEnabled: true,
	})
	defer client.Close()
	cen, err := syncer.NewCentral(syncer.CentralConfig{Client: client, Keyspace: syncer.Keyspace{Prefix: "myapp"}})
	if err != nil {
		log.Fatal(err)
	}
	login, err := syncer.NewRule("login", localx.MustLimit(local.Limit{
		Algorithm: local.SlidingWindowLog, Quota: 5, Window: time.Minute,
	}))
	if err != nil {
		log.Fatal(err)
	}
	d, err := cen.AllowN(context.Background(), login, "203.0.113.7", 1)
	switch {
	case errors.Is(err, syncer.ErrUnavailable):
		// Redis did not answer within the deadline: apply a failure policy.
	case err != nil:
		log.Fatal(err)
	case !d.Allowed():
		fmt.Println("try again in", d.RetryAfter())
	}
}

// Rule names are part of the Redis key names, so they are validated: no
// braces (they would change the Cluster hash tag), no control characters.
func ExampleNewRule() {
	lim := localx.MustLimit(local.Limit{Algorithm: local.GCRA, Quota: 100, Window: time.Second, Burst: 20})
	if _, err := syncer.NewRule("api:{v2}", lim); err != nil {
		fmt.Println(errors.Is(err, syncer.ErrInvalidRule))
	}
	r, err := syncer.NewRule("api:v2", lim)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(r.Name())
	// Output:
	// true
	// api:v2
}

// The user key never reaches Redis: only a 128-bit digest of it, so keys of
// any bytes are safe and every process names the same key identically.
// Under Secret the digest is an HMAC, which hides guessable keys (IPs, user
// IDs) from whoever can read Redis.
func ExampleKeyspace_Keys() {
	ks := syncer.Keyspace{Prefix: "myapp"}
	fixed, _ := syncer.NewRule("api", localx.MustLimit(local.Limit{Algorithm: local.FixedWindow, Quota: 100, Window: time.Minute}))
	gcra, _ := syncer.NewRule("api", localx.MustLimit(local.Limit{Algorithm: local.GCRA, Quota: 100, Window: time.Minute}))
	state, _ := ks.Keys(fixed, "user-42")
	fmt.Println(state)
	state, _ = ks.Keys(gcra, "user-42")
	fmt.Println(state)

	shared := syncer.Keyspace{Prefix: "myapp", SharedKeyTag: true}
	state, _ = shared.Keys(fixed, "user-42")
	fmt.Println(state)
	// Output:
	// myapp:{api:bYlKo-6AJUnX80Dnwc8NHA}:s
	// myapp:{api:bYlKo-6AJUnX80Dnwc8NHA}:s
	// myapp:{bYlKo-6AJUnX80Dnwc8NHA}:api:s
}
