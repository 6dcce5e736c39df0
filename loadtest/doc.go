// Package loadtest is the home of the load generator, a black-box client of the HTTP contract in
// API.md that imports nothing from internal/. The tool itself is tracked in issue 5; until it
// lands, cmd/api's TestProcesses drives three service processes over HTTP and checks the
// invariant.
package loadtest
