// Package provenance writes the line that goes with every measured figure of the project — the
// lab's and the load tool's — wherever it is pasted: the command, the commit and the machine (its
// cores, its database and Redis) that produced it. docs/ holds its figures to that line
// (TestProvenance), so both tools write it here, in one format. It is public because the load
// tool, a black box of the service, writes it too.
package provenance

import (
	"context"
	"database/sql"
	"fmt"
	"os/exec"
	"regexp"
	"runtime"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Line is "Measured by `command` at commit X on N cores, <machine...>, <date>.": command as a
// reader would paste it, the commit of the working tree, and what machine says of the servers
// (empty entries are left out).
func Line(ctx context.Context, command string, machine ...string) string {
	on := []string{fmt.Sprintf("%d cores", runtime.NumCPU())}
	for _, m := range machine {
		if m != "" {
			on = append(on, m)
		}
	}
	return fmt.Sprintf("Measured by `%s` at commit %s on %s, %s.", command, commit(ctx), strings.Join(on, ", "),
		time.Now().UTC().Format(time.DateOnly))
}

// commit is the working tree's commit, "-dirty" when it has changes; "unknown" outside git.
func commit(ctx context.Context) string {
	out, err := exec.CommandContext(ctx, "git", "describe", "--always", "--dirty", "--abbrev=7").Output()
	if err != nil {
		return "unknown"
	}
	return strings.TrimSpace(string(out))
}

// Command is the command line "go run ./<pkg> args...", each argument quoted as a POSIX shell
// reads it back, so that the line can be pasted and run.
func Command(pkg string, args []string) string {
	quoted := make([]string, len(args))
	for i, a := range args {
		quoted[i] = shellQuote(a)
	}
	return strings.TrimSpace("go run ./" + pkg + " " + strings.Join(quoted, " "))
}

// plainWord is an argument a shell takes as it is.
var plainWord = regexp.MustCompile(`^[A-Za-z0-9_./:,=@+-]+$`)

func shellQuote(a string) string {
	if plainWord.MatchString(a) {
		return a
	}
	return "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
}

// DBVersion is "MariaDB 10.11.19" or "MySQL 8.0.36", from VERSION(); "" when it does not say.
func DBVersion(ctx context.Context, db *sql.DB) string {
	var v string
	if err := db.QueryRowContext(ctx, "SELECT VERSION()").Scan(&v); err != nil {
		return ""
	}
	number, _, _ := strings.Cut(v, "-")
	if strings.Contains(v, "MariaDB") {
		return "MariaDB " + number
	}
	return "MySQL " + number
}

// RedisVersion is "Redis 7.0.15", from INFO server; "" when it does not say.
func RedisVersion(ctx context.Context, rdb redis.UniversalClient) string {
	info, err := rdb.Info(ctx, "server").Result()
	if err != nil {
		return ""
	}
	for line := range strings.SplitSeq(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "redis_version:"); ok {
			return "Redis " + v
		}
	}
	return ""
}
