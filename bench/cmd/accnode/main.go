// Command accnode is one node of the accuracy benchmark (bench/accuracy): a
// separate OS process, run with GOMAXPROCS=1 by cmd/accuracy, which starts N
// of them against one redis-server. It follows its precomputed Poisson
// schedule open loop, decides every arrival in the run's mode, and writes
// its decisions and summary next to -out.
//
//	accnode -spec '<accuracy.Spec as JSON>' -node 3 -out .run/accuracy/run/n3
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"

	"github.com/hybridlimit/hybridlimit/bench/accuracy"
)

func main() {
	specJSON := flag.String("spec", "", "the run's accuracy.Spec, as JSON")
	node := flag.Int("node", 0, "this node's index, from 0")
	out := flag.String("out", "", "path prefix of the output files (.rec, .json)")
	flag.Parse()
	var spec accuracy.Spec
	if err := json.Unmarshal([]byte(*specJSON), &spec); err != nil || *out == "" {
		fmt.Fprintf(os.Stderr, "accnode: need -spec (JSON) and -out: %v\n", err)
		os.Exit(2)
	}
	if err := accuracy.RunNode(spec, *node, *out); err != nil {
		fmt.Fprintf(os.Stderr, "accnode %d: %v\n", *node, err)
		os.Exit(1)
	}
}
