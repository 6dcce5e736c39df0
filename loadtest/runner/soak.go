package runner

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flashsale/seckill/contract"
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
		var locks contract.Locks
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

// soak repeats rounds until the soak time is up, failing on the first round that breaks the
// invariant, and compares each instance's metrics after the first round with the last: nothing
// may keep growing. It returns what grew.
func (rr roundRunner) soak(ctx context.Context, stdout io.Writer) ([]string, error) {
	rr.opts.soldOut = 0 // the soak looks for leaks round after round, not for rates: no sold-out phases
	began := time.Now()
	first, err := rr.samples(ctx)
	if err != nil {
		return nil, err
	}
	rounds := 1
	var skus []string
	for ; time.Since(began) < rr.opts.soak && ctx.Err() == nil; rounds++ {
		reports, _, err := rr.round(ctx, fmt.Sprintf("-r%d", rounds))
		if err != nil {
			return nil, err
		}
		for _, r := range reports {
			skus = append(skus, r.SKU)
			if len(r.Failed) > 0 {
				return []string{fmt.Sprintf("round %d, %s: %s", rounds, r.Strategy, strings.Join(r.Failed, "; "))}, nil
			}
		}
	}
	last, err := rr.samples(ctx)
	if err != nil {
		return nil, err
	}
	problems := soakReport(stdout, rr.targets, first, last, rounds, time.Since(began))
	if rr.opts.redis != "" {
		time.Sleep(time.Second) // let the last releases land
		n, err := leftoverLocks(ctx, rr.verifier, rr.opts.redis, skus)
		if err != nil {
			return nil, err
		}
		if n > 0 {
			problems = append(problems, fmt.Sprintf("%d Redis lock keys left behind", n))
		}
	}
	return problems, nil
}
