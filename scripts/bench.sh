#!/usr/bin/env bash
# Runs the benchmarks and prints the tables of docs/performance.md and
# docs/redis.md.
#
# The micro benchmarks run COUNT times (default 5), interleaved: the whole
# suite once, then again, so drift on the machine spreads over every row
# instead of landing on one. The raw output is kept in .run/bench/ and the
# table printed is the median of the runs, each budget checked against the
# baseline (floor, x/time/rate) measured in the same runs.
#
# The Redis benchmarks (bench/redisbench: central mode against redis_rate and
# a naive INCR+EXPIRE pipeline, on a private redis-server on loopback) run
# COUNT times too, interleaved the same way, then the memory benchmark once;
# they need redis-server on PATH or HYBRIDLIMIT_REDIS_ADDR (make bench gives
# both). Their table checks our GCRA against redis_rate.
#
# Every part runs even when an earlier one misses a budget; the exit status
# is non-zero when any budget or target is missed or a part fails.
#
#   COUNT=5 BENCHTIME=300ms scripts/bench.sh
#   PARTS=redis REDIS_TPUT=2s REDIS_LAT=1s REDIS_REJ=500ms scripts/bench.sh
set -euo pipefail
cd "$(dirname "$0")/.."
count=${COUNT:-5}
benchtime=${BENCHTIME:-300ms}
parts=${PARTS:-micro redis}
out=.run/bench
mkdir -p "$out"
status=0

echo "== machine"
echo "$(go version); $(nproc) cores; $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
echo

if [[ " $parts " == *" micro "* ]]; then
	raw="$out/micro.txt"
	: >"$raw"
	echo "== micro benchmarks: $count interleaved runs, -benchtime $benchtime"
	if (cd bench && go test -c -o "../$out/micro.test" ./micro/); then
		for i in $(seq 1 "$count"); do
			echo "   run $i of $count"
			"$out/micro.test" -test.run '^$' -test.bench . -test.benchmem -test.benchtime "$benchtime" -test.count 1 >>"$raw" || status=1
		done
		echo
		(cd bench && go run ./cmd/benchtable) <"$raw" || status=1
		echo
		echo "raw output: $raw"
		if command -v benchstat >/dev/null 2>&1; then
			benchstat "$raw" >"$out/micro.benchstat" && echo "benchstat: $out/micro.benchstat"
		fi
	else
		echo "micro benchmarks: build failed"
		status=1
	fi
	echo
fi

if [[ " $parts " == *" redis "* ]]; then
	raw="$out/redis.txt"
	: >"$raw"
	tput=${REDIS_TPUT:-2s} lat=${REDIS_LAT:-1s} rej=${REDIS_REJ:-500ms}
	echo "== redis benchmarks: $count interleaved runs; phases: admitted $tput with 64 goroutines, $lat with 1, rejected $rej with 64"
	if ! command -v redis-server >/dev/null 2>&1 && [[ -z ${HYBRIDLIMIT_REDIS_ADDR:-} ]]; then
		echo "redis benchmarks: neither redis-server on PATH nor HYBRIDLIMIT_REDIS_ADDR; run make bench"
		status=1
	elif (cd bench && go test -c -o "../$out/redis.test" ./redisbench/); then
		start=$SECONDS
		flags=(-test.run '^$' -test.benchtime 1x -test.count 1 -redisbench.tput "$tput" -redisbench.lat "$lat" -redisbench.rej "$rej")
		for i in $(seq 1 "$count"); do
			echo "   run $i of $count"
			"$out/redis.test" -test.bench '^BenchmarkRedis$' "${flags[@]}" >>"$raw" || status=1
		done
		echo "   memory"
		"$out/redis.test" -test.bench '^BenchmarkMemory$' "${flags[@]}" >>"$raw" || status=1
		echo "   redis part: $((SECONDS - start)) s"
		echo
		(cd bench && go run ./cmd/redistable) <"$raw" || status=1
		echo
		echo "raw output: $raw"
	else
		echo "redis benchmarks: build failed"
		status=1
	fi
fi
exit "$status"
