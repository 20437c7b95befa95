package syncer_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/redis/go-redis/v9"

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
	login, err := syncer.NewRule("login", local.Limit{
		Algorithm: local.SlidingWindowLog, Quota: 5, Window: time.Minute,
	})
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
	lim := local.Limit{Algorithm: local.GCRA, Quota: 100, Window: time.Second, Burst: 20}
	if _, err := syncer.NewRule("api:{v2}", lim); err != nil {
		fmt.Println(errors.Is(err, syncer.ErrInvalidRule))
	}
	_, err := syncer.NewRule("api:v2", lim)
	fmt.Println(err)
	// Output:
	// true
	// <nil>
}
