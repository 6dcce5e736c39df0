package runner

import (
	"context"
	"fmt"
	"io"
	"regexp"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestParseRounds: a comparison runs three rounds unless told, a run of one strategy and a soak
// one; a soak with rounds, and fewer than one, are refused.
func TestParseRounds(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want int
	}{
		{nil, 3},
		{[]string{"-compare", "-target", "http://x", "-token", "t"}, 3},
		{[]string{"-target", "http://x", "-token", "t", "-strategy", "hybrid"}, 1},
		{[]string{"-strategy", "hybrid"}, 1},
		{[]string{"-soak", "1m"}, 1},
		{[]string{"-rounds", "5"}, 5},
		{[]string{"-rounds", "1"}, 1},
	} {
		o, err := parse(tc.args, io.Discard)
		require.NoError(t, err, "%v", tc.args)
		assert.Equal(t, tc.want, o.rounds, "%v", tc.args)
	}
	for name, args := range map[string][]string{
		"zero":      {"-rounds", "0"},
		"negative":  {"-rounds", "-2"},
		"with soak": {"-rounds", "3", "-soak", "1m"},
	} {
		_, err := parse(args, io.Discard)
		assert.Error(t, err, name)
	}
}

// TestSchedule: rounds interleave — round 1 of every row (every pass at every client count),
// then round 2 of every row — and each round sells fresh products: no two steps share a SKU
// suffix, and a run of one round keeps the SKUs it always had.
func TestSchedule(t *testing.T) {
	o, err := parse([]string{"-concurrency", "64,512", "-group-commit", "0,64", "-rounds", "2"}, io.Discard)
	require.NoError(t, err)
	var got []string
	seen := map[string]bool{}
	for _, st := range o.schedule() {
		got = append(got, fmt.Sprintf("round %d: %s, first %t", st.round+1, st.pass.label, st.first))
		sku := st.pass.suffix + o.roundSuffix(st.round)
		assert.False(t, seen[sku], "%s twice", sku)
		seen[sku] = true
	}
	assert.Equal(t, []string{
		"round 1: per-order, 64 clients, first true",
		"round 1: batched 64, 64 clients, first false",
		"round 1: per-order, 512 clients, first true",
		"round 1: batched 64, 512 clients, first false",
		"round 2: per-order, 64 clients, first true",
		"round 2: batched 64, 64 clients, first false",
		"round 2: per-order, 512 clients, first true",
		"round 2: batched 64, 512 clients, first false",
	}, got)

	o, err = parse([]string{"-rounds", "1"}, io.Discard)
	require.NoError(t, err)
	require.Len(t, o.schedule(), 1)
	assert.Empty(t, o.roundSuffix(0), "one round: the SKUs as before rounds")
}

// docsProvenance is the line docs/docs_test.go requires above a measured table
// (TestProvenance): the load tool's must pass it.
var docsProvenance = regexp.MustCompile("^Measured by `[^`]+` at commit [0-9a-f]{7,40}\\S* on [0-9]+ cores?, (MariaDB|MySQL) [0-9.]+, Redis [0-9.]+")

// TestProvenanceLine: on the test backends the tool's provenance line names the command as it
// can be pasted back into a shell, the commit, the cores, MariaDB's and Redis's versions, in the
// form the docs require of a measured table; on the embedded default it says so, and does not
// pass for a measurement on real backends.
func TestProvenanceLine(t *testing.T) {
	dsn, redisAddr := backends(t)
	if dsn == "" || redisAddr == "" {
		t.Skip("needs MariaDB and Redis")
	}
	db, err := openDB(dsn)
	require.NoError(t, err)
	defer db.Close()
	args := []string{"-spawn", "3", "-mysql", dsn, "-redis", redisAddr, "-rounds", "3"}
	o, err := parse(args, io.Discard)
	require.NoError(t, err)
	line := provenanceLine(context.Background(), args, o, db)
	t.Log(line)
	assert.Regexp(t, docsProvenance, line)
	assert.Contains(t, line, "`go run ./loadtest -spawn 3 -mysql '"+dsn+"' -redis "+redisAddr+" -rounds 3`")
	assert.Contains(t, line, fmt.Sprintf(" on %d cores, ", runtime.NumCPU()))

	embedded := provenanceLine(context.Background(), nil, options{}, nil)
	assert.Contains(t, embedded, "`go run ./loadtest` at commit ")
	assert.Contains(t, embedded, "cores, embedded SQLite, embedded Redis, ")
	assert.NotRegexp(t, docsProvenance, embedded)
}

// TestDefaultRunArgs: what TestDefaultRun adds to the bare command changes the rounds and the
// sold-out phase and nothing else, so that the rest of the run is the README's.
func TestDefaultRunArgs(t *testing.T) {
	bare, err := parse(nil, io.Discard)
	require.NoError(t, err)
	short, err := parse(defaultRunArgs, io.Discard)
	require.NoError(t, err)
	assert.Equal(t, defaultRounds, bare.rounds)
	assert.Equal(t, defaultSoldOut, bare.soldOut)
	assert.Equal(t, 1, short.rounds)
	assert.Equal(t, time.Second, short.soldOut)
	short.rounds, short.soldOut = bare.rounds, bare.soldOut
	short.sku, short.out = bare.sku, bare.out // stamped with the time of the parse
	assert.Equal(t, bare, short)
}
