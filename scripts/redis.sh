#!/usr/bin/env bash
# redis.sh: Redis servers for hybridlimit's tests and benchmarks.
#
#   scripts/redis.sh ensure          install redis-server with apt-get if missing
#   scripts/redis.sh start-single    one server         -> .run/redis.addr
#   scripts/redis.sh start-cluster   three-master Cluster -> .run/cluster.addrs
#   scripts/redis.sh start-sentinel  master, replica, three Sentinels
#                                    (master name hlmaster) -> .run/sentinel.addrs
#   scripts/redis.sh start-cluster-replicas
#                                    three masters with a replica each, a Cluster
#                                    apart from start-cluster's
#                                    -> .run/cluster-replicas.addrs (masters)
#   scripts/redis.sh restart NAME    start .run/NAME's server again, with the
#                                    arguments and port it had (after a SIGKILL)
#   scripts/redis.sh stop            stop every server started here (by PID)
#   scripts/redis.sh env             export lines for whatever is running
#   scripts/redis.sh status          what is recorded; exit 0 if any runs
#
# Every server listens on 127.0.0.1 only, on a port found free at start (a
# cluster node also needs port+10000 free for its bus), with persistence off.
# State lives in .run/ of this checkout, one directory per server (redis.pid,
# port, args: its command line, NUL-separated, for a restart; a cluster node's
# nodes.conf and a Sentinel's config, which they rewrite, are kept there too),
# so two checkouts never share state or ports. Starting a kind of server that
# is already running in this checkout is refused: run `stop` first.
#
# The failover topologies fail over fast: Sentinel's down-after-milliseconds
# is 1000 and its failover-timeout 3000 (a second failover of the same master
# may start 6 s after the first), Cluster's node timeout is 2000 ms.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
RUN="$ROOT/.run"

# Client ports are drawn from [PORT_MIN, PORT_MAX]. With the bus at +10000
# this stays below Linux's default ephemeral range (32768-60999), so outgoing
# connections do not take our ports between the check and the bind.
PORT_MIN=10000
PORT_MAX=22000
START_TRIES=8      # a port taken between the check and the bind: try another
WAIT_SECS=15       # for a server to answer PING
CLUSTER_WAIT_SECS=60
SENTINEL_WAIT_SECS=30
# Servers with replicas send a replica the data at once instead of waiting
# 5 s for more replicas to ask (diskless sync's default delay): a replica,
# and an old master back as one, is linked in milliseconds.
REPLICATED=(--repl-diskless-sync-delay 0)
SENTINEL_MASTER=hlmaster
# Sentinel's own periods (SENTINEL DEBUG, not kept in its config; a restart
# reads them from .run/NAME/debug): INFO to replicas every second instead of
# ten, hello messages every 500 ms instead of two seconds (so Sentinels find
# each other sooner and a returning old master is made a replica after 2 s
# instead of 8), and a TILT that lasts 5 s instead of 30 should a loaded
# machine delay Sentinel's timer.
SENTINEL_DEBUG=(info-period 1000 publish-period 500 tilt-period 5000)
STOP_WAIT_SECS=10  # between SIGTERM and SIGKILL

log() { echo "redis.sh: $*" >&2; }
die() { log "error: $*"; exit 1; }

# --- ensure -----------------------------------------------------------------

cmd_ensure() {
	if ! command -v redis-server >/dev/null 2>&1 || ! command -v redis-cli >/dev/null 2>&1; then
		local sudo=()
		if [[ $(id -u) -ne 0 ]]; then
			command -v sudo >/dev/null 2>&1 || die "redis-server is missing and we are not root and have no sudo: install the redis-server package"
			sudo=(sudo)
		fi
		command -v apt-get >/dev/null 2>&1 || die "redis-server is missing and apt-get is not available: install Redis >= 7 yourself"
		log "redis-server not found: installing it with apt-get"
		# Wait for a dpkg lock held by another apt run instead of failing.
		"${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 update -q
		"${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -q redis-server
		stop_distro_service "${sudo[@]}"
		command -v redis-server >/dev/null 2>&1 || die "apt-get finished but redis-server is still not on PATH"
	fi
	redis-server --version
	redis-cli --version
}

# The package may start its own service on 6379 (on machines where services
# are allowed to start). We installed it only for tests: stop that one.
stop_distro_service() {
	local pidfile=/run/redis/redis-server.pid pid
	[[ -f $pidfile ]] || return 0
	pid=$(<"$pidfile")
	is_redis_pid "$pid" || return 0
	log "stopping the redis-server service the package started (pid $pid); our tests start their own"
	if command -v systemctl >/dev/null 2>&1 && [[ -d /run/systemd/system ]]; then
		"$@" systemctl disable --now redis-server || true
	else
		"$@" service redis-server stop || true
	fi
}

# --- ports ------------------------------------------------------------------

# port_free PORT: nothing on this machine uses TCP port PORT (any state).
port_free() {
	local p=$1
	if command -v ss >/dev/null 2>&1; then
		[[ -z $(ss -Htan "( sport = :$p )" 2>/dev/null) ]]
	elif command -v python3 >/dev/null 2>&1; then
		python3 - "$p" <<-'EOF' >/dev/null 2>&1
			import socket, sys
			s = socket.socket()
			s.bind(("127.0.0.1", int(sys.argv[1])))
		EOF
	else
		# Connection refused means no listener.
		if (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then return 1; fi
	fi
}

# pick_port BUS: set PICKED to a free port (with port+10000 free too if BUS is
# 1) that this run has not tried before.
declare -A TAKEN=()
PICKED=
pick_port() {
	local bus=$1 p i
	for ((i = 0; i < 500; i++)); do
		p=$((PORT_MIN + (RANDOM * 32768 + RANDOM) % (PORT_MAX - PORT_MIN + 1)))
		[[ -z ${TAKEN[$p]:-} ]] || continue
		port_free "$p" || continue
		if [[ $bus == 1 ]]; then port_free $((p + 10000)) || continue; fi
		TAKEN[$p]=1
		PICKED=$p
		return 0
	done
	die "no free port found in $PORT_MIN-$PORT_MAX after 500 tries"
}

# --- processes --------------------------------------------------------------

# alive PID: the process exists and is not a zombie (an orphaned server that
# exited may wait a while to be reaped).
alive() {
	local stat
	kill -0 "$1" 2>/dev/null || return 1
	stat=$(ps -o stat= -p "$1" 2>/dev/null) || return 1
	[[ -n $stat && $stat != Z* ]]
}

# is_redis_pid PID: PID is alive and is a redis-server or redis-sentinel
# (guards against a stale pidfile whose PID now belongs to something else).
is_redis_pid() {
	local pid=$1 comm
	[[ $pid =~ ^[0-9]+$ ]] || return 1
	alive "$pid" || return 1
	comm=$(ps -o comm= -p "$pid" 2>/dev/null) || return 1
	[[ $comm == redis-server* || $comm == redis-sentinel* ]]
}

cli() { # cli PORT ARGS...: redis-cli with a bound on how long it may hang
	local port=$1
	shift
	timeout 5 redis-cli -h 127.0.0.1 -p "$port" "$@"
}

# running NAME: a server recorded under .run/NAME is alive.
running() {
	local f="$RUN/$1/redis.pid"
	[[ -f $f ]] && is_redis_pid "$(<"$f")"
}

refuse_if_running() {
	local d name
	for d in "$RUN"/"$1"*/; do
		[[ -d $d ]] || continue
		name=$(basename "$d")
		if running "$name"; then
			die "$name is already running in this checkout (pid $(<"$RUN/$name/redis.pid"), port $(<"$RUN/$name/port")); run 'scripts/redis.sh stop' first"
		fi
	done
}

# launch NAME ARGV...: run ARGV (a redis-server command line) as .run/NAME's
# server, record its PID, and wait until it answers PING with that PID. Sets
# PID. Returns 1 if it exited (its log says why), and dies if it never
# answered.
PID=
launch() {
	local name=$1
	shift
	local dir="$RUN/$name" port pid i
	port=$(<"$dir/port")
	# $! is redis-server itself (setsid execs it without forking, since a
	# background job of this shell never leads a process group). In a
	# session of its own it does not get the terminal's Ctrl-C: it stops
	# when `stop` says so. Its stdio goes to the log so it never holds our
	# caller's pipes open.
	if command -v setsid >/dev/null 2>&1; then
		setsid "$@" </dev/null >>"$dir/redis.log" 2>&1 &
	else
		"$@" </dev/null >>"$dir/redis.log" 2>&1 &
	fi
	pid=$!
	echo "$pid" >"$dir/redis.pid"
	for ((i = 0; i < WAIT_SECS * 10; i++)); do
		if ! alive "$pid"; then
			break
		fi
		# PONG from our own process, not from someone else's on that port.
		if [[ $(cli "$port" ping 2>/dev/null) == PONG ]] &&
			[[ $(cli "$port" info server 2>/dev/null | tr -d '\r' | sed -n 's/^process_id://p') == "$pid" ]]; then
			PID=$pid
			if [[ -f $dir/debug ]]; then
				local debug
				read -ra debug <"$dir/debug"
				cli "$port" sentinel debug "${debug[@]}" >/dev/null || die "$name: SENTINEL DEBUG ${debug[*]} failed"
			fi
			log "$name: $1 pid $pid on 127.0.0.1:$port"
			return 0
		fi
		sleep 0.1
	done
	if alive "$pid"; then
		kill -KILL "$pid" 2>/dev/null || true
		rm -f "$dir/redis.pid"
		die "$name: $1 (pid $pid, port $port) did not answer PING within ${WAIT_SECS}s; log tail:
$(tail -n 20 "$dir/redis.log" 2>/dev/null)"
	fi
	wait "$pid" 2>/dev/null || true
	rm -f "$dir/redis.pid"
	return 1
}

# start_server NAME MODE [EXTRA ARGS...]: start one server recorded under
# .run/NAME, retrying on another port if ours was taken meanwhile. MODE is
# plain, cluster (a Cluster node; its port+10000 must be free too) or sentinel
# (a Sentinel whose config starts as SENTINEL_CONF). Sets PORT.
PORT=
SENTINEL_CONF=
start_server() {
	local name=$1 mode=$2
	shift 2
	local dir="$RUN/$name" try port bus=0
	[[ $mode == cluster ]] && bus=1
	for ((try = 1; try <= START_TRIES; try++)); do
		pick_port "$bus"
		port=$PICKED
		rm -rf "$dir"
		mkdir -p "$dir"
		local args=(redis-server)
		if [[ $mode == sentinel ]]; then
			# Sentinel rewrites its config as it learns the topology.
			printf '%s\n' "$SENTINEL_CONF" >"$dir/sentinel.conf"
			args+=("$dir/sentinel.conf" --sentinel)
			echo "${SENTINEL_DEBUG[*]}" >"$dir/debug"
		fi
		args+=(
			--port "$port" --bind 127.0.0.1 --protected-mode no
			--save '' --appendonly no
			--dir "$dir" --logfile "$dir/redis.log" --daemonize no
			--enable-debug-command local
		)
		if [[ $mode == cluster ]]; then
			args+=(--cluster-enabled yes --cluster-config-file "$dir/nodes-$port.conf" --cluster-node-timeout 2000)
		fi
		args+=("$@")
		echo "$port" >"$dir/port"
		printf '%s\0' "${args[@]}" >"$dir/args"
		if launch "$name" "${args[@]}"; then
			PORT=$port
			return 0
		fi
		if grep -qi 'address already in use' "$dir/redis.log" 2>/dev/null; then
			log "$name: port $port was taken meanwhile, trying another"
			continue
		fi
		die "$name: redis-server exited at start; log tail:
$(tail -n 20 "$dir/redis.log" 2>/dev/null)"
	done
	die "$name: could not bind a port after $START_TRIES tries"
}

# start_servers MODE NAMES... [-- EXTRA ARGS...]: start_server each of NAMES
# at once, each in a subshell of its own (on a loaded machine a server takes a
# second or more to start and answer). Dies if any failed; their ports are in
# .run/NAME/port.
start_servers() {
	local mode=$1 names=() pids=() i failed=0
	shift
	while (($#)) && [[ $1 != -- ]]; do
		names+=("$1")
		shift
	done
	(($#)) && shift
	for i in "${names[@]}"; do
		start_server "$i" "$mode" "$@" &
		pids+=($!)
	done
	for i in "${!pids[@]}"; do
		wait "${pids[$i]}" || { log "${names[$i]} failed to start"; failed=1; }
	done
	((failed == 0)) || die "starting ${names[*]} failed"
}

# --- commands ---------------------------------------------------------------

need_redis() {
	command -v redis-server >/dev/null 2>&1 || die "redis-server not found: run 'scripts/redis.sh ensure'"
	command -v redis-cli >/dev/null 2>&1 || die "redis-cli not found: run 'scripts/redis.sh ensure'"
}

cmd_start_single() {
	need_redis
	refuse_if_running single
	mkdir -p "$RUN"
	rm -f "$RUN/redis.addr"
	start_server single plain
	echo "127.0.0.1:$PORT" >"$RUN/redis.addr"
	echo "127.0.0.1:$PORT"
}

# A topology that fails to come up is not left half-running: its start arms
# this trap with the prefix of its servers' names.
STOP_PREFIX=
stop_on_failure() {
	local rc=$?
	if [[ $rc != 0 ]]; then cmd_stop "$STOP_PREFIX"; fi
	exit "$rc"
}

# cluster_ok REPLICAS PORT...: every node of the Cluster on PORTs says
# cluster_state:ok, all slots assigned and every node known; with REPLICAS
# per master, there are as many masters as there should be and every replica's
# link to its master is up. Sets WHY when not ok.
WHY=
cluster_ok() {
	local replicas=$1
	shift
	local n=$# p info masters=0
	for p in "$@"; do
		info=$(cli "$p" cluster info 2>/dev/null | tr -d '\r') || true
		if ! grep -qx 'cluster_state:ok' <<<"$info" ||
			! grep -qx 'cluster_slots_assigned:16384' <<<"$info" ||
			! grep -qx "cluster_known_nodes:$n" <<<"$info"; then
			WHY="CLUSTER INFO of 127.0.0.1:$p:
$info"
			return 1
		fi
		((replicas > 0)) || continue
		info=$(cli "$p" info replication 2>/dev/null | tr -d '\r') || true
		if grep -qx 'role:master' <<<"$info"; then
			masters=$((masters + 1))
		elif ! grep -qx 'master_link_status:up' <<<"$info"; then
			WHY="replica 127.0.0.1:$p not linked to its master:
$info"
			return 1
		fi
	done
	if ((replicas > 0 && masters != n / (replicas + 1))); then
		WHY="$masters masters among $n nodes, not $((n / (replicas + 1)))"
		return 1
	fi
}

# create_cluster NAME COUNT REPLICAS: start COUNT nodes .run/NAME-1...COUNT and
# make them a Cluster with REPLICAS replicas per master; wait until it is ok.
# Sets PORTS.
PORTS=()
create_cluster() {
	local name=$1 count=$2 replicas=$3 addrs=() extra=() i
	((replicas == 0)) || extra=("${REPLICATED[@]}")
	local names=()
	for ((i = 1; i <= count; i++)); do names+=("$name-$i"); done
	start_servers cluster "${names[@]}" -- "${extra[@]}"
	PORTS=()
	for i in "${names[@]}"; do
		PORTS+=("$(<"$RUN/$i/port")")
		addrs+=("127.0.0.1:${PORTS[-1]}")
	done
	log "creating $name: ${addrs[*]}"
	if ! timeout 120 redis-cli --cluster create "${addrs[@]}" --cluster-replicas "$replicas" --cluster-yes \
		>"$RUN/$name-create.log" 2>&1; then
		die "redis-cli --cluster create failed:
$(tail -n 30 "$RUN/$name-create.log")"
	fi
	local deadline=$((SECONDS + CLUSTER_WAIT_SECS))
	until cluster_ok "$replicas" "${PORTS[@]}"; do
		if ((SECONDS >= deadline)); then
			die "$name not ok after ${CLUSTER_WAIT_SECS}s; $WHY"
		fi
		sleep 0.2
	done
}

cmd_start_cluster() {
	need_redis
	refuse_if_running cluster-
	mkdir -p "$RUN"
	rm -f "$RUN/cluster.addrs"
	STOP_PREFIX=cluster-
	trap stop_on_failure EXIT
	create_cluster cluster 3 0
	local joined
	joined=$(printf '127.0.0.1:%s,' "${PORTS[@]}")
	joined=${joined%,}
	echo "$joined" >"$RUN/cluster.addrs"
	log "cluster ok: $joined"
	trap - EXIT
	echo "$joined"
}

# The replicated Cluster's nodes are rcluster-N: a name apart from cluster-N,
# so that `stop cluster-` and the replica-less Cluster's checks never see them.
cmd_start_cluster_replicas() {
	need_redis
	refuse_if_running rcluster-
	mkdir -p "$RUN"
	rm -f "$RUN/cluster-replicas.addrs"
	STOP_PREFIX=rcluster-
	trap stop_on_failure EXIT
	create_cluster rcluster 6 1
	local joined
	joined=$(cli "${PORTS[0]}" cluster nodes | tr -d '\r' |
		awk '$3 ~ /(^|,)master(,|$)/ { sub(/@.*/, "", $2); print $2 }' | sort | paste -sd,)
	[[ -n $joined ]] || die "rcluster: CLUSTER NODES lists no master"
	echo "$joined" >"$RUN/cluster-replicas.addrs"
	log "replicated cluster ok; masters: $joined"
	trap - EXIT
	echo "$joined"
}

# sentinel_ok MASTERPORT REPLICAPORT SENTINELPORT...: the replica's link to
# the master is up and every Sentinel knows the master (as a master, neither
# down nor failing over), its one replica (linked, not down) and the other
# Sentinels. Sets WHY when not ok.
sentinel_ok() {
	local mport=$1 rport=$2
	shift 2
	local others=$(($# - 1)) p info
	info=$(cli "$rport" info replication 2>/dev/null | tr -d '\r') || true
	if ! grep -qx 'master_link_status:up' <<<"$info"; then
		WHY="replica 127.0.0.1:$rport not linked to its master:
$info"
		return 1
	fi
	for p in "$@"; do
		# SENTINEL MASTER and REPLICAS answer field and value on alternate lines.
		info=$(cli "$p" sentinel master "$SENTINEL_MASTER" 2>/dev/null | tr -d '\r' | paste -d= - -) || true
		if ! grep -qx "port=$mport" <<<"$info" || ! grep -qx 'flags=master' <<<"$info" ||
			! grep -qx 'num-slaves=1' <<<"$info" || ! grep -qx "num-other-sentinels=$others" <<<"$info"; then
			WHY="Sentinel 127.0.0.1:$p: SENTINEL MASTER $SENTINEL_MASTER:
$info"
			return 1
		fi
		info=$(cli "$p" sentinel replicas "$SENTINEL_MASTER" 2>/dev/null | tr -d '\r' | paste -d= - -) || true
		if ! grep -qx "port=$rport" <<<"$info" || ! grep -qx 'flags=slave' <<<"$info" ||
			! grep -qx 'master-link-status=ok' <<<"$info"; then
			WHY="Sentinel 127.0.0.1:$p: SENTINEL REPLICAS $SENTINEL_MASTER:
$info"
			return 1
		fi
	done
}

# The Sentinel topology's servers are sentinel-redis-1 (the master at start),
# sentinel-redis-2 (its replica) and sentinel-1..3.
cmd_start_sentinel() {
	need_redis
	refuse_if_running sentinel-
	mkdir -p "$RUN"
	rm -f "$RUN/sentinel.addrs"
	STOP_PREFIX=sentinel-
	trap stop_on_failure EXIT
	local mport rport sports=() i
	start_server sentinel-redis-1 plain "${REPLICATED[@]}"
	mport=$PORT
	SENTINEL_CONF="sentinel monitor $SENTINEL_MASTER 127.0.0.1 $mport 2
sentinel down-after-milliseconds $SENTINEL_MASTER 1000
sentinel failover-timeout $SENTINEL_MASTER 3000
sentinel parallel-syncs $SENTINEL_MASTER 1"
	start_server sentinel-redis-2 plain "${REPLICATED[@]}" --replicaof 127.0.0.1 "$mport" &
	local replica=$!
	start_servers sentinel sentinel-1 sentinel-2 sentinel-3
	wait "$replica" || die "sentinel-redis-2 failed to start"
	rport=$(<"$RUN/sentinel-redis-2/port")
	for i in 1 2 3; do sports+=("$(<"$RUN/sentinel-$i/port")"); done
	local deadline=$((SECONDS + SENTINEL_WAIT_SECS))
	until sentinel_ok "$mport" "$rport" "${sports[@]}"; do
		if ((SECONDS >= deadline)); then
			die "Sentinel topology not ok after ${SENTINEL_WAIT_SECS}s; $WHY"
		fi
		sleep 0.2
	done
	local joined
	joined=$(printf '127.0.0.1:%s,' "${sports[@]}")
	joined=${joined%,}
	echo "$joined" >"$RUN/sentinel.addrs"
	log "sentinel ok: master 127.0.0.1:$mport, replica 127.0.0.1:$rport, Sentinels $joined"
	trap - EXIT
	echo "$joined"
}

# restart NAME: start .run/NAME's server again with the command line it was
# started with (its args file), on its port: for a server a test SIGKILLed. A
# cluster node reads its nodes.conf and a Sentinel its rewritten config, so
# they rejoin as what the topology now says they are.
cmd_restart() {
	local name=${1:-} dir a argv=()
	[[ -n $name && $name != */* ]] || die "restart: give the name of a directory under $RUN"
	dir="$RUN/$name"
	[[ -f $dir/args && -f $dir/port ]] || die "restart: $dir has no args or port file"
	if running "$name"; then
		die "$name is running (pid $(<"$dir/redis.pid")): stop or kill it first"
	fi
	need_redis
	while IFS= read -r -d '' a; do argv+=("$a"); done <"$dir/args"
	launch "$name" "${argv[@]}" || die "$name: ${argv[0]} exited at restart; log tail:
$(tail -n 20 "$dir/redis.log" 2>/dev/null)"
	echo "127.0.0.1:$(<"$dir/port") $PID"
}

# all_running PREFIX: servers are recorded under .run/PREFIX* and all run.
all_running() {
	local d any=1
	for d in "$RUN"/"$1"*/; do
		[[ -f $d/port ]] || continue
		running "$(basename "$d")" || return 1
		any=0
	done
	return "$any"
}

# stop [PREFIX]: stop the recorded servers whose name starts with PREFIX (all
# by default).
cmd_stop() {
	[[ -d $RUN ]] || return 0
	local prefix=${1:-} f dir name pid pids=() names=()
	for f in "$RUN"/"$prefix"*/redis.pid; do
		[[ -f $f ]] || continue
		dir=$(dirname "$f")
		name=$(basename "$dir")
		pid=$(<"$f")
		if is_redis_pid "$pid"; then
			kill -CONT "$pid" 2>/dev/null || true # a test may have SIGSTOPped it
			kill -TERM "$pid" 2>/dev/null || true
			pids+=("$pid")
			names+=("$name")
		else
			log "$name: pid $pid is not a running redis-server; dropping its pidfile"
			rm -f "$f"
		fi
	done
	local i deadline=$((SECONDS + STOP_WAIT_SECS))
	for i in "${!pids[@]}"; do
		pid=${pids[$i]}
		while alive "$pid" && ((SECONDS < deadline)); do sleep 0.1; done
		if alive "$pid"; then
			log "${names[$i]}: pid $pid ignored SIGTERM for ${STOP_WAIT_SECS}s; sending SIGKILL"
			kill -KILL "$pid" 2>/dev/null || true
			local j
			for ((j = 0; j < 50; j++)); do alive "$pid" || break; sleep 0.1; done
			if alive "$pid"; then
				log "${names[$i]}: pid $pid still alive after SIGKILL; leaving its pidfile"
				continue
			fi
		fi
		log "${names[$i]}: stopped pid $pid"
		rm -f "$RUN/${names[$i]}/redis.pid"
	done
	case $prefix in
	"") rm -f "$RUN/redis.addr" "$RUN/cluster.addrs" "$RUN/sentinel.addrs" "$RUN/cluster-replicas.addrs" ;;
	single) rm -f "$RUN/redis.addr" ;;
	cluster-) rm -f "$RUN/cluster.addrs" ;;
	sentinel-) rm -f "$RUN/sentinel.addrs" ;;
	rcluster-) rm -f "$RUN/cluster-replicas.addrs" ;;
	esac
}

cmd_env() {
	if [[ -f $RUN/redis.addr ]] && running single; then
		echo "export HYBRIDLIMIT_REDIS_ADDR=$(<"$RUN/redis.addr")"
	fi
	if [[ -f $RUN/cluster.addrs ]] && running cluster-1 && running cluster-2 && running cluster-3; then
		echo "export HYBRIDLIMIT_REDIS_CLUSTER_ADDRS=$(<"$RUN/cluster.addrs")"
	fi
	local replicated=0
	if [[ -f $RUN/sentinel.addrs ]] && all_running sentinel-; then
		echo "export HYBRIDLIMIT_REDIS_SENTINEL_ADDRS=$(<"$RUN/sentinel.addrs")"
		echo "export HYBRIDLIMIT_REDIS_SENTINEL_MASTER=$SENTINEL_MASTER"
		replicated=1
	fi
	if [[ -f $RUN/cluster-replicas.addrs ]] && all_running rcluster-; then
		echo "export HYBRIDLIMIT_REDIS_CLUSTER_REPLICAS_ADDRS=$(<"$RUN/cluster-replicas.addrs")"
		replicated=1
	fi
	# Failover tests find the servers' records (to restart one) here.
	if [[ $replicated == 1 ]]; then
		echo "export HYBRIDLIMIT_REDIS_RUN=$(printf '%q' "$RUN")"
	fi
}

# status: list recorded servers; exit 0 if any of them runs, 1 if none.
cmd_status() {
	local f name pid state any=1
	for f in "$RUN"/*/redis.pid; do
		[[ -f $f ]] || continue
		name=$(basename "$(dirname "$f")")
		pid=$(<"$f")
		state=dead
		if is_redis_pid "$pid"; then
			state=running
			any=0
		fi
		echo "$name pid=$pid port=$(cat "$RUN/$name/port" 2>/dev/null) $state"
	done
	return "$any"
}

usage() {
	sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//' >&2
	exit 2
}

case "${1:-}" in
ensure) cmd_ensure ;;
start-single) cmd_start_single ;;
start-cluster) cmd_start_cluster ;;
start-cluster-replicas) cmd_start_cluster_replicas ;;
start-sentinel) cmd_start_sentinel ;;
restart) cmd_restart "${2:-}" ;;
stop) cmd_stop "" ;;
env) cmd_env ;;
status) cmd_status ;;
*) usage ;;
esac
