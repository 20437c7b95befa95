package rls_test

import (
	"context"
	"fmt"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/hybridlimit/hybridlimit/envoy/rls"
	"github.com/hybridlimit/hybridlimit/hybrid"
)

// stoppedClock returns one time from Now; a program leaves the clocks nil.
type stoppedClock struct{ t time.Time }

func (c stoppedClock) Now() time.Time { return c.t }

// Example 2 of envoyproxy/ratelimit's README: 5 marketing messages a day
// per number, 100 messages a day per number, in one request. A Limiter
// without Redis decides here; give it Config.Redis to share the limits
// among replicas.
func Example() {
	clock := stoppedClock{time.Date(2026, time.January, 1, 18, 0, 0, 0, time.UTC)}
	l, err := hybrid.New(hybrid.Config{Clock: clock})
	if err != nil {
		panic(err)
	}
	defer l.Close()
	svc, err := rls.New(rls.Config{Limiter: l, Clock: clock})
	if err != nil {
		panic(err)
	}
	defer svc.Close()
	f, err := rls.Parse([]byte(`
domain: messaging
descriptors:
  - key: message_type
    value: marketing
    descriptors:
      - key: to_number
        rate_limit: {unit: day, requests_per_unit: 5}
  - key: to_number
    rate_limit: {unit: day, requests_per_unit: 100}
`))
	if err != nil {
		panic(err)
	}
	if err := svc.Apply([]*rls.File{f}); err != nil {
		panic(err)
	}
	req := &rlsv3.RateLimitRequest{Domain: "messaging", Descriptors: []*commonv3RateLimitDescriptor{
		desc("message_type", "marketing", "to_number", "2061111111"),
		desc("to_number", "2061111111"),
	}}
	for i := range 6 {
		resp, err := svc.ShouldRateLimit(context.Background(), req)
		if err != nil {
			panic(err)
		}
		st := resp.GetStatuses()
		fmt.Printf("%d: %s (marketing %s, %d left; number %s, %d left)\n", i+1, resp.GetOverallCode(),
			st[0].GetCode(), st[0].GetLimitRemaining(), st[1].GetCode(), st[1].GetLimitRemaining())
		if i == 5 {
			for _, h := range resp.GetResponseHeadersToAdd() {
				fmt.Printf("%s: %s\n", h.GetKey(), h.GetValue())
			}
		}
	}
	// Output:
	// 1: OK (marketing OK, 4 left; number OK, 99 left)
	// 2: OK (marketing OK, 3 left; number OK, 98 left)
	// 3: OK (marketing OK, 2 left; number OK, 97 left)
	// 4: OK (marketing OK, 1 left; number OK, 96 left)
	// 5: OK (marketing OK, 0 left; number OK, 95 left)
	// 6: OVER_LIMIT (marketing OVER_LIMIT, 0 left; number OK, 95 left)
	// ratelimit-policy: "messaging.message_type_marketing.to_number";q=5;w=86400, "messaging.to_number";q=100;w=86400
	// ratelimit: "messaging.message_type_marketing.to_number";r=0;t=21600
	// retry-after: 21600
}

// Parse reads envoyproxy/ratelimit's format, and this library's fields
// beside it.
func ExampleParse() {
	f, err := rls.Parse([]byte(`
domain: api
descriptors:
  - key: user
    rate_limit:
      unit: second
      requests_per_unit: 10
      algorithm: token_bucket
      burst: 20
      policy: gossip
`))
	if err != nil {
		panic(err)
	}
	r := f.Descriptors[0].RateLimit
	fmt.Println(f.Domain, f.Descriptors[0].Key, r.RequestsPerUnit, r.Unit, r.Algorithm, r.Burst, r.Policy)
	_, err = rls.Parse([]byte("domain: api\ndescriptors:\n  - key: user\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n"))
	fmt.Println(err)
	// Output:
	// api user 10 second token_bucket 20 gossip
	// rls: invalid configuration: api.user: invalid rate limit unit "fortnight"
}
