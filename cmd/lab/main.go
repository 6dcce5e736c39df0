// Command lab runs the failures that distributed locks exist for, each beside its fix, on real
// backends, and says which reproduced (package lab):
//
//	go run ./cmd/lab -list                 the experiments and their sources
//	go run ./cmd/lab [experiment...|all]   run them; the table on stdout, the report files in -out
//
// It exits non-zero, saying why, when an experiment did not reproduce — its failure did not
// happen, or its fix did not hold — when a measurement missed a figure, or when an experiment or
// a part of one (its ZooKeeper part, say) could not run here. A measurement's claims that the
// figures contradict are its findings, not a failure.
package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flashsale/seckill/internal/app"
	"github.com/flashsale/seckill/internal/lab"
	"github.com/flashsale/seckill/provenance"
)

func main() {
	// go-redis logs every reconnection through a package-level logger of its own; the lab's
	// failovers make many on purpose, and what they did is in the table. Set once, here.
	redis.SetLogger(quietRedis{})
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		return
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "lab:", err)
		os.Exit(1)
	}
}

// quietRedis drops go-redis's own log lines.
type quietRedis struct{}

func (quietRedis) Printf(context.Context, string, ...any) {}

func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("lab", flag.ContinueOnError)
	fs.SetOutput(stderr)
	list := fs.Bool("list", false, "list the experiments and their sources, and exit")
	out := fs.String("out", "lab-report", "directory for report.md, report.html and summary.json")
	small := fs.Bool("small", false, "run each experiment at the size CI runs it")
	bound := fs.Duration("bound", 3*time.Minute, "upper bound of one experiment")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: lab [-list] [flags] [experiment...|all]")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *list {
		for _, e := range lab.Experiments() {
			fmt.Fprintf(stdout, "%-20s %s\n%-20s %s\n", e.Name, e.Seed, "", e.Claim)
		}
		return nil
	}
	exps, err := lab.Find(fs.Args())
	if err != nil {
		return err
	}
	size := lab.Full
	if *small {
		size = lab.Small
	}
	// The service instances of the experiments run as cmd/api with its defaults, on the lab's
	// database and Redis.
	cfg := app.Defaults()
	cfg.MySQLDSN = cmp.Or(getenv("SECKILL_LAB_MYSQL_DSN"), "root:@tcp(127.0.0.1:3306)/seckill_lab?parseTime=true")
	cfg.RedisAddrs = []string{cmp.Or(getenv("SECKILL_LAB_REDIS_ADDR"), "127.0.0.1:6379")}
	env := lab.Open(ctx, lab.Options{
		Config: cfg,
		Size:   size,
		Log:    slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelError})), // the experiments make the service warn on purpose
	})
	defer env.Close()

	prov := provenance.Line(ctx, provenance.Command("cmd/lab", args), env.DBVersion, env.RedisVersion) // the commit that runs, before anyone edits the tree meanwhile
	reports := lab.Run(ctx, env, exps, *bound, stderr)
	fmt.Fprintf(stdout, "%s\n\n%s", prov, lab.Console(reports))
	if err := lab.Write(*out, prov, reports); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "\nthe detail of each: %s (report.md, report.html, summary.json)\n", *out)
	fmt.Fprintln(stdout, lab.Summary(reports))
	return lab.Check(reports)
}
