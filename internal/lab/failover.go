package lab

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

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

// sentinelSet is a master, one replica, and three Sentinels watching the master.
type sentinelSet struct {
	master, replica *redisserver.Server
	sentinels       []*redisserver.Server
}

const masterName = "lab"

func startSentinelSet(dir string) (*sentinelSet, error) {
	servers, err := redisserver.Start(dir, 1)
	if err != nil {
		return nil, err
	}
	s := &sentinelSet{master: servers[0]}
	if s.replica, err = redisserver.StartReplica(dir, s.master.Addr()); err != nil {
		s.stop()
		return nil, err
	}
	if s.sentinels, err = redisserver.StartSentinels(dir, 3, masterName, s.master.Addr(), 500*time.Millisecond); err != nil {
		s.stop()
		return nil, err
	}
	return s, nil
}

func (s *sentinelSet) stop() {
	redisserver.Kill(s.sentinels...)
	if s.replica != nil {
		s.replica.Kill()
	}
	s.master.Kill()
}

// client is a client that finds the master through the Sentinels, as a service instance in
// Sentinel mode connects.
func (s *sentinelSet) client() *redis.Client {
	return redis.NewFailoverClient(&redis.FailoverOptions{MasterName: masterName, SentinelAddrs: redisserver.Addrs(s.sentinels...),
		DialTimeout: 500 * time.Millisecond, ReadTimeout: 500 * time.Millisecond, WriteTimeout: 500 * time.Millisecond, ContextTimeoutEnabled: true})
}

// cutReplication ends the replica's stream from the master and keeps it from coming back: the
// replica is told a password for its master, which has none, so every reconnection fails at
// AUTH. What the master writes from now on never reaches the replica. (A proxy on the link would
// not do: the Sentinels see the replica following another address and point it straight at the
// master.) The replica has been cut off for only a moment when the master dies, so the Sentinels
// still take it as a good replica to promote: they pass over one cut off for longer than ten
// times the down-after period.
func (s *sentinelSet) cutReplication(ctx context.Context) error {
	r := s.replica.Client()
	defer r.Close()
	if err := r.ConfigSet(ctx, "masterauth", "cut").Err(); err != nil {
		return err
	}
	if err := r.Do(ctx, "CLIENT", "KILL", "TYPE", "master").Err(); err != nil {
		return err
	}
	_, ok, err := waitFor(ctx, 5*time.Second, 10*time.Millisecond, func() (bool, error) {
		info, err := r.Info(ctx, "replication").Result()
		return err == nil && infoField(info, "master_link_status") == "down", err
	})
	if err == nil && !ok {
		err = errors.New("the replica's link to its master did not go down")
	}
	return err
}

// waitReplicated waits until the replica has everything the master wrote, and every Sentinel
// knows the replica.
func (s *sentinelSet) waitReplicated(ctx context.Context) error {
	m, r := s.master.Client(), s.replica.Client()
	defer m.Close()
	defer r.Close()
	_, ok, err := waitFor(ctx, 15*time.Second, 20*time.Millisecond, func() (bool, error) {
		mi, err := m.Info(ctx, "replication").Result()
		if err != nil {
			return false, err
		}
		ri, err := r.Info(ctx, "replication").Result()
		if err != nil {
			return false, err
		}
		if !strings.Contains(ri, "master_link_status:up") || infoField(mi, "master_repl_offset") != infoField(ri, "slave_repl_offset") {
			return false, nil
		}
		for _, sn := range s.sentinels {
			c := sn.Client()
			replicas, err := c.Do(ctx, "SENTINEL", "REPLICAS", masterName).Slice()
			c.Close()
			if err != nil || len(replicas) == 0 {
				return false, nil
			}
		}
		return true, nil
	})
	if err == nil && !ok {
		err = errors.New("the replica did not catch up, or the Sentinels did not find it, within 15 s")
	}
	return err
}

// waitPromoted waits until a Sentinel names the replica as the master.
func (s *sentinelSet) waitPromoted(ctx context.Context) error {
	c := s.sentinels[0].Client()
	defer c.Close()
	_, ok, err := waitFor(ctx, 20*time.Second, 20*time.Millisecond, func() (bool, error) {
		addr, err := c.Do(ctx, "SENTINEL", "GET-MASTER-ADDR-BY-NAME", masterName).StringSlice()
		return err == nil && len(addr) == 2 && addr[0]+":"+addr[1] == s.replica.Addr(), nil
	})
	if err == nil && !ok {
		err = errors.New("the Sentinels did not promote the replica within 20 s")
	}
	return err
}

// infoField is one field of an INFO answer.
func infoField(info, name string) string {
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), name+":"); ok {
			return v
		}
	}
	return ""
}

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
	set, err := startSentinelSet(dir)
	if err != nil {
		return failedOver{}, err
	}
	defer set.stop()

	held := newHoldOpen()
	cfg := labConfig(strategy)
	cfg.LockTTL, cfg.LockExtend = 10*time.Second, time.Hour // SET NX EX 10, never extended
	cfg.LockWait, cfg.ReservationLease = 5*time.Second, 30*time.Second
	cfg.Hooks.InSection = held.hook
	var insts []*instance
	for range 3 {
		inst, err := env.newInstanceOn(cfg, set.client(), nil, 0)
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
	if err := set.waitReplicated(ctx); err != nil {
		return failedOver{}, err
	}
	if err := set.cutReplication(ctx); err != nil {
		return failedOver{}, err
	}
	buy := buyer(ctx, sku, strategy)
	slow, err := held.enter(ctx, holder, buy)
	if err != nil {
		return failedOver{}, err
	}
	set.master.Kill()
	killed := time.Now()
	if err := set.waitPromoted(ctx); err != nil {
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
