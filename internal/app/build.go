package app

import (
	"context"
	"fmt"
	"log/slog"
	"os"

	"github.com/go-zookeeper/zk"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/flashsale/seckill/internal/admission"
	"github.com/flashsale/seckill/internal/lock"
	"github.com/flashsale/seckill/internal/lockstrategy"
	"github.com/flashsale/seckill/internal/orderqueue"
	"github.com/flashsale/seckill/internal/queued"
	"github.com/flashsale/seckill/internal/redisclient"
	"github.com/flashsale/seckill/internal/service"
	"github.com/flashsale/seckill/internal/stock"
)

// opened are the backends Open opened, for build.
type opened struct {
	store     *stock.Store
	redis     []redis.UniversalClient // admission and release messages on the first; locks on all
	etcd      *clientv3.Client        // nil: no etcd strategies
	zooKeeper *zk.Conn                // nil: no zookeeper strategies
	queue     *orderqueue.Queue       // nil: no queued strategy
	passes    service.Passes          // the waiting rooms' passes
}

// build makes the instance's service on b, in the order each part needs the one before:
// admission (which asks the queue about orphaned reservations), the strategies on it, the queued
// pipeline on hybrid's section (its writers as writers says), then the service around them.
func build(cfg service.Config, writers queued.Options, b opened, log *slog.Logger, reg prometheus.Registerer) (*service.Service, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Instance == "" {
		host, _ := os.Hostname()
		cfg.Instance = fmt.Sprintf("%s/%d", host, os.Getpid())
	}
	admitting := admission.Options{Batch: cfg.AdmitBatch, WaitHeld: cfg.LockWait, Clock: cfg.Clock}
	if b.queue != nil {
		admitting.Pending = queued.Pending{Queue: b.queue}
	}
	ledger := admission.New(b.redis[0], b.store, cfg.Instance, cfg.InstanceTTL, log, reg, admitting)
	built := lockstrategy.Build(lockstrategy.Settings{
		LockTTL: cfg.LockTTL, LockWait: cfg.LockWait, LockExtend: cfg.LockExtend, LockPoll: cfg.LockPoll,
		GroupCommit: cfg.GroupCommit, RowLock: cfg.RowLock, NaivePause: cfg.NaivePause, Instance: cfg.Instance,
		Hooks: cfg.Hooks,
	}, lockstrategy.Backends{Store: b.store, Redis: b.redis, Etcd: b.etcd, ZooKeeper: b.zooKeeper},
		ledger, lockstrategy.NewLockMetrics(reg, cfg.SlowHold, log), lock.NewMetrics(reg, log), log)
	p := service.Parts{Store: b.store, Admission: ledger, Strategies: built.Safe, Unsafe: built.Unsafe, Passes: b.passes}
	for _, c := range b.redis {
		p.Checks = append(p.Checks, service.Check{Name: redisclient.CheckName(c), Ping: redisclient.Ping(c)})
	}
	if b.queue != nil {
		writers.Batch, writers.MaxWaiting, writers.LockWait, writers.Hooks = max(1, cfg.GroupCommit), cfg.QueuedMaxWaiting, cfg.LockWait, cfg.Hooks
		q, err := queued.New(built.Hybrid.Section, ledger, b.store, b.queue, writers, log)
		if err != nil {
			return nil, err
		}
		p.Queued = q
		p.Checks = append(p.Checks, service.Check{Name: "nats", Ping: b.queue.Ping})
	}
	if b.etcd != nil {
		p.Checks = append(p.Checks, service.Check{Name: "etcd", Ping: pingEtcd(b.etcd)})
	}
	if b.zooKeeper != nil {
		p.Checks = append(p.Checks, service.Check{Name: "zookeeper", Ping: pingZooKeeper(b.zooKeeper)})
	}
	if cfg.SoldOutFlag > 0 {
		p.Resets = redisclient.Subscribe(context.Background(), b.redis[0], service.ResetChannel)
	}
	return service.New(cfg, p, log, reg)
}

// pingEtcd is a linearizable read, which needs a quorum.
func pingEtcd(c *clientv3.Client) func(context.Context) error {
	return func(ctx context.Context) error {
		_, err := c.Get(ctx, "/seckill/ready", clientv3.WithCountOnly())
		return err
	}
}

// pingZooKeeper asks for a session: without one no lock node can be made.
func pingZooKeeper(c *zk.Conn) func(context.Context) error {
	return func(context.Context) error {
		if st := c.State(); st != zk.StateHasSession {
			return fmt.Errorf("no session (%s)", st)
		}
		return nil
	}
}
