#!/usr/bin/env bash
# with-redis.sh CMD [ARG...]: run CMD with a Redis server, a three-master
# Redis Cluster, a master with a replica watched by three Sentinels and a
# Cluster of three masters with a replica each started for it, then stop them.
#
# CMD sees HYBRIDLIMIT_REDIS_ADDR, HYBRIDLIMIT_REDIS_CLUSTER_ADDRS,
# HYBRIDLIMIT_REDIS_SENTINEL_ADDRS, HYBRIDLIMIT_REDIS_SENTINEL_MASTER,
# HYBRIDLIMIT_REDIS_CLUSTER_REPLICAS_ADDRS and HYBRIDLIMIT_REDIS_RUN (see
# redis.sh). The servers are stopped by PID when CMD ends, when anything here
# fails and when this script is interrupted (INT, TERM, HUP; CMD's process
# group gets SIGTERM first). The exit status is CMD's, or 128+signal when
# interrupted.
# shellcheck disable=SC2317 # the functions below run from traps
set -euo pipefail

if [[ $# -eq 0 ]]; then
	echo "usage: scripts/with-redis.sh CMD [ARG...]" >&2
	exit 2
fi

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
redis() { bash "$here/redis.sh" "$@"; }

child=
own_group=0
starters=()

# wait_starters: wait for the background starts; fail if any failed.
wait_starters() {
	local p rc=0
	for p in "${starters[@]}"; do
		wait "$p" || rc=1
	done
	starters=()
	return "$rc"
}

# child_running: CMD has not exited (an exited, unreaped child is a zombie).
child_running() {
	local stat
	stat=$(ps -o stat= -p "$child" 2>/dev/null) || return 1
	[[ -n $stat && $stat != Z* ]]
}

stop_child() {
	[[ -n $child ]] || return 0
	local target=$child i
	[[ $own_group == 1 ]] && target=-$child
	kill -TERM -- "$target" 2>/dev/null || true
	# Give CMD 10 s to exit on SIGTERM, then SIGKILL it. Until we reap CMD
	# its group id cannot be reused, so anything left in the group (a test
	# binary that ignored SIGTERM) is ours to kill.
	for ((i = 0; i < 100; i++)); do
		child_running || break
		sleep 0.1
	done
	kill -KILL -- "$target" 2>/dev/null || true
	wait "$child" 2>/dev/null || true
	child=
}

cleanup() {
	local rc=$?
	trap - EXIT INT TERM HUP
	stop_child
	# A start still under way would record servers after the stop: let it end.
	wait_starters || true
	redis stop || echo "with-redis.sh: stopping redis failed" >&2
	exit "$rc"
}

interrupted() {
	echo "with-redis.sh: caught SIG$1; stopping" >&2
	exit "$2" # runs cleanup
}

# Servers of this checkout that are already running belong to someone else
# (another with-redis.sh, or `make redis-start`): refuse before arming the
# cleanup, which would stop them.
if running=$(redis status); then
	echo "with-redis.sh: Redis servers of this checkout are already running:" >&2
	echo "$running" >&2
	echo "with-redis.sh: stop them first (make redis-stop), or wait for the other run" >&2
	exit 1
fi

trap cleanup EXIT
trap 'interrupted INT 130' INT
trap 'interrupted TERM 143' TERM
trap 'interrupted HUP 129' HUP

redis ensure >&2
started=$SECONDS
redis start-single >/dev/null
# The rest start side by side: each waits mostly on Redis (nodes joining,
# replicas syncing, Sentinels finding each other).
redis start-cluster >/dev/null &
starters+=($!)
redis start-sentinel >/dev/null &
starters+=($!)
redis start-cluster-replicas >/dev/null &
starters+=($!)
wait_starters || { echo "with-redis.sh: starting Redis failed" >&2; exit 1; }
eval "$(redis env)"
: "${HYBRIDLIMIT_REDIS_ADDR:?redis.sh env gave no single-node address}"
: "${HYBRIDLIMIT_REDIS_CLUSTER_ADDRS:?redis.sh env gave no cluster addresses}"
: "${HYBRIDLIMIT_REDIS_SENTINEL_ADDRS:?redis.sh env gave no Sentinel addresses}"
: "${HYBRIDLIMIT_REDIS_SENTINEL_MASTER:?redis.sh env gave no Sentinel master name}"
: "${HYBRIDLIMIT_REDIS_CLUSTER_REPLICAS_ADDRS:?redis.sh env gave no replicated cluster addresses}"
: "${HYBRIDLIMIT_REDIS_RUN:?redis.sh env gave no .run directory}"
echo "with-redis.sh: up in $((SECONDS - started)) s:" \
	"HYBRIDLIMIT_REDIS_ADDR=$HYBRIDLIMIT_REDIS_ADDR" \
	"HYBRIDLIMIT_REDIS_CLUSTER_ADDRS=$HYBRIDLIMIT_REDIS_CLUSTER_ADDRS" \
	"HYBRIDLIMIT_REDIS_SENTINEL_ADDRS=$HYBRIDLIMIT_REDIS_SENTINEL_ADDRS" \
	"HYBRIDLIMIT_REDIS_SENTINEL_MASTER=$HYBRIDLIMIT_REDIS_SENTINEL_MASTER" \
	"HYBRIDLIMIT_REDIS_CLUSTER_REPLICAS_ADDRS=$HYBRIDLIMIT_REDIS_CLUSTER_REPLICAS_ADDRS" >&2

# CMD runs in the background so that a signal reaches our traps at once (bash
# runs traps only after a foreground command returns), in a process group of
# its own so that all of it (go test and its test binaries) can be stopped.
# Its stdin is passed on explicitly: a background job would get /dev/null.
if command -v setsid >/dev/null 2>&1; then
	setsid "$@" <&0 &
	own_group=1
else
	"$@" <&0 &
fi
child=$!
rc=0
wait "$child" || rc=$?
child=
exit "$rc"
