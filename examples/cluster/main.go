// Command cluster is the cluster demo (make demo): four node processes
// serving HTTP behind the hybrid/httplimit middleware share one limit per
// client through Redis, in hybrid mode, and keep it while Redis is killed and
// started again, from the counts the nodes gossip (the Gossip policy).
//
// The driver installs redis-server when it is missing (scripts/redis.sh
// ensure), starts it on a free loopback port, starts four nodes (this binary
// with -node; their gossip encrypted with a key made for the run), and sends
// them traffic from inside the process: an abusive client far over its limit
// spread over every node, a client whose requests mostly go to one node, new
// clients arriving, and steady clients under their limit.
//
// Everything is counted per window of the rule (1 s), aligned as Redis
// aligns them: at multiples of the window on Redis's clock. The driver asks
// Redis for its time and begins the load at a window's start; each node
// records every request it decides (time on Redis's clock, client, outcome)
// in -out/decisions-nN.txt. Beside what the cluster admitted, the demo shows
// what an exact limiter admits on the same arrivals: one local.Limiter under
// the same rule replaying the recorded requests at their times. A fixed
// window admits up to twice its limit in a second that straddles a boundary,
// and a class of several clients up to the limit times the clients; the
// replay shows those figures for what they are.
//
// After each window it prints each node's admitted and refused requests, the
// middleware's latency p99 and the node's mode, Redis's scripts and commands,
// and per class of client what the cluster admitted beside the exact replay
// and the limit. A third of the way in Redis is killed (SIGKILL), at a
// window's start; two thirds in it is started again, empty. At the end it
// prints a summary per phase (admitted ÷ exact replay, the most a client got
// in a window ÷ the limit) and writes the timeline to -out/timeline.svg.
//
// Every process it starts is stopped by PID when the run ends, fails or is
// interrupted (Ctrl-C, SIGTERM); on Linux the kernel also kills them if the
// driver dies.
//
// Usage, from the repository's root:
//
//	make demo                                # builds and runs it
//	go run ./examples/cluster                # the same
//	go run ./examples/cluster -duration 9s   # a shorter run
package main

import (
	"context"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"
)

func main() {
	var (
		nodeID int
		no     nodeOptions
		do     driverOptions
		plain  bool
	)
	flag.IntVar(&nodeID, "node", 0, "run as node `n` of the cluster (the driver starts the nodes with it)")
	flag.StringVar(&no.redis, "redis", "", "node: Redis's `host:port`")
	flag.IntVar(&no.gossipPort, "gossip-port", 0, "node: the gossip's loopback `port`")
	seeds := flag.String("seeds", "", "node: the other nodes' gossip `addresses`, comma-separated")
	flag.StringVar(&no.records, "records", "", "node: the `file` to record its decisions in")
	flag.IntVar(&do.nodes, "nodes", 4, "how many nodes, 2 to 8")
	flag.Int64Var(&do.limit, "limit", 400, "the limit per client, requests per 1s window, 10 to 2000")
	flag.StringVar(&do.algo, "algo", "fixed_window", "the rule's algorithm: fixed_window or sliding_window_counter")
	flag.DurationVar(&do.duration, "duration", 30*time.Second, "how long the load runs, 6s to 60s: Redis is killed at a third and started again at two thirds")
	flag.StringVar(&do.out, "out", ".run/demo", "`dir`ectory for the plot, the nodes' logs and Redis's files")
	flag.BoolVar(&do.install, "install", true, "install redis-server with scripts/redis.sh ensure when it is missing")
	flag.BoolVar(&plain, "plain", false, "print plain lines even on a terminal")
	flag.Parse()

	if nodeID != 0 {
		no.id, no.nodes, no.limit, no.algo = nodeID, do.nodes, do.limit, do.algo
		no.seeds = strings.Split(*seeds, ",")
		key, err := hex.DecodeString(os.Getenv(gossipKeyEnv))
		if err != nil || len(key) != 32 {
			fmt.Fprintf(os.Stderr, "node n%d: %s must hold 32 bytes in hex\n", nodeID, gossipKeyEnv)
			os.Exit(2)
		}
		no.gossipKey = key
		if err := runNode(no); err != nil {
			fmt.Fprintf(os.Stderr, "node n%d: %v\n", nodeID, err)
			os.Exit(1)
		}
		return
	}
	switch {
	case do.nodes < 2 || do.nodes > maxNodes:
		usage(fmt.Sprintf("-nodes %d: must be from 2 to %d", do.nodes, maxNodes))
	case do.limit < 10 || do.limit > 2000:
		usage(fmt.Sprintf("-limit %d: must be from 10 to 2000", do.limit))
	case do.algo != "fixed_window" && do.algo != "sliding_window_counter":
		usage(fmt.Sprintf("-algo %q: must be fixed_window or sliding_window_counter", do.algo))
	case do.duration < 6*time.Second || do.duration > time.Minute:
		usage(fmt.Sprintf("-duration %v: must be from 6s to 1m", do.duration))
	}
	do.live = !plain && isTerminal(os.Stdout)

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	sum, err := runDriver(ctx, do, os.Stdout)
	interrupted := ctx.Err() != nil
	stop()
	switch {
	case interrupted:
		fmt.Fprintln(os.Stderr, "demo: interrupted; every process it started is stopped")
		os.Exit(130)
	case err != nil:
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	case sum.failed() != 0:
		fmt.Fprintln(os.Stderr, "demo:", errors.New("requests failed while Redis was down"))
		os.Exit(1)
	}
}

func usage(msg string) {
	fmt.Fprintln(os.Stderr, "demo:", msg)
	flag.Usage()
	os.Exit(2)
}

// isTerminal reports whether f is a character device, such as a terminal.
func isTerminal(f *os.File) bool {
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}
