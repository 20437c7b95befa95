// Command gossipnode is one node of the outage tests and benchmark
// (package internal/outage): a separate OS process that runs a Limiter per
// failure mode on the same arrivals, the Fallback one with a gossip node,
// and writes what each admitted per window on stdout as JSON lines.
//
//	gossipnode -spec '<outage.Spec as JSON>'
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"

	"github.com/redis/go-redis/v9"

	"github.com/hybridlimit/hybridlimit/internal/outage"
)

// quiet drops go-redis's log lines.
type quiet struct{}

func (quiet) Printf(context.Context, string, ...any) {}

func main() {
	specJSON := flag.String("spec", "", "the node's outage.Spec, as JSON")
	flag.Parse()
	var spec outage.Spec
	if err := json.Unmarshal([]byte(*specJSON), &spec); err != nil {
		fmt.Fprintf(os.Stderr, "gossipnode: need -spec (JSON): %v\n", err)
		os.Exit(2)
	}
	// go-redis logs every failed dial: thousands of lines an outage.
	redis.SetLogger(quiet{})
	if err := outage.RunNode(spec, os.Stdout); err != nil {
		fmt.Fprintf(os.Stderr, "gossipnode %s: %v\n", spec.Name, err)
		os.Exit(1)
	}
}
