// Package grpclimit is gRPC server interceptors over a hybrid.Limiter:
// httplimit's rules, keys and decisions for gRPC calls.
//
// An Interceptor matches each call's full method name ("/pkg.Service/Method")
// against its rules, whose Endpoint is a method pattern: an exact method,
// every method of a service ("/pkg.Service/*") or every method ("/*").
// It keys each matched rule by the client IP (the peer's address, or what
// trusted proxies forwarded in x-forwarded-for metadata), an API key
// metadata value (with tiers) or the application's UserFunc, and decides
// all of them at once with hybrid.Limiter.AllowMulti: a call refused by one
// rule is charged to none. A stream is decided once, when it opens.
//
// A refused call ends with codes.ResourceExhausted, whose status details
// carry a google.rpc.RetryInfo (when to retry: the call is admitted then,
// unless others came first) and a google.rpc.QuotaFailure (a violation per
// refusing rule, its QuotaId the rule's ID). A call refused only by
// FailClosed rules because Redis could not decide ends with
// codes.Unavailable, with a RetryInfo and a google.rpc.ErrorInfo naming
// those rules. Decided calls carry the ratelimit-policy and ratelimit
// response header metadata, the fields of
// draft-ietf-httpapi-ratelimit-headers as httplimit writes them.
//
// The rules are httplimit's: the same httplimit.Rule, the same rules files
// and rules in Redis (httplimit.ParseRules, WatchFile, WatchRedis and
// PublishRules), validated by the same validator, applied without a deploy
// by Interceptor.SetRules. See README.md in this directory.
//
// A client may keep to limits itself: UnaryClientInterceptor and
// StreamClientInterceptor decide its outgoing calls by the same rules
// (ip rules per connection target, api_key rules per outgoing API key), and
// a refused call is never sent.
//
// The client IP has no spoofable default: it is the peer's address unless
// Config names trusted proxies or a number of trusted hops, as in
// httplimit.
package grpclimit
