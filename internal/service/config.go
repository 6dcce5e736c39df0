package service

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/flashsale/seckill/internal/admission"
	"github.com/flashsale/seckill/internal/lockstrategy"
	"github.com/flashsale/seckill/internal/planted"
	"github.com/flashsale/seckill/internal/stock"
)

// Config is how one instance places orders. Every field but Hooks and Clock is also a setting of
// cmd/api (SECKILL_<NAME>).
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
	// Clock times admission's bounds (admission.Options.Clock), for tests; nil: time.Now.
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

// Parts are what an instance is made of, built by package app; New does not close its backends.
type Parts struct {
	Store     *stock.Store
	Admission *admission.Ledger
	// Strategies are offered; Unsafe ones are refused unless cfg.AllowUnsafe.
	Strategies, Unsafe []lockstrategy.Strategy
	// Queued is the queued strategy (package queued); nil: not offered.
	Queued orderQueue
	// Resets carries product resets between instances, for the sold-out flags; nil: no flags.
	Resets Resets
	// Checks are the backends readiness asks besides the database.
	Checks []Check
	// Passes judges waiting-room passes (frontdoor.Passes); nil: orders needing one are refused.
	Passes Passes
}

// Passes judges a buyer's passes (docs/frontdoor.md): CheckPass answers nil, or why the
// header holds no good pass of sku for buyer (frontdoor.ErrPassRequired, ErrPassInvalid).
type Passes interface {
	CheckPass(ctx context.Context, header, buyer, sku string) error
}

// Validate refuses a configuration no instance can run with, before anything is built on it.
func (cfg Config) Validate() error {
	if cfg.InstanceTTL < 200*time.Millisecond {
		return fmt.Errorf("instance TTL %s: at least 200ms, or a busy instance misses its own heartbeats", cfg.InstanceTTL)
	}
	return nil
}

// New builds one instance from cfg on p: its strategies, metrics, readiness and background
// loops. Close it.
func New(cfg Config, p Parts, log *slog.Logger, reg prometheus.Registerer) (*Service, error) {
	if p.Store == nil || p.Admission == nil {
		return nil, errors.New("service: a store and admission are required")
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	dbStats, err := p.Store.Collector()
	if err != nil {
		return nil, err
	}
	reg.MustRegister(dbStats)
	s := &Service{
		store:         p.Store,
		admission:     p.Admission,
		strategies:    map[string]lockstrategy.Strategy{},
		unsafe:        map[string]bool{},
		defaultName:   cfg.Strategy,
		allowOverride: cfg.StrategyOverride,
		allowUnsafe:   cfg.AllowUnsafe,
		inFlightWait:  cfg.LockWait,
		passes:        p.Passes,
		log:           log,
	}
	outcomes := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "seckill_orders_total",
		Help: "Order attempts by strategy and outcome: ok, replayed, or the error code of the answer (sold_out, already_purchased, busy, invalid_argument, not_found, idempotency_conflict, unavailable, canceled, internal).",
	}, []string{"strategy", "outcome"})
	latency := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "seckill_order_duration_seconds",
		Help:    "Time to place an order (or fail to), by strategy.",
		Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14),
	}, []string{"strategy"})
	s.transitions = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "seckill_order_transitions_total",
		Help: "Order transitions asked for (pay, cancel) and done by the expirer (expire), by the code of the answer (ok, order_expired, order_cancelled, not_found, ...).",
	}, []string{"transition", "outcome"})
	s.busy = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "seckill_busy_total",
		Help: "Busy answers (429) by strategy (empty for pay and cancel) and cause: lock_wait and in_flight, a wait budget run out; lock_lost, fenced_out, version_conflicts, row_locked, deadlock, tx_ended, held, waiting, queue_full, no_admission (docs/operations.md).",
	}, []string{"strategy", "cause"})
	s.restocked = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "seckill_restocked_units_total",
		Help: "Units of cancelled and expired orders given back to Redis admission by this instance's relay.",
	})
	checkouts := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "seckill_checkouts_total",
		Help: "Checkout attempts (several products, all or nothing) by strategy and outcome: ok, replayed, or the error code of the answer, as seckill_orders_total.",
	}, []string{"strategy", "outcome"})
	reg.MustRegister(outcomes, latency, s.transitions, s.busy, s.restocked, checkouts)
	s.orderOutcomes = newCurried(outcomes.WithLabelValues)
	s.checkoutOutcomes = newCurried(checkouts.WithLabelValues)
	s.orderLatency = newCurried(func(labels ...string) prometheus.Observer { return latency.WithLabelValues(labels[0]) })
	reg.MustRegister(newStranded(s.admission, p.Store, log))
	s.catalog = newCatalog(p.Store.Product, time.Second)
	if cfg.SoldOutFlag > 0 && p.Resets != nil {
		s.soldOut = newSoldOut(p.Resets, p.Store, cfg.SoldOutFlag, s.catalog.drop, log, reg)
	}
	s.database = &database{store: p.Store, admission: s.admission, wait: cfg.InstanceTTL / 8, log: log}
	s.checks = append([]Check{{Name: "database", Ping: s.database.ready}}, p.Checks...)
	// The queued strategy first: it is closed first, its writers stopped before the section
	// they write through.
	if p.Queued != nil {
		s.queued = p.Queued
		s.register(p.Queued, false)
	}
	for _, st := range p.Strategies {
		s.register(st, false)
	}
	for _, st := range p.Unsafe {
		s.register(st, true)
	}

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
