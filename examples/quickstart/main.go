// Command quickstart shares one limit among every process that runs it,
// through Redis, and handles a decision as a server would:
//
//	HYBRIDLIMIT_REDIS_ADDR=localhost:6379 go run ./examples/quickstart
package main

import (
	"context"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hybridlimit/hybridlimit/hybrid"
)

func main() {
	addr := os.Getenv("HYBRIDLIMIT_REDIS_ADDR")
	if addr == "" {
		addr = "localhost:6379"
	}
	if err := run(context.Background(), addr); err != nil {
		log.Fatal(err)
	}
}

func run(ctx context.Context, addr string) error {
	client := redis.NewClient(&redis.Options{
		Addr:                  addr,
		ContextTimeoutEnabled: true, // required: deadlines bound every call to Redis
	})
	defer client.Close()

	l, err := hybrid.New(hybrid.Config{
		Redis:        client,
		Keyspace:     hybrid.Keyspace{Prefix: "quickstart"}, // the same on every node
		RequireRedis: true,                                  // fail here if Redis does not answer
	})
	if err != nil {
		return err
	}
	defer l.Close() // reports what was admitted, gives leases back

	api, err := l.Register(hybrid.Rule{
		Name:  "api",
		Limit: hybrid.Limit{Algorithm: hybrid.GCRA, Quota: 100, Window: time.Second, Burst: 20},
	})
	if err != nil {
		return err
	}

	for i := range 5 {
		d, err := l.Allow(ctx, api, "user-42")
		if err != nil {
			return err // misuse: a rule not registered here, a bad argument
		}
		if d.Degraded() {
			fmt.Print("[Redis could not decide: the rule's failure policy did] ")
		}
		if !d.Allowed() {
			fmt.Printf("request %d: 429, retry after %v (%s)\n", i, d.RetryAfter(), d.Reason())
			continue
		}
		fmt.Printf("request %d: allowed, %d remaining\n", i, d.Remaining())
	}
	return l.Ping(ctx) // a health endpoint's check
}
