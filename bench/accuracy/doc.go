// Package accuracy is the multi-process accuracy benchmark: the real-process
// counterpart of the hybrid package's deterministic simulation. N node
// processes (cmd/accnode, GOMAXPROCS=1 each) decide a precomputed Poisson
// schedule open loop against one redis-server, in one of four modes
// (central, hybrid, naive delta sync, local); cmd/accuracy runs them one
// after the other and turns their decision logs into the table of
// docs/accuracy-results.md: over-admission by each algorithm's own
// invariant, false rejections and capacity lost against an exact replay of
// the same arrivals, Redis cost, sync periods and the validity of each run.
//
// The pieces: Spec and Schedule (spec.go) say what a run offers; RunNode
// (node.go) is a node process; the naive baseline is naive.go; the go-redis
// hook and the MeterProvider that timestamps the syncer's rounds are in
// hooks.go; Analyze (analyze.go) computes a Result from the node files;
// report.go, curves.go, plot.go and markdown.go render tables, checks, SVG
// charts and the document. The api-users workload is users.go and
// usersreport.go (its rows on a Redis Cluster too: Spec.Cluster, the
// nodes on a redis.ClusterClient); the api-patterns workload (burst sessions, two rules per
// request, retries at RetryAfter, a limit change, each against an exact
// replay: false refusals) is patterns.go, patternsnode.go,
// patternsanalyze.go and patternsreport.go; wait.go is where a rule's wait
// for a lease is set and read.
package accuracy
