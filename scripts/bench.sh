#!/usr/bin/env bash
# Runs the benchmarks and prints the tables of docs/performance.md.
#
# The micro benchmarks run COUNT times (default 5), interleaved: the whole
# suite once, then again, so drift on the machine spreads over every row
# instead of landing on one. The raw output is kept in .run/bench/ and the
# table printed is the median of the runs, each budget checked against the
# baseline (floor, x/time/rate) measured in the same runs.
#
#   COUNT=5 BENCHTIME=300ms scripts/bench.sh
set -euo pipefail
cd "$(dirname "$0")/.."
count=${COUNT:-5}
benchtime=${BENCHTIME:-300ms}
out=.run/bench
mkdir -p "$out"
raw="$out/micro.txt"
: >"$raw"

echo "== machine"
echo "$(go version); $(nproc) cores; $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
echo
echo "== micro benchmarks: $count interleaved runs, -benchtime $benchtime"
(cd bench && go test -c -o "../$out/micro.test" ./micro/)
for i in $(seq 1 "$count"); do
	echo "   run $i of $count"
	"$out/micro.test" -test.run '^$' -test.bench . -test.benchmem -test.benchtime "$benchtime" -test.count 1 >>"$raw"
done
echo
status=0
(cd bench && go run ./cmd/benchtable) <"$raw" || status=$?
echo
echo "raw output: $raw"
if command -v benchstat >/dev/null 2>&1; then
	benchstat "$raw" >"$out/micro.benchstat" && echo "benchstat: $out/micro.benchstat"
fi
exit "$status"
