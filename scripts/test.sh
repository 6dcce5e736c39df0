#!/usr/bin/env bash
# The tests, as CI runs them (.ci/run), in two lanes. The in-process packages share the cores as
# `go test` shares them. The packages that start service processes or run the load tool, and the
# planted checks of the process tests, go one at a time (-p 1): their promises (a frozen instance
# stalls the others under 3 s) are timed on a machine that the rest of the suite does not starve.
# Each lane builds its own test binaries (go test links them at every run, so building them
# ahead would only link them twice); a package's build ends before its tests start.
# Arguments go to every `go test` command (e.g. -short, -v).
set -euo pipefail
cd "$(dirname "$0")/.."

module=$(go list -m)
serial=("$module/cmd/api" "$module/loadtest/runner")
processChecks=TestProcessChecksCatchPlantedBugs # internal/planted's rows that run cmd/api
# The slowest in-process packages first, longest first, so that the lane does not end waiting for
# one of them (their times in docs/testing.md).
slowest=("$module/internal/lockstrategy" "$module/internal/lab" "$module/internal/planted" "$module/internal/service"
	"$module/internal/orderqueue" "$module/internal/queued" "$module/internal/stock" "$module/internal/handler")
mapfile -t inprocess < <(printf '%s\n' "${slowest[@]}"; go list ./... | grep -v -x -F "${serial[@]/#/-e}" "${slowest[@]/#/-e}")

start=$SECONDS
echo "test: lane in-process"
go test -race -count=1 -timeout 30m -skip "^$processChecks\$" "$@" "${inprocess[@]}"
echo "test: lane in-process passed in $((SECONDS - start)) s"
start=$SECONDS
echo "test: lane serial"
go test -race -count=1 -p 1 -timeout 40m "$@" "${serial[@]}"
go test -race -count=1 -timeout 20m -run "^$processChecks\$" "$@" "$module/internal/planted"
echo "test: lane serial passed in $((SECONDS - start)) s"
