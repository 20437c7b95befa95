package syncer

import (
	"context"
	"embed"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/hybridlimit/hybridlimit/local"
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

// single is the body of a one-rule script: KEYS = its state, and its log for
// the sliding window log (see Keyspace.Keys); ARGV[1] = now (empty for
// Redis's clock), ARGV[2] = cost, ARGV[3..] = the rule's parameters. It
// returns the decision packed (see packed).
const single = "return struct.pack('<dddddd', unpack(%s(KEYS[1], KEYS[2], params(3), clock(ARGV[1]), tonumber(ARGV[2]), true)))\n"

func singleScript(file, fn string) *redis.Script {
	return redis.NewScript(luaSource("prelude", "params", file) + strings.Replace(single, "%s", fn, 1))
}

// The bucket algorithms' decision, as a flat chunk (the single-rule script
// runs it, its answers packed in place: no function is created per call)
// and wrapped in a function (for the multi-rule and refund scripts, whose
// answer makes a table): one text, two forms.
var (
	bucketBody = luaSource("bucket_body")
	bucketFunc = "local function answer(...) return {...} end\n" +
		"local function decide_bucket(k, now, n, fp, burst, rl, el, tau, commit, lk)\n" + bucketBody + "end\n"
)

// The scripts, run by SHA. Each algorithm has its own, holding only its own
// code. The buckets' is the leanest, a flat chunk: no helper, no table of
// parameters; the numbers it needs as arguments (ARGV: now, cost,
// fingerprint, and burst, rl, el, tau packed as four little-endian doubles
// in one argument, which costs Redis less than four to parse; KEYS: its
// state alone), one GET and one SET.
//
// A single-rule script answers with its decision's six numbers packed into
// one string (see unpack), not an array: turning a script's table into a
// reply costs Redis a sizable part of the bucket script's whole work.
var (
	scriptFixed   = singleScript("fixed", "decide_fixed")
	scriptLog     = singleScript("log", "decide_log")
	scriptCounter = singleScript("counter", "decide_counter")
	scriptSub     = singleScript("sub", "decide_sub")
	scriptBucket  = redis.NewScript(`local k, now = KEYS[1], ARGV[1]
if now == '' then
  local t = redis.call('TIME')
  now = t[1] * 1000000 + t[2]
else
  now = tonumber(now)
end
local n, fp = tonumber(ARGV[2]), ARGV[3]
local burst, rl, el, tau = struct.unpack('<dddd', ARGV[4])
local commit, lk = true, nil
` + strings.ReplaceAll(bucketBody, "return answer(", "return struct.pack('<dddddd', "))
	scriptMulti  = redis.NewScript(luaSource("prelude", "params", "fixed", "log", "counter", "sub") + bucketFunc + luaSource("multi"))
	scriptRefund = redis.NewScript(luaSource("prelude", "params", "fixed", "log", "counter", "sub") + bucketFunc + luaSource("refund"))

	// The hybrid mode's lease exchanges.
	scriptLeaseWindow = redis.NewScript(luaSource("prelude", "lease_window"))
	scriptLeaseBucket = redis.NewScript(luaSource("prelude", "params", "lease_bucket"))
	scriptRegistry    = redis.NewScript(luaSource("prelude", "params", "registry"))
)

// scripts lists every script, for loading them ahead (Preload).
var scripts = []*redis.Script{scriptFixed, scriptLog, scriptCounter, scriptSub, scriptBucket, scriptMulti, scriptRefund, scriptLeaseWindow, scriptLeaseBucket, scriptRegistry}

func scriptFor(r *Rule) *redis.Script {
	switch a := r.limit.Algorithm(); {
	case a == 1:
		return scriptFixed
	case a == 2:
		return scriptLog
	case a == 3:
		return scriptCounter
	case a == local.SubWindowCounter:
		return scriptSub
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
