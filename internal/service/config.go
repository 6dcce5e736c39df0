package service

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/go-redsync/redsync/v4"
	redsyncredis "github.com/go-redsync/redsync/v4/redis"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/go-zookeeper/zk"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/flashsale/seckill/internal/admission"
	"github.com/flashsale/seckill/internal/lock"
	"github.com/flashsale/seckill/internal/lock/etcdlock"
	"github.com/flashsale/seckill/internal/lock/redislock"
	"github.com/flashsale/seckill/internal/lock/tablelock"
	"github.com/flashsale/seckill/internal/lock/zklock"
	"github.com/flashsale/seckill/internal/lockstrategy"
	"github.com/flashsale/seckill/internal/orderqueue"
	"github.com/flashsale/seckill/internal/planted"
	"github.com/flashsale/seckill/internal/queued"
	"github.com/flashsale/seckill/internal/redisclient"
	"github.com/flashsale/seckill/internal/stock"
)

// Config is how one instance places orders. Defaults returns what cmd/api runs with no
// configuration; every field is also a setting of cmd/api (SECKILL_<NAME>), except Hooks and
// Clock.
type Config struct {
	Strategy         string        // the default strategy
	StrategyOverride bool          // the per-request strategy field is honoured
	AllowUnsafe      bool          // the unsafe strategies (naive, unguarded-*) may be used
	LockTTL          time.Duration // lock expiry (redsync, the etcd lease in whole seconds, the ZooKeeper session, the lock table), extended while held
	LockWait         time.Duration // how long a section waits for its lock before answering busy
	LockExtend       time.Duration // how often a watchdog extends a held lock (Redis, lock table); 0: a third of LockTTL
	LockPoll         time.Duration // how often a waiter tries a taken Redis lock between release messages; 0: 1-5 ms, jittered
	GroupCommit      int           // orders of a SKU one critical section may place; 1 (or 0): one per section
	AdmitBatch       int           // buyers of a SKU one Redis admission call may take, those who pile up while the last is out; 1 (or 0): one call per buyer
	QueuedMaxWaiting int           // queued: orders of a SKU accepted and not yet written or rejected, at most; past it an order is answered busy; 0: only the queue's bound
	RowLock          stock.RowWait // pessimistic: NOWAIT and try again (stock.NoWait), or wait in the row's lock queue (stock.WaitForRow)
	InstanceTTL      time.Duration // how long after this instance's last heartbeat the others return its Redis reservations; it beats every quarter of it
	SoldOutFlag      time.Duration // local sold-out flags, rechecked at least this often; 0: off
	NaivePause       time.Duration // naive: the pause between read and write (the race window)
	SlowHold         time.Duration // a lock held longer is logged and counted
	Instance         string        // names this instance where locks record their holder; default host/pid
	// Hooks reach into every strategy's critical section, for tests; the zero value does nothing.
	Hooks lockstrategy.Hooks
	// Clock times admission's bounds — the breaker's cooldown, the grace of a reservation in
	// doubt — for tests that move past them (admission.Options.Clock); nil: time.Now.
	Clock func() time.Time
}

// Defaults is the configuration of cmd/api when nothing is set.
func Defaults() Config {
	instanceTTL := 2 * time.Second
	if planted.On(planted.LongHeartbeat) {
		instanceTTL = 20 * time.Second
	}
	return Config{
		Strategy:         "hybrid",
		StrategyOverride: true,
		LockTTL:          2 * time.Second,
		LockWait:         2 * time.Second,
		GroupCommit:      64,
		AdmitBatch:       64,
		QueuedMaxWaiting: 2048,
		InstanceTTL:      instanceTTL,
		SoldOutFlag:      time.Second,
		NaivePause:       5 * time.Millisecond,
		SlowHold:         500 * time.Millisecond,
	}
}

// Backends are the opened connections an instance runs on; New does not close them.
type Backends struct {
	Store *stock.Store
	// Redis holds admission state, release messages and sold-out resets on the first client;
	// locks are taken on all of them (more than one: independent instances, a quorum — Redlock).
	// One client may be a Cluster or a Sentinel-managed master (redisclient.New).
	Redis []redis.UniversalClient
	// Etcd serves the etcd strategy; nil: the strategy is not offered.
	Etcd *clientv3.Client
	// ZooKeeper is this instance's session, for the zookeeper strategy; nil: the strategy is
	// not offered and readiness does not mention ZooKeeper.
	ZooKeeper *zk.Conn
	// Queue is the order queue of the queued strategy (NATS JetStream); nil: the strategy is not
	// offered and readiness does not mention NATS.
	Queue *orderqueue.Queue
}

// New builds one instance from cfg on b: admission, sold-out flags, every strategy, the outcome
// metrics; app.Open calls it on the backends it opened, for cmd/api, tests and the lab. Close it.
func New(cfg Config, b Backends, log *slog.Logger, reg prometheus.Registerer) (*Service, error) {
	if b.Store == nil || len(b.Redis) == 0 {
		return nil, errors.New("service: a store and at least one Redis are required")
	}
	if cfg.InstanceTTL < 200*time.Millisecond {
		return nil, fmt.Errorf("instance TTL %s: at least 200ms, or a busy instance misses its own heartbeats", cfg.InstanceTTL)
	}
	if cfg.Instance == "" {
		host, _ := os.Hostname()
		cfg.Instance = fmt.Sprintf("%s/%d", host, os.Getpid())
	}
	dbStats, err := b.Store.Collector()
	if err != nil {
		return nil, err
	}
	reg.MustRegister(dbStats)
	metrics := lockstrategy.NewLockMetrics(reg, cfg.SlowHold, log)
	locks := lock.NewMetrics(reg, log)
	admitting := admission.Options{Batch: cfg.AdmitBatch, WaitHeld: cfg.LockWait, Clock: cfg.Clock}
	if b.Queue != nil {
		admitting.Pending = queued.Pending{Queue: b.Queue}
	}
	s := &Service{
		store:         b.Store,
		admission:     admission.New(b.Redis[0], b.Store, cfg.Instance, cfg.InstanceTTL, log, reg, admitting),
		strategies:    map[string]lockstrategy.Strategy{},
		unsafe:        map[string]bool{},
		defaultName:   cfg.Strategy,
		allowOverride: cfg.StrategyOverride,
		allowUnsafe:   cfg.AllowUnsafe,
		inFlightWait:  cfg.LockWait,
		log:           log,
		outcomes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "seckill_orders_total",
			Help: "Order attempts by strategy and outcome: ok, replayed, or the error code of the answer (sold_out, already_purchased, busy, invalid_argument, not_found, idempotency_conflict, unavailable, canceled, internal).",
		}, []string{"strategy", "outcome"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "seckill_order_duration_seconds",
			Help:    "Time to place an order (or fail to), by strategy.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14),
		}, []string{"strategy"}),
	}
	s.transitions = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "seckill_order_transitions_total",
		Help: "Order transitions asked for (pay, cancel) and done by the expirer (expire), by the code of the answer (ok, order_expired, order_cancelled, not_found, ...).",
	}, []string{"transition", "outcome"})
	s.busy = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "seckill_busy_total",
		Help: "Busy answers (429) by strategy (empty for pay and cancel) and cause: lock_wait and in_flight, a wait budget run out; lock_lost, fenced_out, version_conflicts, row_locked, deadlock, held, waiting, queue_full, no_admission (docs/operations.md).",
	}, []string{"strategy", "cause"})
	s.restocked = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "seckill_restocked_units_total",
		Help: "Units of cancelled and expired orders given back to Redis admission by this instance's relay.",
	})
	reg.MustRegister(s.outcomes, s.latency, s.transitions, s.busy, s.restocked)
	reg.MustRegister(newStranded(s.admission, b.Store, log))
	s.catalog = newCatalog(b.Store.Product, time.Second)
	if cfg.SoldOutFlag > 0 {
		s.soldOut = newSoldOut(b.Redis[0], b.Store, cfg.SoldOutFlag, s.catalog.drop, log, reg)
	}
	s.database = &database{store: b.Store, admission: s.admission, wait: cfg.InstanceTTL / 8, log: log}
	s.checks = append(s.checks, Check{Name: "database", Ping: s.database.ready})
	pools := make([]redsyncredis.Pool, len(b.Redis))
	for i, c := range b.Redis {
		pools[i] = goredis.NewPool(c)
		s.checks = append(s.checks, Check{Name: redisclient.CheckName(c), Ping: redisclient.Ping(c)})
	}

	// A strategy is a lock and a guard. Each lock service's lock is registered twice: with its
	// guard, and unguarded — the same lock with NoGuard, unsafe on purpose.
	opts := lockstrategy.Options{Wait: cfg.LockWait, Batch: cfg.GroupCommit, Hooks: cfg.Hooks}
	redisLock := redislock.New(redsync.New(pools...), b.Redis[0], redislock.Options{
		TTL: cfg.LockTTL, Extend: cfg.LockExtend, Poll: cfg.LockPoll,
	}, locks.For("hybrid"))
	hybrid := lockstrategy.NewHybrid(b.Store, s.admission, redisLock, opts, metrics)
	s.register(hybrid, false)
	if b.Queue != nil {
		// Hybrid's admission and section, with the order queue between them.
		s.queued = queued.New(hybrid.Section, s.admission, b.Store, b.Queue, queued.Options{
			Batch: cfg.GroupCommit, MaxWaiting: cfg.QueuedMaxWaiting, LockWait: cfg.LockWait, Hooks: cfg.Hooks,
		}, log)
		s.register(s.queued, false)
		s.checks = append(s.checks, Check{Name: "nats", Ping: b.Queue.Ping})
	}
	s.register(lockstrategy.New("unguarded-redis", b.Store, redisLock.Observed(locks.For("unguarded-redis")), lockstrategy.NoGuard, opts, metrics), true)
	for _, g := range []struct {
		prefix string
		guard  lockstrategy.Guard
	}{{"", lockstrategy.Fence}, {"unguarded-", lockstrategy.NoGuard}} {
		unsafe := g.guard == lockstrategy.NoGuard
		if b.Etcd != nil {
			// A session of its own: two mutexes on one session do not exclude each other.
			locker := etcdlock.NewLocker(b.Etcd, etcdlock.Options{TTL: cfg.LockTTL}, locks.For(g.prefix+"etcd"), log)
			s.register(lockstrategy.New(g.prefix+"etcd", b.Store, locker, g.guard, opts, metrics), unsafe)
		}
		if b.ZooKeeper != nil {
			locker := zklock.NewLocker(b.ZooKeeper, "", log)
			s.register(lockstrategy.New(g.prefix+"zookeeper", b.Store, locker, g.guard, opts, metrics), unsafe)
		}
	}
	if b.Etcd != nil {
		s.checks = append(s.checks, Check{Name: "etcd", Ping: pingEtcd(b.Etcd)})
	}
	if b.ZooKeeper != nil {
		s.checks = append(s.checks, Check{Name: "zookeeper", Ping: pingZooKeeper(b.ZooKeeper)})
	}
	s.register(lockstrategy.NewPessimistic(b.Store, cfg.RowLock, opts, metrics), false)
	tableLock := tablelock.New(b.Store, tablelock.Options{
		TTL: cfg.LockTTL, Extend: cfg.LockExtend, Instance: cfg.Instance,
	}, locks.For("dblock"), log)
	s.register(lockstrategy.New("dblock", b.Store, tableLock, lockstrategy.Version, opts, metrics), false)
	s.register(lockstrategy.NewNaive(b.Store, cfg.NaivePause, opts, metrics), true)

	ctx, stop := context.WithCancel(context.Background())
	s.stop = stop
	// The first heartbeat before the first order, so that no reservation names an instance
	// that has not yet been seen alive.
	beatCtx, cancel := context.WithTimeout(ctx, cfg.InstanceTTL/4)
	s.database.beat(beatCtx)
	cancel()
	s.every(ctx, cfg.InstanceTTL/4, s.database.beat)
	s.every(ctx, cfg.InstanceTTL/8, s.sweep)
	s.every(ctx, lifecycleEvery, s.expire)

	if _, err := s.lookup(cfg.Strategy); err != nil {
		_ = s.Close()
		return nil, fmt.Errorf("strategy: %w", err)
	}
	return s, nil
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
