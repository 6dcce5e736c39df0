package lab

import (
	"context"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flashsale/seckill/internal/redisclient"
	"github.com/flashsale/seckill/internal/redisserver"
	"github.com/flashsale/seckill/internal/stock"
)

// failover is the oversell incident that opens «Locks in practice» (docs/sources.md): service instances lock a SKU on a Redis master
// managed by Sentinel, with one replica. Replication is asynchronous, so a lock the master has
// granted may not have reached the replica when the master dies; the replica is promoted, and it
// grants the same lock again. Here that is made certain — the replication link is cut just
// before the lock is taken — and the holder is inside its section when its master dies. The lock
// alone (unguarded-redis's write, a fixed expiry and no watchdog, as the incident's SET NX EX
// had) lets the others sell while the old holder writes the stock it read; hybrid runs the same
// sale, and its version check refuses the stale write. Both forms are behind hybrid's Redis
// admission (redisLock), so that the version check is the one difference; the database's stock
// column and its orders are audited after the sale.
func failover() Experiment {
	return Experiment{
		Name: "failover",
		Seed: "«Locks in practice», the incident: eight servers, a Redis master with replicas, a SET NX EX lock, 100 units sold 170 times after a failover",
		Claim: "A Redis lock that had not reached the replica is granted again after a failover, and the lock alone writes the stock it read over the others' sales; " +
			"the database's version check keeps the stock column and the orders in step. Both forms are behind hybrid's Redis admission.",
		Fix: `UPDATE products SET stock = stock - ?, version = version + 1 WHERE sku = ? AND version = ? AND stock >= ?`,
		Run: runFailover,
	}
}

func runFailover(ctx context.Context, env *Env) (Result, error) {
	if err := env.needStore(); err != nil {
		return Result{}, err
	}
	if err := redisserver.Available(); err != nil {
		return Result{}, &NotRun{Why: err.Error()}
	}
	units := pick(env.Size, int64(10), int64(100))
	forms := []string{"unguarded-redis's write", "hybrid's version check"}
	chart := Chart{Title: fmt.Sprintf("Units sold that never left the stock column, of %d, across a Sentinel failover", units), Unit: "units"}
	var said [2]string
	var broken [2]bool
	for i, form := range forms {
		s, err := sellAcrossFailover(ctx, env, env.key("failover", fmt.Sprint(i)), i == 1, units)
		if err != nil {
			return Result{}, fmt.Errorf("%s: %w", form, err)
		}
		broken[i] = !s.audit.Consistent()
		said[i] = fmt.Sprintf("the replica was promoted %.1f s after the master died; %d units sold by the others on the new master while the old holder slept (answers %v); then the old holder's write: %s; after the sale, %d orders: %s",
			s.promotedIn.Seconds(), s.duringPause, s.answers, s.late, s.audit.OrderedQuantity, column(s.audit))
		chart.Bars = append(chart.Bars, Bar{Label: form, Value: float64(unrecorded(s.audit)), Failed: broken[i]})
	}
	return Result{
		Failing: Outcome{Form: "admission, then unguarded-redis's write (SET NX with a fixed expiry, no watchdog)", Happened: said[0], Failed: broken[0]},
		Fixed:   Outcome{Form: "hybrid: admission, then the version check", Happened: said[1], Failed: broken[1]},
		Chart:   chart,
	}, nil
}

// failedOver is what one sale across a failover did.
type failedOver struct {
	duringPause int64
	promotedIn  time.Duration
	late        string
	answers     map[string]int // of the buyers while the old holder slept
	audit       stock.Audit    // after the sale
}

const masterName = "lab"

// sellAcrossFailover: three instances on the Sentinel-managed Redis; units put on sale and
// replicated; the replication link cut; one instance's section for buyer "slow" takes the lock
// on the master, reads the product and sleeps; the master dies; once the replica is promoted,
// the others sell half the units through it; the sleeper wakes and writes; then the rest of the
// buyers buy what admission says is left.
func sellAcrossFailover(ctx context.Context, env *Env, sku string, guarded bool, units int64) (failedOver, error) {
	dir, err := os.MkdirTemp("", "seckill-lab-sentinel-")
	if err != nil {
		return failedOver{}, err
	}
	defer os.RemoveAll(dir)
	set, err := redisserver.StartSentinelSet(dir, masterName, 500*time.Millisecond)
	if err != nil {
		return failedOver{}, err
	}
	defer set.Kill()

	held := newHoldOpen()
	cfg := labConfig("hybrid")
	cfg.LockTTL, cfg.LockExtend = 10*time.Second, time.Hour // SET NX EX 10, never extended
	cfg.LockWait = 5 * time.Second
	cfg.Hooks.InSection = held.hook
	var locks []*redisLock
	for range 3 {
		// Redis in Sentinel mode, as SECKILL_REDIS_MODE sentinel configures it: the instance
		// finds the master through the Sentinels, and the new one after the failover.
		c := env.config(cfg)
		c.RedisAddrs, c.RedisMode, c.RedisMaster = set.SentinelAddrs(), redisclient.Sentinel, set.Name
		l, err := env.newRedisLock(ctx, c)
		if err != nil {
			return failedOver{}, err
		}
		defer l.close()
		locks = append(locks, l)
	}
	holder := locks[0].place(guarded)
	others := []placer{locks[1].place(guarded), locks[2].place(guarded)}
	if err := locks[1].putProduct(ctx, sku, units); err != nil {
		return failedOver{}, err
	}
	if err := set.WaitReplicated(ctx, 15*time.Second); err != nil {
		return failedOver{}, err
	}
	if err := set.CutReplication(ctx); err != nil {
		return failedOver{}, err
	}
	read, err := env.Store.Product(ctx, sku)
	if err != nil {
		return failedOver{}, err
	}
	slow, err := held.enter(ctx, holder, sku)
	if err != nil {
		return failedOver{}, err
	}
	set.Master.Kill()
	killed := time.Now()
	if err := set.WaitPromoted(ctx, 20*time.Second); err != nil {
		return failedOver{}, err
	}
	out := failedOver{promotedIn: time.Since(killed)}
	// The Sentinels name the new master a moment after the replica takes the role, and until
	// then a client dials the dead one. An instance's heartbeats find the new master within a
	// beat, but the twin's admission has no traffic of its own before the buyers': the sale
	// waits for each instance to reach the new master, or the first buyers would trip
	// admission's breaker instead.
	for _, l := range locks {
		if err := reachMaster(ctx, l.app.Redis()[0], 10*time.Second); err != nil {
			return failedOver{}, err
		}
	}
	out.answers = buyAll(ctx, others, sku, "during", int(units/2))
	during, err := env.Store.Audit(ctx, sku)
	if err != nil {
		return failedOver{}, err
	}
	out.duringPause = during.OrderedQuantity
	held.release()
	lateErr := <-slow
	late, err := env.Store.Audit(ctx, sku)
	if err != nil {
		return failedOver{}, err
	}
	conflicts := locks[0].counter("seckill_optimistic_retries_total")
	switch {
	case lateErr != nil:
		out.late = "refused (" + stock.Code(lateErr) + ")"
	case conflicts > 0:
		out.late = fmt.Sprintf("refused by the version check (%.0f conflicts) and retried on a fresh read: stock %d after it, %d ordered", conflicts, late.Stock, late.OrderedQuantity)
	default:
		out.late = fmt.Sprintf("placed with no conflict on its read of stock %d: stock %d after it (%d before it), %d ordered", read.Stock, late.Stock, during.Stock, late.OrderedQuantity)
	}
	_ = buyAll(ctx, others, sku, "after", int(2*units))
	if out.audit, err = env.Store.Audit(ctx, sku); err != nil {
		return failedOver{}, err
	}
	return out, nil
}

// reachMaster pings rdb until it answers, every 50 ms, for at most bound.
func reachMaster(ctx context.Context, rdb redis.UniversalClient, bound time.Duration) error {
	_, ok, err := waitFor(ctx, bound, 50*time.Millisecond, func() (bool, error) {
		return rdb.Ping(ctx).Err() == nil, nil
	})
	if err == nil && !ok {
		err = fmt.Errorf("no Redis master reached through the Sentinels in %s", bound)
	}
	return err
}

// buyAll has n buyers named prefix-i buy a unit of sku at once, spread over the forms, and
// counts their answers by code, internal included. Each asks once, not as a buyer.Buyer: the
// experiment reports what clients hear during the failover, busy and 5xx alike.
func buyAll(ctx context.Context, places []placer, sku, prefix string, n int) map[string]int {
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		answers = map[string]int{}
	)
	for i := range n {
		wg.Go(func() {
			code := stock.Code(buy(ctx, places[i%len(places)], sku, fmt.Sprintf("%s-%d", prefix, i)))
			mu.Lock()
			answers[code]++
			mu.Unlock()
		})
	}
	wg.Wait()
	return answers
}
