package runner

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flashsale/seckill/loadtest/scrape"
)

// leftoverLocks counts the Redis lock keys still present: after a quiet moment there must be
// none, or a holder did not release.
func leftoverLocks(ctx context.Context, addr string) (int, error) {
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer c.Close()
	keys, err := c.Keys(ctx, "seckill:{*}:lock").Result()
	return len(keys), err
}

// soakReport prints the first and last samples of every instance and the problems found.
func soakReport(w io.Writer, targets []string, first, last []scrape.Sample, rounds int, elapsed time.Duration) []string {
	fmt.Fprintf(w, "\nsoak: %d rounds in %s\n\n", rounds, elapsed.Round(time.Second))
	fmt.Fprintln(w, "| instance | goroutines | RSS MB | heap MB | open DB conns | etcd sessions | locks lost | held too long |")
	fmt.Fprintln(w, "| --- | --- | --- | --- | --- | --- | --- | --- |")
	var problems []string
	for i, target := range targets {
		f, l := first[i], last[i]
		fmt.Fprintf(w, "| %s | %.0f -> %.0f | %.0f -> %.0f | %.0f -> %.0f | %.0f -> %.0f | %.0f -> %.0f | %.0f -> %.0f | %.0f -> %.0f |\n",
			target, f.Goroutines, l.Goroutines, f.RSS/(1<<20), l.RSS/(1<<20), f.HeapInUse/(1<<20), l.HeapInUse/(1<<20),
			f.OpenConns, l.OpenConns, f.Sessions, l.Sessions, f.LocksLost, l.LocksLost, f.HeldTooLong, l.HeldTooLong)
		for _, p := range scrape.Growth(f, l) {
			problems = append(problems, target+": "+p)
		}
	}
	return problems
}
