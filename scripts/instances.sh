#!/usr/bin/env bash
# Several service instances on one machine, sharing their backends as a deployment's replicas do
# (docs/operations.md, "Real backends"). Usage:
#
#   scripts/instances.sh [PORT...]      # default: 8081 8082 8083, on 127.0.0.1; 0 picks a free port
#
# The SECKILL_ variables you set (SECKILL_MYSQL_DSN, SECKILL_REDIS_ADDRS, ...) go to every
# instance. What you leave unset is the first instance's embedded backend, shared: its etcd (the
# others are given SECKILL_ETCD_ENDPOINTS — an instance without it starts an etcd of its own,
# clearing SECKILL_DATA_DIR/etcd), its NATS server and SQLite file (found through the one data
# directory), and its Redis (the others are given SECKILL_REDIS_ADDRS). It prints
# "instances: ready" and their addresses once every one answers /readyz, and stops them all on
# Ctrl-C or SIGTERM; the first one's embedded backends go with it. Loopback only.
set -euo pipefail
cd "$(dirname "$0")/.."

[ $# -gt 0 ] || set -- 8081 8082 8083
command -v curl >/dev/null || { echo "instances: needs curl" >&2; exit 1; }

work=$(mktemp -d)
export SECKILL_DATA_DIR=${SECKILL_DATA_DIR:-$work/data}
export SECKILL_ADMIN_TOKEN=${SECKILL_ADMIN_TOKEN:-dev}
pids=()
stop() {
	trap - INT TERM EXIT
	for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
	for pid in "${pids[@]}"; do
		for _ in $(seq 150); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
		kill -KILL "$pid" 2>/dev/null || true
	done
	rm -rf "$work"
}
trap 'stop; exit 0' INT TERM
trap stop EXIT

echo "instances: building cmd/api"
go build -o "$work/seckill" ./cmd/api

# start N PORT [VAR=value...]: starts instance N on PORT with the settings given, waits until it
# listens, and sets $url to its address.
start() {
	local n=$1 port=$2
	shift 2
	env SECKILL_ADDR="127.0.0.1:$port" "$@" "$work/seckill" >"$work/$n.log" 2>&1 &
	pids+=($!)
	for _ in $(seq 240); do
		url=$(sed -n 's|^listening on \(http://127\.0\.0\.1:[0-9]*\).*|\1|p' "$work/$n.log")
		[ -n "$url" ] && return 0
		kill -0 "${pids[-1]}" 2>/dev/null || break
		sleep 0.25
	done
	echo "instances: instance $n did not start; its log:" >&2
	cat "$work/$n.log" >&2
	exit 1
}

shared=()
urls=()
n=0
for port in "$@"; do
	n=$((n + 1))
	start "$n" "$port" "${shared[@]}"
	urls+=("$url")
	if [ "$n" -eq 1 ]; then
		etcd=$(sed -n 's/^etcd: embedded at \([^,]*\),.*/\1/p' "$work/1.log")
		[ -z "$etcd" ] || shared+=(SECKILL_ETCD_ENDPOINTS="$etcd")
		redis=$(sed -n 's/^redis: embedded (miniredis) at \([^ ]*\).*/\1/p' "$work/1.log")
		[ -z "$redis" ] || shared+=(SECKILL_REDIS_ADDRS="$redis")
	fi
	echo "instances: $n at $url (log: $work/$n.log)"
done

for u in "${urls[@]}"; do
	for i in $(seq 120); do
		curl -sf -m 5 -o /dev/null "$u/readyz" && break
		[ "$i" -lt 120 ] || { echo "instances: $u/readyz: $(curl -s -m 5 "$u/readyz")" >&2; exit 1; }
		sleep 0.25
	done
done
echo "instances: ready: ${urls[*]} (admin token $SECKILL_ADMIN_TOKEN; Ctrl-C stops them)"
# Wait for a signal, or for an instance to end. Ctrl-C reaches every instance too: one that ended
# cleanly was told to stop, and the others are stopping as well.
while :; do
	for pid in "${pids[@]}"; do
		kill -0 "$pid" 2>/dev/null && continue
		status=0
		wait "$pid" || status=$?
		[ "$status" -eq 0 ] && exit 0
		echo "instances: an instance exited with status $status; stopping the others" >&2
		exit 1
	done
	sleep 1 &
	wait $! || true
done
