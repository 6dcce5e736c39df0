#!/usr/bin/env bash
# The five-minute walk of README.md, runnable as it is from a fresh clone: Go and curl, nothing
# else. It builds the service, starts two instances on the embedded default (the second on the
# first one's Redis, etcd and SQLite file), and then:
#   1. sells 10 units to 60 buyers at once under `naive` and shows the audit catching the oversell;
#   2. runs the same sale under `hybrid` and shows it hold;
#   3. kills one instance with SIGKILL in the middle of a sale and shows the other sell every unit;
#   4. prints the audit of that sale, whole.
# Everything runs on loopback, in a temporary directory removed at the end; each step is bounded.
set -euo pipefail
cd "$(dirname "$0")/.."

for tool in go curl xargs; do
	command -v "$tool" >/dev/null || { echo "tour: needs $tool" >&2; exit 1; }
done

work=$(mktemp -d)
pids=()
cleanup() {
	for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
	for pid in "${pids[@]}"; do
		for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
	done
	rm -rf "$work"
}
trap cleanup EXIT

TOKEN=tour-admin-token
say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

# start NAME [VAR=value...]: starts an instance with the settings given, waits until it listens
# and sets $url to its address.
start() {
	local name=$1
	shift
	env SECKILL_ADDR=127.0.0.1:0 SECKILL_ADMIN_TOKEN=$TOKEN SECKILL_ALLOW_UNSAFE=true \
		SECKILL_DATA_DIR="$work/data" "$@" "$work/seckill" >"$work/$name.log" 2>&1 &
	pids+=($!)
	disown # the shell stays quiet when one is killed on purpose
	for _ in $(seq 120); do
		url=$(sed -n 's|^listening on http://\[::\]|http://127.0.0.1|; s|^listening on \(http://.*\)|\1|p' "$work/$name.log")
		[ -n "$url" ] && return 0
		kill -0 "${pids[-1]}" 2>/dev/null || break
		sleep 0.5
	done
	echo "tour: instance $name did not start; its log:" >&2
	cat "$work/$name.log" >&2
	exit 1
}

# put SKU STOCK: starts a sale round of SKU with STOCK units.
put() {
	curl -sf -X PUT "$a/api/v1/products/$1" -H "Authorization: Bearer $TOKEN" -H 'Content-Type: application/json' \
		-d "{\"name\":\"$1\",\"stock\":$2,\"max_per_order\":1}" >/dev/null
}

# buy SKU STRATEGY BUYERS FIRST: BUYERS buyers (numbered from FIRST) order one unit each, 30 at a
# time, spread over both instances; prints how many heard each status.
buy() {
	local sku=$1 strategy=$2 buyers=$3 first=${4:-1}
	seq "$first" $((first + buyers - 1)) | xargs -P 30 -I{} sh -c '
		n={}; if [ $((n % 2)) -eq 0 ]; then base=$0; else base=$1; fi
		curl -s -m 10 -o /dev/null -w "%{http_code}\n" -X POST "$base/api/v1/products/$2/orders" \
			-H "Content-Type: application/json" -H "Idempotency-Key: tour-$2-$n" \
			-d "{\"user_id\":\"buyer-$n\",\"quantity\":1,\"strategy\":\"$3\"}" || true' \
		"$a" "${b:-$a}" "$sku" "$strategy" | sort | uniq -c |
		sed 's/^ */  /; s/ 201$/ 201 (an order)/; s/ 409$/ 409 (sold out)/; s/ 429$/ 429 (busy: retry)/; s/ 000$/ no answer (the instance died)/'
}

# audit SKU: the product's audit, one field a line.
audit() {
	curl -sf "$a/api/v1/products/$1/audit" -H "Authorization: Bearer $TOKEN" |
		tr -d '{}"' | tr ',' '\n' | grep -E '^(initial_stock|stock|orders|oversold|consistent|redis_reservations|held_back):' | sed 's/^/  /'
}

say "building the service (the first build takes a few minutes: etcd's server is large)"
go build -o "$work/seckill" ./cmd/api

say "starting two instances on the embedded default"
start a
a=$url
redis=$(sed -n 's/^redis: embedded (miniredis) at \([^ ]*\).*/\1/p' "$work/a.log")
etcd=$(sed -n 's/^etcd: embedded at \([^,]*\),.*/\1/p' "$work/a.log")
start b SECKILL_REDIS_ADDRS="$redis" SECKILL_ETCD_ENDPOINTS="$etcd"
b=$url
echo "  a: $a (embedded SQLite, Redis $redis, etcd $etcd)"
echo "  b: $b (the same SQLite file, Redis and etcd)"

say "1. naive: read, check, write, no lock — 60 buyers, 10 units"
put tour-naive 10
buy tour-naive naive 60
audit tour-naive

say "2. hybrid: Redis admission, a Redis lock, the version check — the same sale"
put tour-hybrid 10
buy tour-hybrid hybrid 60
audit tour-hybrid

say "3. hybrid, 200 units: b is killed (SIGKILL) while 400 buyers order"
put tour-kill 200
buy tour-kill hybrid 400 >"$work/kill.out" &
buying=$!
sleep 0.5
kill -KILL "${pids[1]}"
echo "  b killed"
wait "$buying" || true
cat "$work/kill.out"
sleep 3 # b's Redis reservations come back within 3 s: its heartbeat lapses, a's sweeper returns them
echo "  3 s later, on a: nothing oversold, nothing stranded (no reservation left, nothing held back):"
audit tour-kill
b=
echo "  every buyer asks again on a with the same Idempotency-Key: who has an order gets it back"
echo "  (201, nothing deducted twice), the others buy what is left:"
buy tour-kill hybrid 400

say "4. the audit of that sale, whole"
curl -sf "$a/api/v1/products/tour-kill/audit" -H "Authorization: Bearer $TOKEN"
echo
echo
echo "tour: done. The service's own words are in the instances' logs; the whole contract is internal/handler/openapi.yaml."
