// Package httplimit is HTTP middleware over a hybrid.Limiter.
//
// A Middleware matches each request against its rules (ServeMux patterns:
// "[METHOD ][HOST]/path"), keys each matched rule by the client IP, an API
// key header or the application's user, and decides all of them at once
// with hybrid.Limiter.AllowMulti: a request refused by one rule is charged
// to none, whatever the rules' modes (a per-IP Local rule and a per-user
// Hybrid quota make one rule set). Responses carry the rate-limit headers
// (X-RateLimit-* by default; RateLimit-Policy and RateLimit of
// draft-ietf-httpapi-ratelimit-headers-11 when enabled); a refusal is 429
// with Retry-After and an application/problem+json body.
//
// Rules come from Go (Config.Rules, Middleware.SetRules), from a rules
// file, YAML or JSON (ParseRules; WatchFile applies each new version), and
// from Redis (PublishRules; WatchRedis applies each new version on every
// node). A Rule's struct tags are its keys in a file; whatever its source,
// a rule is validated in one place, and a bad one is refused with a
// *RuleError naming it and the field. See docs/rules.md.
//
// The client IP has no spoofable default: it is the socket's peer unless
// Config names trusted proxies or a number of trusted hops. Redis failures
// follow the rules' failure policies; the middleware never answers 500
// because Redis is down. See docs/http.md.
//
// It exports the middleware, its rules and their watchers, and nothing of
// how it decides: rules become hybrid.Rules registered on the Limiter, and
// the headers and problem bodies are documented in docs/http.md rather than
// exported as constants.
package httplimit
