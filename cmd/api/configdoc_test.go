package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// configReference is the page whose Configuration table documents every setting of cmd/api.
var configReference = filepath.Join("..", "..", "docs", "operations.md")

// referenceRows are the rows of the first table under "## Configuration" in md: the variable
// of each, and its default cell.
func referenceRows(md string) map[string]string {
	rows := map[string]string{}
	_, section, ok := strings.Cut(md, "\n## Configuration\n")
	if !ok {
		return rows
	}
	variable := regexp.MustCompile("^\\| `(SECKILL_[A-Z0-9_]+)` \\| ([^|]*) \\|")
	inTable := false
	for _, l := range strings.Split(section, "\n") {
		if strings.HasPrefix(l, "## ") {
			break
		}
		if !strings.HasPrefix(l, "|") {
			if inTable {
				break
			}
			continue
		}
		inTable = true
		if m := variable.FindStringSubmatch(l); m != nil {
			rows[m[1]] = m[2]
		}
	}
	return rows
}

// referenceProblems holds the rows against the flags: a row for every flag, named after it, with
// the flag's default in its default cell (an empty or zero default is described, not quoted),
// and no row for a setting that does not exist.
func referenceProblems(rows map[string]string, flags *flag.FlagSet) []string {
	var problems []string
	documented := map[string]bool{}
	flags.VisitAll(func(f *flag.Flag) {
		name := envName(f.Name)
		documented[name] = true
		cell, ok := rows[name]
		switch {
		case !ok:
			problems = append(problems, fmt.Sprintf("-%s (%s) has no row", f.Name, name))
		case f.DefValue != "" && f.DefValue != "0" && f.DefValue != "0s" && !strings.Contains(cell, "`"+f.DefValue+"`"):
			problems = append(problems, fmt.Sprintf("%s: the default is `%s`, the row says %q", name, f.DefValue, strings.TrimSpace(cell)))
		}
	})
	for name := range rows {
		if !documented[name] {
			problems = append(problems, fmt.Sprintf("%s has a row but is no setting of cmd/api", name))
		}
	}
	slices.Sort(problems)
	return problems
}

func defaultFlags(t *testing.T) *flag.FlagSet {
	t.Helper()
	c, err := loadConfig(nil, func(string) string { return "" })
	require.NoError(t, err)
	return c.flags
}

// TestConfigReference: the configuration reference of docs/operations.md is the flags of
// cmd/api, each with its default.
func TestConfigReference(t *testing.T) {
	md, err := os.ReadFile(configReference)
	require.NoError(t, err)
	rows := referenceRows(string(md))
	require.NotEmpty(t, rows, "no Configuration table in %s", configReference)
	assert.Empty(t, referenceProblems(rows, defaultFlags(t)))
}

// TestConfigReferenceCatchesDrift: a row missing, a row of no setting and a stale default are
// each reported.
func TestConfigReferenceCatchesDrift(t *testing.T) {
	md, err := os.ReadFile(configReference)
	require.NoError(t, err)
	rows := referenceRows(string(md))
	require.Contains(t, rows, "SECKILL_LOCK_WAIT")
	delete(rows, "SECKILL_LOCK_WAIT")
	rows["SECKILL_LOCK_TIMEOUT"] = "`2s`"
	rows["SECKILL_GROUP_COMMIT"] = "`32`"
	assert.Equal(t, []string{
		"-lock-wait (SECKILL_LOCK_WAIT) has no row",
		"SECKILL_GROUP_COMMIT: the default is `64`, the row says \"`32`\"",
		"SECKILL_LOCK_TIMEOUT has a row but is no setting of cmd/api",
	}, referenceProblems(rows, defaultFlags(t)))
}
