package lab

import (
	"context"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/flashsale/seckill/internal/lockstrategy"
	"github.com/flashsale/seckill/internal/redisserver"
	"github.com/flashsale/seckill/internal/stock"
)

// failover is the incident of the post-mortem: service instances lock a SKU on a Redis master
// managed by Sentinel, with one replica. Replication is asynchronous, so a lock the master has
// granted may not have reached the replica when the master dies; the replica is promoted, and it
// grants the same lock again. Here that is made certain — the replication link is cut just
// before the lock is taken — and the holder is inside its
// section when its master dies. The lock alone (unguarded-redis, a fixed expiry and no watchdog,
// as the incident's SET NX EX had) lets the others sell while the old holder writes the stock it
// read; hybrid runs the same sale, and its version check sells exactly the stock.
func failover() Experiment {
	return Experiment{
		Name:  "failover",
		Seed:  "002, the incident: eight servers, a Redis master with replicas, a SET NX EX lock, 100 units sold 170 times after a failover",
		Claim: "A Redis lock that had not reached the replica is granted again after a failover, and the lock alone oversells; the database's version check sells exactly the stock.",
		Fix:   `UPDATE products SET stock = stock - ?, version = version + 1 WHERE sku = ? AND version = ? AND stock >= ?`,
		Run:   runFailover,
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
	forms := []string{"unguarded-redis", "hybrid"}
	chart := Chart{Title: fmt.Sprintf("Units sold of %d, across a Sentinel failover", units), Unit: "units"}
	var said [2]string
	var oversold [2]int64
	for i, strategy := range forms {
		s, err := sellAcrossFailover(ctx, env, env.key("failover", fmt.Sprint(i)), strategy, units)
		if err != nil {
			return Result{}, fmt.Errorf("%s: %w", strategy, err)
		}
		oversold[i] = s.oversold
		said[i] = fmt.Sprintf("the replica was promoted %.1f s after the master died; %d units sold of %d (oversold %d): %d by the others on the new master while the old holder slept (answers %v), then its write of the stock it had read, %s",
			s.promotedIn.Seconds(), s.sold, units, s.oversold, s.duringPause, s.answers, s.late)
		chart.Bars = append(chart.Bars, Bar{Label: strategy, Value: float64(s.sold), Failed: s.oversold > 0})
	}
	return Result{
		Failing: Outcome{Form: "unguarded-redis (SET NX with a fixed expiry, no watchdog)", Happened: said[0], Failed: oversold[0] > 0},
		Fixed:   Outcome{Form: "hybrid (the version check)", Happened: said[1], Failed: oversold[1] > 0},
		Chart:   chart,
	}, nil
}

// failedOver is what one sale across a failover did.
type failedOver struct {
	sold, oversold, duringPause int64
	promotedIn                  time.Duration
	late                        string
	answers                     map[string]int // of the buyers while the old holder slept
}

const masterName = "lab"

// sellAcrossFailover: three instances on the Sentinel-managed Redis; units put on sale and
// replicated; the replication link cut; one instance's section for buyer "slow" takes the lock
// on the master, reads the product and sleeps; the master dies; once the replica is promoted,
// the others sell half the units through it; the sleeper wakes and writes; then the rest of the
// buyers buy what the database says is left.
func sellAcrossFailover(ctx context.Context, env *Env, sku, strategy string, units int64) (failedOver, error) {
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
	cfg := labConfig(strategy)
	cfg.LockTTL, cfg.LockExtend = 10*time.Second, time.Hour // SET NX EX 10, never extended
	cfg.LockWait = 5 * time.Second
	cfg.Hooks.InSection = held.hook
	var insts []*instance
	for range 3 {
		// A client in Sentinel mode, as a service instance configured with SECKILL_REDIS_MODE
		// sentinel has: it finds the master through the Sentinels, and the new one after the
		// failover.
		clients, err := lockstrategy.NewRedisClients(lockstrategy.RedisSentinel, set.SentinelAddrs(), set.Name)
		if err != nil {
			return failedOver{}, err
		}
		inst, err := env.newInstanceOn(cfg, clients[0], nil, 0)
		if err != nil {
			return failedOver{}, err
		}
		defer inst.close()
		insts = append(insts, inst)
	}
	holder, others := insts[0], insts[1:]
	if _, err := others[0].PutProduct(ctx, stock.ProductSpec{SKU: sku, Name: sku, Stock: units, MaxPerOrder: 1}); err != nil {
		return failedOver{}, err
	}
	if err := set.WaitReplicated(ctx, 15*time.Second); err != nil {
		return failedOver{}, err
	}
	if err := set.CutReplication(ctx); err != nil {
		return failedOver{}, err
	}
	buy := buyer(ctx, sku, strategy)
	slow, err := held.enter(ctx, holder, buy)
	if err != nil {
		return failedOver{}, err
	}
	set.Master.Kill()
	killed := time.Now()
	if err := set.WaitPromoted(ctx, 20*time.Second); err != nil {
		return failedOver{}, err
	}
	out := failedOver{promotedIn: time.Since(killed)}
	before, err := others[0].Audit(ctx, sku)
	if err != nil {
		return failedOver{}, err
	}
	out.answers = buyAll(others, "during", int(units/2), buy)
	during, err := others[0].Audit(ctx, sku)
	if err != nil {
		return failedOver{}, err
	}
	out.duringPause = during.OrderedQuantity - before.OrderedQuantity
	held.release()
	err = <-slow
	conflicts := holder.counter("seckill_optimistic_retries_total")
	switch {
	case err != nil:
		out.late = "refused (" + stock.Code(err) + ")"
	case conflicts > 0:
		out.late = fmt.Sprintf("refused by the version check (%.0f conflicts) and retried on a fresh read", conflicts)
	default:
		out.late = "written over the others' sales"
	}
	_ = buyAll(others, "after", int(2*units), buy)
	a, err := others[0].Audit(ctx, sku)
	if err != nil {
		return failedOver{}, err
	}
	out.sold, out.oversold = a.OrderedQuantity, a.Oversold()
	return out, nil
}

// buyAll has n buyers named prefix-i buy at once, spread over insts, and counts their answers
// by code.
func buyAll(insts []*instance, prefix string, n int, buy func(*instance, string) error) map[string]int {
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		answers = map[string]int{}
	)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			code := "ok"
			if err := buy(insts[i%len(insts)], fmt.Sprintf("%s-%d", prefix, i)); err != nil {
				code = stock.Code(err)
			}
			mu.Lock()
			answers[code]++
			mu.Unlock()
		}()
	}
	wg.Wait()
	return answers
}
