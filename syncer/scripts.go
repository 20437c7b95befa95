package syncer

import (
	"context"
	"embed"
	"errors"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hybridlimit/hybridlimit/local"
)

//go:embed lua/*.lua
var luaFS embed.FS

// The scripts are composed of parts: each a whole chunk of Lua with one
// job, a file of lua/ or a few lines held here (lines), and each script is
// the concatenation of its parts, in the order the table below gives. No
// script text is rewritten. The files, what each computes, and (after the
// semicolon) what it expects the parts before it to define:
//
//	prelude       helpers: fdiv, fmod, cdiv, fmt, other_family, demand_total, ttl_ms, clock; nothing
//	params        params(i), a rule's parameters from ARGV; NPARAMS, parse_fp, expire, bucket_alg,
//	              bucket_fp; prelude
//	fixed         decide_fixed(k, lk, p, now, n, commit): the fixed window's six numbers, a table;
//	              prelude, params
//	log           decide_log, the same for the sliding window log; prelude, params
//	counter       decide_counter, for the sliding window counter; prelude, params
//	sub           decide_sub, for the sub-window counter; prelude, params
//	bucket        the buckets' decision, statements whose returns are answer(form, six numbers);
//	              k, lk, now, n, commit, fp, burst, rl, el, tau, answer, form
//	bucket_args   what bucket expects but answer and form, from the single-rule script's KEYS
//	              and ARGV; nothing
//	multi         several rules decided as one, in one slot; prelude, params, deciders
//	refund        a reservation given back, then the rule's decision at its time; prelude,
//	              params, deciders
//	lease_window  the window algorithms' lease exchange; prelude
//	lease_bucket  the buckets' lease exchange; prelude, params
//	registry      a node's round in the registry of live nodes; prelude, params
//	region        a region's side of a global rule's exchange (region.go); prelude, params
//	global        the global store's side of it; prelude, params
//
// The lines are described beside them.
var lines = map[string]string{
	// answer(form, ...) packs a decision's six numbers into one string of
	// little-endian doubles, a single-rule script's reply (see unpack),
	// creating no function and no table; expects nothing.
	"answer_packed": "local answer, form = struct.pack, '<dddddd'\n",
	// answer(form, ...) makes a decision's six numbers a table, as the
	// window algorithms' decisions return theirs (form is unused); expects
	// nothing.
	"answer_table": "local form = nil\nlocal function answer(_, ...) return {...} end\n",
	// Opens decide_bucket(k, lk, p, now, n, commit), the buckets' decision
	// as a function of the window algorithms' signature, taking fp, burst,
	// rl, el and tau from p: the parts up to bucket_end are its body;
	// expects params (bucket_fp).
	"bucket_begin": "local function decide_bucket(k, lk, p, now, n, commit)\n" +
		"  local fp, burst, rl, el, tau = bucket_fp(p), p.burst, p.rl, p.el, p.tau\n",
	// Closes decide_bucket; expects bucket_begin and its body.
	"bucket_end": "end\n",
	// deciders[alg] is the decision function of algorithm alg (numbered as
	// local.Algorithm); expects decide_fixed, decide_log, decide_counter,
	// decide_bucket and decide_sub.
	"deciders": "local deciders = {decide_fixed, decide_log, decide_counter, decide_bucket, decide_bucket, decide_bucket, decide_sub}\n",
	// decide is the decision a window algorithm's single-rule script runs;
	// each expects the decide_ function it names.
	"use_fixed":   "local decide = decide_fixed\n",
	"use_log":     "local decide = decide_log\n",
	"use_counter": "local decide = decide_counter\n",
	"use_sub":     "local decide = decide_sub\n",
	// A window algorithm's single-rule script decides and answers: KEYS =
	// its state, and its log for the sliding window log (see
	// Keyspace.ruleKeys); ARGV[1] = now (empty for Redis's clock), ARGV[2] =
	// cost, ARGV[3..] = the rule's parameters. Expects params, clock,
	// decide, answer, form.
	"single": "return answer(form, unpack(decide(KEYS[1], KEYS[2], params(3), clock(ARGV[1]), tonumber(ARGV[2]), true)))\n",
}

// part returns the text of the part named name: one of lines, or the file
// lua/<name>.lua.
func part(name string) string {
	if src, ok := lines[name]; ok {
		return src
	}
	src, err := luaFS.ReadFile("lua/" + name + ".lua")
	if err != nil {
		panic("syncer: no script part " + name) // the build embeds every file
	}
	return string(src)
}

// layouts holds each script's parts, in order (see compose).
var layouts = map[*redis.Script][]string{}

// compose returns the script made of the named parts, in order: their
// concatenation. Each part is whole lines.
func compose(names ...string) *redis.Script {
	var b strings.Builder
	for _, n := range names {
		src := part(n)
		if !strings.HasSuffix(src, "\n") {
			panic("syncer: script part " + n + " does not end a line")
		}
		b.WriteString(src)
	}
	s := redis.NewScript(b.String())
	layouts[s] = names
	return s
}

// The scripts, run by SHA. Each algorithm has its own, holding only its own
// code. The buckets' is the leanest, a flat chunk: no helper, no function,
// no table of parameters; the numbers it needs as arguments (bucket_args),
// one GET and one SET.
//
// A single-rule script answers with its decision's six numbers packed into
// one string (answer_packed), not an array: turning a script's table into a
// reply costs Redis a sizable part of the bucket script's whole work.
var (
	scriptFixed   = compose("prelude", "params", "fixed", "answer_packed", "use_fixed", "single")
	scriptLog     = compose("prelude", "params", "log", "answer_packed", "use_log", "single")
	scriptCounter = compose("prelude", "params", "counter", "answer_packed", "use_counter", "single")
	scriptSub     = compose("prelude", "params", "sub", "answer_packed", "use_sub", "single")
	scriptBucket  = compose("bucket_args", "answer_packed", "bucket")
	scriptMulti   = compose("prelude", "params", "fixed", "log", "counter", "sub",
		"answer_table", "bucket_begin", "bucket", "bucket_end", "deciders", "multi")
	scriptRefund = compose("prelude", "params", "fixed", "log", "counter", "sub",
		"answer_table", "bucket_begin", "bucket", "bucket_end", "deciders", "refund")

	// The hybrid mode's lease exchanges.
	scriptLeaseWindow = compose("prelude", "lease_window")
	scriptLeaseBucket = compose("prelude", "params", "lease_bucket")
	scriptRegistry    = compose("prelude", "params", "registry")
)

// scripts lists every script, for loading them ahead (preload).
// The global store's script is among them: loading it in a region's Redis
// costs nothing, and keeps one list.
var scripts = []*redis.Script{scriptFixed, scriptLog, scriptCounter, scriptSub, scriptBucket, scriptMulti, scriptRefund, scriptLeaseWindow, scriptLeaseBucket, scriptRegistry, scriptRegion, scriptGlobal}

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

// runByMaster runs calls as runPipelined does, but on a Cluster one
// pipeline per master, at once, and hands each pipeline's results to done
// (the indexes of its calls in calls, nil for all of them in order; their
// commands; whether it is the last), one at a time, as it completes. go-redis runs a Cluster
// pipeline's nodes at once too, but waits for the slowest, and when one
// node fails (a dead master dialled again until the deadline) it gives
// every command of the pipeline the deadline's error, the others' answers
// too: a master down would fail the exchanges of every key. The error is
// the first failed pipeline's.
func (s *syncer) runByMaster(ctx context.Context, calls []call, done func(idx []int, cmds []*redis.Cmd, last bool)) error {
	c := s.cfg.Client
	var groups [][]int
	var addrs []string
	if cc, ok := c.(*redis.ClusterClient); ok {
		byAddr := map[string]int{}
		for i, cl := range calls {
			addr := ""
			if m, err := cc.MasterForKey(ctx, cl.keys[0]); err == nil {
				addr = m.Options().Addr
			}
			g, seen := byAddr[addr]
			if !seen {
				g = len(groups)
				byAddr[addr] = g
				groups = append(groups, nil)
				addrs = append(addrs, addr)
			}
			groups[g] = append(groups[g], i)
		}
	}
	if len(groups) == 0 {
		cmds, err := runPipelined(ctx, c, c.Pipeline, calls)
		done(nil, cmds, true) // nil: every call, in order
		return err
	}
	var mu sync.Mutex
	var first error
	left := len(groups)
	var wg sync.WaitGroup
	for g, idx := range groups {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cmds, err := s.runMaster(ctx, addrs[g], calls, idx)
			mu.Lock()
			defer mu.Unlock()
			if err != nil && first == nil {
				first = err
			}
			left--
			done(idx, cmds, left == 0)
		}()
	}
	wg.Wait()
	return first
}

// runMaster runs the calls idx of calls, whose keys are the Cluster master
// addr's, in one pipeline, or fails them at once while addr is in its
// backoff (masters).
func (s *syncer) runMaster(ctx context.Context, addr string, calls []call, idx []int) ([]*redis.Cmd, error) {
	c := s.cfg.Client
	if s.masters.skip(addr, time.Now()) {
		cmds := make([]*redis.Cmd, len(idx))
		for j := range cmds {
			cmds[j] = redis.NewCmd(ctx)
			cmds[j].SetErr(errMasterDown)
		}
		return cmds, errMasterDown
	}
	part := make([]call, len(idx))
	for j, i := range idx {
		part[j] = calls[i]
	}
	cmds, err := runPipelined(ctx, c, c.Pipeline, part)
	switch {
	case err == nil:
		s.masters.ok(addr)
	case errors.Is(wrap(ctx, "", err), ErrUnavailable) && !errors.Is(err, context.Canceled):
		s.masters.failed(addr, time.Now())
	}
	return cmds, err
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
