package provenance_test

import (
	"context"
	"regexp"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/flashsale/seckill/provenance"
)

// docsProvenance is the line docs/docs_test.go requires above a measured table (TestProvenance).
var docsProvenance = regexp.MustCompile("^Measured by `[^`]+` at commit [0-9a-f]{7,40}\\S* on [0-9]+ cores?, (MariaDB|MySQL) [0-9.]+, Redis [0-9.]+")

// TestLine: a line with the servers' versions passes the docs' check, one without them does not
// (a figure measured on the embedded default is no figure of a real database), and empty
// versions are left out rather than written as blanks.
func TestLine(t *testing.T) {
	ctx := context.Background()
	line := provenance.Line(ctx, "go run ./cmd/lab ttl", "MariaDB 10.11.19", "", "Redis 7.0.15")
	assert.Contains(t, line, "Measured by `go run ./cmd/lab ttl` at commit ")
	assert.NotContains(t, line, ", ,")
	if !regexp.MustCompile(" at commit unknown ").MatchString(line) { // outside git the commit is unknown
		assert.Regexp(t, docsProvenance, line)
	}
	assert.NotRegexp(t, docsProvenance, provenance.Line(ctx, "go run ./loadtest", "embedded SQLite", "embedded Redis"))
}

// TestCommand: each argument is quoted as a POSIX shell reads it back, so the command pastes.
func TestCommand(t *testing.T) {
	assert.Equal(t, "go run ./loadtest", provenance.Command("loadtest", nil))
	assert.Equal(t, `go run ./loadtest -mysql 'root:@tcp(127.0.0.1:3306)/x' -redis 127.0.0.1:6379 -note 'it'\''s'`,
		provenance.Command("loadtest", []string{"-mysql", "root:@tcp(127.0.0.1:3306)/x", "-redis", "127.0.0.1:6379", "-note", "it's"}))
}
