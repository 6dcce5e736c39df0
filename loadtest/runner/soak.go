package runner

import (
	"context"
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flashsale/seckill/api"
	"github.com/flashsale/seckill/loadtest/scrape"
	"github.com/flashsale/seckill/loadtest/verify"
)

// leftoverLocks counts the Redis lock keys of skus still present: after a quiet moment there
// must be none, or a holder did not release. Where each SKU's locks are, the service says (GET
// .../locks), as for the fault.
func leftoverLocks(ctx context.Context, vf verify.Verifier, addr string, skus []string) (int, error) {
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer c.Close()
	var keys []string
	for _, sku := range skus {
		var locks api.Locks
		if err := vf.Get(ctx, locksPath(sku), &locks); err != nil {
			return 0, err
		}
		for _, l := range locks.Locks {
			if l.Backend == "redis" && !slices.Contains(keys, l.Key) {
				keys = append(keys, l.Key)
			}
		}
	}
	if len(keys) == 0 {
		return 0, nil
	}
	n, err := c.Exists(ctx, keys...).Result()
	return int(n), err
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
