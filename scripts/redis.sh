#!/usr/bin/env bash
# redis.sh: Redis servers for hybridlimit's tests and benchmarks.
#
#   scripts/redis.sh ensure          install redis-server with apt-get if missing
#   scripts/redis.sh start-single    one server         -> .run/redis.addr
#   scripts/redis.sh start-cluster   three-master Cluster -> .run/cluster.addrs
#   scripts/redis.sh stop            stop every server started here (by PID)
#   scripts/redis.sh env             export lines for whatever is running
#   scripts/redis.sh status          what is recorded; exit 0 if any runs
#
# Every server listens on 127.0.0.1 only, on a port found free at start (a
# cluster node also needs port+10000 free for its bus), with persistence off.
# State lives in .run/ of this checkout, one directory per server, so two
# checkouts never share state or ports. Starting a kind of server that is
# already running in this checkout is refused: run `stop` first.
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

# is_redis_pid PID: PID is alive and is a redis-server (guards against a
# stale pidfile whose PID now belongs to something else).
is_redis_pid() {
	local pid=$1 comm
	[[ $pid =~ ^[0-9]+$ ]] || return 1
	alive "$pid" || return 1
	comm=$(ps -o comm= -p "$pid" 2>/dev/null) || return 1
	[[ $comm == redis-server* ]]
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

# start_server NAME BUS [EXTRA ARGS...]: start one redis-server recorded under
# .run/NAME, retrying on another port if ours was taken meanwhile. Sets PORT.
PORT=
start_server() {
	local name=$1 bus=$2
	shift 2
	local dir="$RUN/$name" try port pid i
	for ((try = 1; try <= START_TRIES; try++)); do
		pick_port "$bus"
		port=$PICKED
		rm -rf "$dir"
		mkdir -p "$dir"
		local args=(
			--port "$port" --bind 127.0.0.1 --protected-mode no
			--save '' --appendonly no
			--dir "$dir" --logfile "$dir/redis.log" --daemonize no
			--enable-debug-command local
		)
		if [[ $bus == 1 ]]; then
			args+=(--cluster-enabled yes --cluster-config-file "$dir/nodes-$port.conf" --cluster-node-timeout 2000)
		fi
		# $! is redis-server itself (setsid execs it without forking, since a
		# background job of this shell never leads a process group). In a
		# session of its own it does not get the terminal's Ctrl-C: it stops
		# when `stop` says so. Its stdio goes to the log so it never holds our
		# caller's pipes open.
		if command -v setsid >/dev/null 2>&1; then
			setsid redis-server "${args[@]}" "$@" </dev/null >>"$dir/redis.log" 2>&1 &
		else
			redis-server "${args[@]}" "$@" </dev/null >>"$dir/redis.log" 2>&1 &
		fi
		pid=$!
		echo "$pid" >"$dir/redis.pid"
		echo "$port" >"$dir/port"
		for ((i = 0; i < WAIT_SECS * 10; i++)); do
			if ! alive "$pid"; then
				break
			fi
			# PONG from our own process, not from someone else's on that port.
			if [[ $(cli "$port" ping 2>/dev/null) == PONG ]] &&
				[[ $(cli "$port" info server 2>/dev/null | tr -d '\r' | sed -n 's/^process_id://p') == "$pid" ]]; then
				PORT=$port
				log "$name: redis-server pid $pid on 127.0.0.1:$port"
				return 0
			fi
			sleep 0.1
		done
		if alive "$pid"; then
			kill -KILL "$pid" 2>/dev/null || true
			rm -f "$dir/redis.pid"
			die "$name: redis-server (pid $pid, port $port) did not answer PING within ${WAIT_SECS}s; log tail:
$(tail -n 20 "$dir/redis.log" 2>/dev/null)"
		fi
		wait "$pid" 2>/dev/null || true
		rm -f "$dir/redis.pid"
		if grep -qi 'address already in use' "$dir/redis.log" 2>/dev/null; then
			log "$name: port $port was taken meanwhile, trying another"
			continue
		fi
		die "$name: redis-server exited at start; log tail:
$(tail -n 20 "$dir/redis.log" 2>/dev/null)"
	done
	die "$name: could not bind a port after $START_TRIES tries"
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
	start_server single 0
	echo "127.0.0.1:$PORT" >"$RUN/redis.addr"
	echo "127.0.0.1:$PORT"
}

stop_cluster_on_failure() {
	local rc=$?
	if [[ $rc != 0 ]]; then cmd_stop cluster-; fi
	exit "$rc"
}

cmd_start_cluster() {
	need_redis
	refuse_if_running cluster-
	mkdir -p "$RUN"
	rm -f "$RUN/cluster.addrs"
	# A cluster that fails to come up is not left half-running.
	trap stop_cluster_on_failure EXIT
	local ports=() addrs=() i p
	for i in 1 2 3; do
		start_server "cluster-$i" 1
		ports+=("$PORT")
		addrs+=("127.0.0.1:$PORT")
	done
	log "creating the cluster: ${addrs[*]}"
	if ! timeout 120 redis-cli --cluster create "${addrs[@]}" --cluster-replicas 0 --cluster-yes \
		>"$RUN/cluster-create.log" 2>&1; then
		die "redis-cli --cluster create failed:
$(tail -n 30 "$RUN/cluster-create.log")"
	fi
	local deadline=$((SECONDS + CLUSTER_WAIT_SECS)) ok info
	while :; do
		ok=1
		for p in "${ports[@]}"; do
			info=$(cli "$p" cluster info 2>/dev/null | tr -d '\r') || true
			if ! grep -qx 'cluster_state:ok' <<<"$info" ||
				! grep -qx 'cluster_slots_assigned:16384' <<<"$info" ||
				! grep -qx 'cluster_known_nodes:3' <<<"$info"; then
				ok=0
				break
			fi
		done
		[[ $ok == 1 ]] && break
		if ((SECONDS >= deadline)); then
			die "cluster not ok after ${CLUSTER_WAIT_SECS}s; CLUSTER INFO of 127.0.0.1:$p:
$info"
		fi
		sleep 0.2
	done
	local joined
	joined=$(IFS=,; echo "${addrs[*]}")
	echo "$joined" >"$RUN/cluster.addrs"
	log "cluster ok: $joined"
	trap - EXIT
	echo "$joined"
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
	"") rm -f "$RUN/redis.addr" "$RUN/cluster.addrs" ;;
	single) rm -f "$RUN/redis.addr" ;;
	cluster-) rm -f "$RUN/cluster.addrs" ;;
	esac
}

cmd_env() {
	if [[ -f $RUN/redis.addr ]] && running single; then
		echo "export HYBRIDLIMIT_REDIS_ADDR=$(<"$RUN/redis.addr")"
	fi
	if [[ -f $RUN/cluster.addrs ]] && running cluster-1 && running cluster-2 && running cluster-3; then
		echo "export HYBRIDLIMIT_REDIS_CLUSTER_ADDRS=$(<"$RUN/cluster.addrs")"
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
stop) cmd_stop "" ;;
env) cmd_env ;;
status) cmd_status ;;
*) usage ;;
esac
