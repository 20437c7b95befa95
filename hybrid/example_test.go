package hybrid_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hybridlimit/hybridlimit/hybrid"
)

// stoppedClock always tells the same time, so the examples' output is
// fixed. Real programs leave Config.Clock nil.
type stoppedClock struct{ t time.Time }

func (c stoppedClock) Now() time.Time { return c.t }

// 15 seconds into a minute.
var exampleNow = stoppedClock{time.Date(2024, time.March, 1, 12, 0, 15, 0, time.UTC)}

// Without Redis, rules run in Local mode: each process limits on its own,
// in nanoseconds, allocation-free.
func ExampleNew() {
	l, err := hybrid.New(hybrid.Config{Clock: exampleNow})
	if err != nil {
		log.Fatal(err)
	}
	defer l.Close()

	api, err := l.Register(hybrid.Rule{
		Name:  "api",
		Limit: hybrid.Limit{Algorithm: hybrid.FixedWindow, Quota: 3, Window: time.Minute},
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("mode:", api.Mode)

	ctx := context.Background()
	for range 4 {
		d, err := l.Allow(ctx, api, "user-42")
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("allowed=%v remaining=%d retry-after=%v reason=%v\n", d.Allowed(), d.Remaining(), d.RetryAfter(), d.Reason())
	}
	// Another key has its own budget.
	d, _ := l.Allow(ctx, api, "user-7")
	fmt.Println("user-7 allowed:", d.Allowed())
	// Output:
	// mode: local
	// allowed=true remaining=2 retry-after=0s reason=ok
	// allowed=true remaining=1 retry-after=0s reason=ok
	// allowed=true remaining=0 retry-after=0s reason=ok
	// allowed=false remaining=0 retry-after=45s reason=limited
	// user-7 allowed: true
}

// Register validates a rule and reports what is wrong with errors callers
// can match.
func ExampleLimiter_Register() {
	l, err := hybrid.New(hybrid.Config{Clock: exampleNow})
	if err != nil {
		log.Fatal(err)
	}
	defer l.Close()

	perSecond := hybrid.Limit{Algorithm: hybrid.GCRA, Quota: 10, Window: time.Second}
	_, err = l.Register(hybrid.Rule{Name: "login{attempts}", Limit: perSecond})
	fmt.Println(errors.Is(err, hybrid.ErrInvalidRule))

	_, err = l.Register(hybrid.Rule{Name: "login", Limit: perSecond, Mode: hybrid.Central})
	fmt.Println(errors.Is(err, hybrid.ErrInvalidRule), "(central mode needs Redis)")

	r, err := l.Register(hybrid.Rule{Name: "login", Limit: perSecond})
	fmt.Println(r.Name, err)
	// Output:
	// true
	// true (central mode needs Redis)
	// login <nil>
}

// AllowMulti decides several rules as one: a request passes every rule or
// is charged to none.
func ExampleLimiter_AllowMulti() {
	l, err := hybrid.New(hybrid.Config{Clock: exampleNow})
	if err != nil {
		log.Fatal(err)
	}
	defer l.Close()

	burst, _ := l.Register(hybrid.Rule{Name: "burst", Limit: hybrid.Limit{Algorithm: hybrid.TokenBucket, Quota: 1, Window: time.Second, Burst: 5}})
	daily, _ := l.Register(hybrid.Rule{Name: "daily", Limit: hybrid.Limit{Algorithm: hybrid.FixedWindow, Quota: 2, Window: 24 * time.Hour}})

	ctx := context.Background()
	reqs := []hybrid.Request{{Rule: burst, Key: "user-42", N: 1}, {Rule: daily, Key: "user-42", N: 1}}
	out := make([]hybrid.Decision, len(reqs))
	for range 3 {
		ok, err := l.AllowMulti(ctx, reqs, out)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("ok=%v burst: %v remaining %d; daily: %v remaining %d\n", ok, out[0].Reason(), out[0].Remaining(), out[1].Reason(), out[1].Remaining())
	}
	// Output:
	// ok=true burst: ok remaining 4; daily: ok remaining 1
	// ok=true burst: ok remaining 3; daily: ok remaining 0
	// ok=false burst: ok remaining 3; daily: limited remaining 0
}

// With Redis, rules run in Hybrid mode by default: each node decides
// locally, against leases of the global budget its syncer exchanges with
// Redis in the background. Rules whose limit cannot be leased (the sliding
// window log) run Central when Hybrid is only the default: one atomic
// script per decision. (No output: it needs a Redis server.)
func Example_hybrid() {
	client := redis.NewClient(&redis.Options{
		Addr:                  "localhost:6379",
		ContextTimeoutEnabled: true, // deadlines bound every call
	})
	defer client.Close()

	l, err := hybrid.New(hybrid.Config{
		Redis:    client,
		Keyspace: hybrid.Keyspace{Prefix: "myapp"}, // the same on every node
		Policy:   hybrid.FailLocal,                 // while Redis is down: the limit ÷ nodes, per node
		Sync:     hybrid.SyncConfig{Nodes: 4},      // expected cluster size, until Redis has counted
	})
	if err != nil {
		log.Fatal(err)
	}
	// Shutdown reports what was admitted and gives the leases back.
	defer l.Shutdown(context.Background())

	api, err := l.Register(hybrid.Rule{
		Name:  "api",
		Limit: hybrid.Limit{Algorithm: hybrid.FixedWindow, Quota: 100_000, Window: time.Minute},
	})
	if err != nil {
		log.Fatal(err)
	}
	login, err := l.Register(hybrid.Rule{
		Name:   "login",
		Limit:  hybrid.Limit{Algorithm: hybrid.SlidingWindowLog, Quota: 5, Window: time.Minute},
		Policy: hybrid.FailClosed, // security first: refuse while Redis is down
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(api.Mode, login.Mode) // hybrid central

	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	d, err := l.Allow(ctx, api, "user-42") // never waits on Redis
	if err != nil {
		log.Fatal(err) // misuse: an unregistered rule, a bad argument
	}
	if d.Degraded() {
		log.Print("Redis could not decide: the rule's failure policy did")
	}
	if !d.Allowed() {
		fmt.Println("429, retry after", d.RetryAfter())
	}
}

// A rule of global reach holds one limit across regions that each run
// their own Redis: a region's nodes lease from the region's Redis, and
// one of them at a time leases the region's part of the limit from the
// global Redis, never on a request's path. (No output: it needs a Redis
// server in the region and a global one.)
func Example_global() {
	regional := redis.NewClient(&redis.Options{Addr: "redis.eu-west.internal:6379", ContextTimeoutEnabled: true})
	defer regional.Close()
	global := redis.NewClient(&redis.Options{Addr: "redis.global.internal:6379", ContextTimeoutEnabled: true})
	defer global.Close()

	l, err := hybrid.New(hybrid.Config{
		Redis:    regional,
		Global:   global,
		Region:   "eu-west", // the same on every node of the region, another in each region
		Keyspace: hybrid.Keyspace{Prefix: "myapp"},
	})
	if err != nil {
		log.Fatal(err)
	}
	defer l.Shutdown(context.Background())

	// 10,000 orders an hour per customer, wherever they are placed. A
	// customer new everywhere may place 10,000 ÷ regions at once in each
	// region; a request past the region's part is refused at once, not
	// held while more comes across regions.
	orders, err := l.Register(hybrid.Rule{
		Name:   "orders",
		Limit:  hybrid.Limit{Algorithm: hybrid.FixedWindow, Quota: 10_000, Window: time.Hour},
		Global: true,
	})
	if err != nil {
		log.Fatal(err) // ErrInvalidRule: not a fixed window, or not in Hybrid mode
	}
	// Rules without Global, on the same Limiter, keep their limit within
	// the region.

	d, err := l.Allow(context.Background(), orders, "customer-42")
	if err != nil {
		log.Fatal(err)
	}
	if !d.Allowed() {
		fmt.Println("429, retry after", d.RetryAfter())
	}
}
