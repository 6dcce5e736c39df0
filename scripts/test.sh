#!/usr/bin/env bash
# The tests, as CI runs them (.ci/run), in two lanes. The in-process packages share the cores as
# `go test` shares them. The packages that start service processes, run the load tool or build
# and run planted checks go one at a time (-p 1): their promises (a frozen instance stalls the
# others under 3 s) are timed on a machine that the rest of the suite does not starve.
# Arguments go to both `go test` commands (e.g. -short, -v).
set -euo pipefail
cd "$(dirname "$0")/.."

module=$(go list -m)
serial=("$module/cmd/api" "$module/internal/planted" "$module/loadtest/runner")
mapfile -t inprocess < <(go list ./... | grep -v -x -F "${serial[@]/#/-e}")

# Every test binary built first, with both cores — and with the plantedbugs tag, for the planted
# checks (internal/planted) — so that the serial lane spends its time testing.
start=$SECONDS
for tags in "-race" "-tags plantedbugs"; do
	# shellcheck disable=SC2086 # two words, on purpose
	if ! built=$(go test $tags -count=1 -run '^$' ./... 2>&1); then
		echo "$built"
		exit 1
	fi
done
echo "test: every test binary built in $((SECONDS - start)) s"

lane() { # name, go test arguments...
	local name=$1 start=$SECONDS
	shift
	echo "test: lane $name"
	go test -race -count=1 "$@"
	echo "test: lane $name passed in $((SECONDS - start)) s"
}
lane in-process -timeout 30m "$@" "${inprocess[@]}"
lane serial -p 1 -timeout 40m "$@" "${serial[@]}"
