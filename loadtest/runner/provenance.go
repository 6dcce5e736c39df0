package runner

import (
	"context"
	"database/sql"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/flashsale/seckill/provenance"
)

// provenanceLine is the line that heads the report and goes with its figures wherever they are
// pasted (docs/performance.md checks for it, as docs/lab.md does for the lab's): the command, the
// commit and the machine — its cores, its database and Redis — that produced them. db is the
// -mysql database (nil without it).
func provenanceLine(ctx context.Context, args []string, o options, db *sql.DB) string {
	var machine []string
	switch {
	case db != nil:
		machine = append(machine, provenance.DBVersion(ctx, db))
	case o.targets == "":
		machine = append(machine, "embedded SQLite")
	}
	switch {
	case o.redis != "":
		c := redis.NewClient(&redis.Options{Addr: strings.TrimSpace(strings.Split(o.redis, ",")[0])})
		machine = append(machine, provenance.RedisVersion(ctx, c))
		_ = c.Close()
	case o.targets == "":
		machine = append(machine, "embedded Redis")
	}
	return provenance.Line(ctx, provenance.Command("loadtest", args), machine...)
}
