package runner

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

// provenance is the line that heads the report and goes with its figures wherever they are
// pasted (docs/performance.md checks for it, as docs/lab.md does for the lab's): the command,
// the commit and the machine — its cores, its database and Redis — that produced them. db is
// the -mysql database (nil without it).
func provenance(ctx context.Context, args []string, o options, db *sql.DB) string {
	commit := "unknown"
	if out, err := exec.CommandContext(ctx, "git", "describe", "--always", "--dirty", "--abbrev=7").Output(); err == nil {
		commit = strings.TrimSpace(string(out))
	}
	machine := []string{fmt.Sprintf("%d cores", runtime.NumCPU())}
	switch {
	case db != nil:
		if v := dbVersion(ctx, db); v != "" {
			machine = append(machine, v)
		}
	case o.targets == "":
		machine = append(machine, "embedded SQLite")
	}
	switch {
	case o.redis != "":
		if v := redisVersion(ctx, strings.TrimSpace(strings.Split(o.redis, ",")[0])); v != "" {
			machine = append(machine, v)
		}
	case o.targets == "":
		machine = append(machine, "embedded Redis")
	}
	quoted := make([]string, len(args))
	for i, a := range args {
		quoted[i] = shellQuote(a)
	}
	command := strings.TrimSpace("go run ./loadtest " + strings.Join(quoted, " "))
	return fmt.Sprintf("Measured by `%s` at commit %s on %s, %s.", command, commit, strings.Join(machine, ", "), time.Now().UTC().Format(time.DateOnly))
}

// plainWord is an argument a shell takes as it is.
var plainWord = regexp.MustCompile(`^[A-Za-z0-9_./:,=@+-]+$`)

// shellQuote is a as a POSIX shell reads it back: as it is, or in single quotes, so that the
// command of the provenance line can be pasted and run.
func shellQuote(a string) string {
	if plainWord.MatchString(a) {
		return a
	}
	return "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
}

// dbVersion is "MariaDB 10.11.19" or "MySQL 8.0.36", from VERSION(); "" when it does not say.
func dbVersion(ctx context.Context, db *sql.DB) string {
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

// redisVersion is "Redis 7.0.15", from INFO server at addr; "" when it does not say.
func redisVersion(ctx context.Context, addr string) string {
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer c.Close()
	info, err := c.Info(ctx, "server").Result()
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
