// Package rls is an Envoy rate limit service: it implements
// envoy.service.ratelimit.v3.RateLimitService (ShouldRateLimit, which
// Envoy's envoy.filters.http.ratelimit and network rate limit filters call)
// on a hybrid.Limiter, so that every replica of the service decides in
// memory against leases of one limit shared through Redis, and keeps
// deciding by each limit's failure policy when Redis is down.
//
// It reads envoyproxy/ratelimit's configuration files unchanged (Parse,
// Load): a domain, nested descriptors with key and optional value (a value
// ending in "*" matches a prefix), rate_limit with unit and
// requests_per_unit, unlimited, name and replaces, shadow_mode and
// detailed_metric; a request descriptor matches as envoyproxy/ratelimit
// matches it. Optional fields of rate_limit choose this library's
// algorithm (and burst), mode, failure policy, wait and reach (global);
// without them a limit is a fixed window, as envoyproxy/ratelimit counts.
//
// Service.Apply installs a configuration and Watch reloads it as its files
// change. A request's descriptors not in shadow mode are decided all or
// nothing (hybrid.Limiter.AllowMulti): none is charged when one is over
// its limit. Each status carries current_limit, limit_remaining and
// duration_until_reset, and the response the ratelimit-policy and
// ratelimit headers of draft-ietf-httpapi-ratelimit-headers (and
// retry-after when over the limit) for Envoy to add to its response.
//
// The command envoy/cmd/hybridlimit-ratelimit serves it with gRPC health
// checks; envoy/README.md shows how to run it and point Envoy at it.
package rls
