package syncer

import (
	"context"
	"embed"
	"strings"

	"github.com/redis/go-redis/v9"
)

//go:embed lua/*.lua
var luaFS embed.FS

func luaSource(names ...string) string {
	var b strings.Builder
	for _, n := range names {
		src, err := luaFS.ReadFile("lua/" + n + ".lua")
		if err != nil {
			panic("syncer: missing embedded script " + n) // the build embeds them all
		}
		b.Write(src)
		b.WriteByte('\n')
	}
	return b.String()
}

// single is the body of a one-rule script: ARGV[1] = now (empty for Redis's
// clock), ARGV[2] = cost, ARGV[3..] = the rule's parameters.
const single = "return %s(KEYS[1], KEYS[2], params(3), clock(ARGV[1]), tonumber(ARGV[2]), true)\n"

func singleScript(file, fn string) *redis.Script {
	return redis.NewScript(luaSource("prelude", file) + strings.Replace(single, "%s", fn, 1))
}

// The scripts, run by SHA. Each algorithm has its own, holding only its own
// code, which keeps the per-call cost of running a script low.
var (
	scriptFixed   = singleScript("fixed", "decide_fixed")
	scriptLog     = singleScript("log", "decide_log")
	scriptCounter = singleScript("counter", "decide_counter")
	scriptBucket  = singleScript("bucket", "decide_bucket")
	scriptMulti   = redis.NewScript(luaSource("prelude", "fixed", "log", "counter", "bucket", "multi"))
	scriptRefund  = redis.NewScript(luaSource("prelude", "fixed", "log", "counter", "bucket", "refund"))

	// The hybrid mode's lease exchanges.
	scriptLeaseWindow = redis.NewScript(luaSource("prelude", "lease_window"))
	scriptLeaseBucket = redis.NewScript(luaSource("prelude", "lease_bucket"))
)

// scripts lists every script, for loading them ahead (Preload).
var scripts = []*redis.Script{scriptFixed, scriptLog, scriptCounter, scriptBucket, scriptMulti, scriptRefund, scriptLeaseWindow, scriptLeaseBucket}

func scriptFor(r *Rule) *redis.Script {
	switch a := r.limit.Algorithm(); {
	case a == 1:
		return scriptFixed
	case a == 2:
		return scriptLog
	case a == 3:
		return scriptCounter
	default:
		return scriptBucket
	}
}

// call is one script to run.
type call struct {
	script *redis.Script
	keys   []string
	args   []any
}

// runPipelined runs calls by SHA in one pipeline (per node, on a Cluster),
// and returns their results in order. go-redis reloads a script on NOSCRIPT
// for a single call, not inside a pipeline; a node that lacks a script here
// (new, restarted, failed over, flushed) gets the calls it refused again as
// EVAL, which also caches the script there. Per-call errors are in the
// commands; the error returned is the pipeline's.
func runPipelined(ctx context.Context, c redis.Scripter, p func() redis.Pipeliner, calls []call) ([]*redis.Cmd, error) {
	cmds := make([]*redis.Cmd, len(calls))
	pipe := p()
	for i, cl := range calls {
		cmds[i] = cl.script.EvalSha(ctx, pipe, cl.keys, cl.args...)
	}
	_, err := pipe.Exec(ctx)
	if err == nil {
		return cmds, nil
	}
	var retry []int
	for i, cmd := range cmds {
		if e := cmd.Err(); e != nil && redis.HasErrorPrefix(e, "NOSCRIPT") {
			retry = append(retry, i)
		}
	}
	if len(retry) == 0 {
		return cmds, err
	}
	pipe = p()
	for _, i := range retry {
		cmds[i] = calls[i].script.Eval(ctx, pipe, calls[i].keys, calls[i].args...)
	}
	_, err = pipe.Exec(ctx)
	if err != nil {
		return cmds, err
	}
	for _, cmd := range cmds {
		if cmd.Err() != nil {
			return cmds, cmd.Err()
		}
	}
	return cmds, nil
}
