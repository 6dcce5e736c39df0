package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flashsale/seckill/internal/backendtest"
)

func TestMain(m *testing.M) { backendtest.Main(m) }

// TestRun runs one experiment as a user would, small: the provenance line and the short table
// on stdout, the three report files, and the last line.
func TestRun(t *testing.T) {
	dir := t.TempDir()
	getenv := func(k string) string {
		if k == "SECKILL_LAB_REDIS_ADDR" {
			return backendtest.RedisAddr(t)
		}
		return ""
	}
	var out bytes.Buffer
	require.NoError(t, run(context.Background(), []string{"-small", "-out", dir, "unlock-race"}, getenv, &out, io.Discard))
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	assert.Equal(t, "lab: 1/1 experiments reproduced", lines[len(lines)-1])
	assert.Contains(t, out.String(), "| `unlock-race` |")
	assert.Regexp(t, "^Measured by `go run ./cmd/lab -small -out .* unlock-race` at commit [0-9a-f]{7}.* on [0-9]+ cores, (MariaDB [0-9.]+, )?Redis [0-9.]+, ", lines[0])
	for _, l := range lines {
		assert.LessOrEqual(t, len([]rune(l)), 250, "a console line runs on: %s", l)
	}
	for _, f := range []string{"report.md", "report.html", "summary.json"} {
		b, err := os.ReadFile(filepath.Join(dir, f))
		require.NoError(t, err)
		assert.Contains(t, string(b), "unlock-race", f)
	}
	md, _ := os.ReadFile(filepath.Join(dir, "report.md"))
	assert.Contains(t, string(md), lines[0], "report.md carries the provenance line")
	var summary struct{ Reproduced, Total int }
	b, _ := os.ReadFile(filepath.Join(dir, "summary.json"))
	require.NoError(t, json.Unmarshal(b, &summary))
	assert.Equal(t, 1, summary.Reproduced)
	assert.Equal(t, 1, summary.Total)
	html, _ := os.ReadFile(filepath.Join(dir, "report.html"))
	// gonum's SVG fills each bar as a path in its verdict's colour.
	assert.Regexp(t, `<path d="M[^"]+" style="fill:#CF222E"`, string(html), "the chart has its bars: the failure's")
	assert.Regexp(t, `<path d="M[^"]+" style="fill:#1A7F37"`, string(html), "and the fix's")
}

func TestRunRefuses(t *testing.T) {
	err := run(context.Background(), []string{"nope"}, func(string) string { return "" }, io.Discard, io.Discard)
	assert.ErrorContains(t, err, `no experiment "nope"`)
	var out bytes.Buffer
	require.NoError(t, run(context.Background(), []string{"-list"}, func(string) string { return "" }, &out, io.Discard))
	for _, name := range []string{"unlock-race", "setnx-expire", "locktable-noexpiry"} {
		assert.Contains(t, out.String(), name)
	}
}
