package lab

import (
	"context"
	"errors"

	"github.com/go-redsync/redsync/v4"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/flashsale/seckill/internal/admission"
	"github.com/flashsale/seckill/internal/lockstrategy"
	"github.com/flashsale/seckill/internal/service"
	"github.com/flashsale/seckill/internal/stock"
)

// redisLock is one instance's Redis lock as service.New builds hybrid — admission, a redsync
// lock with its watchdog, the batcher, the release messages — with both writes the lock can
// guard: hybrid's version check, and its unguarded twin's write of the stock it read (the
// unguarded-redis strategy). As the service registers it, unguarded-redis has no admission —
// the incident's code in «Locks in practice» had none — so beside hybrid it differs in two mechanisms, and admission
// alone caps the orders at the stock whatever the write does. Here both writes sit behind the
// same admission, so that the version check is the one difference between the forms: a lock
// that fails then shows in the stock column (two holders' decrements, one written over the
// other), which the audit reads, whether or not the orders outnumber the stock.
//
// No sweeper runs beside it, as no service does: a reservation is settled or given back by its
// own order, and the experiments judge the database, not the admission counter.
type redisLock struct {
	admission *admission.Ledger
	hybrid    *lockstrategy.Hybrid
	twin      *lockstrategy.Locked
	metrics   *prometheus.Registry
	rdb       redis.UniversalClient
}

// newRedisLock builds the lock on rdb (which it closes) with cfg's lock settings and hooks.
func (e *Env) newRedisLock(cfg service.Config, rdb redis.UniversalClient) *redisLock {
	reg := prometheus.NewRegistry()
	ledger := admission.New(rdb, e.Store, "lab", cfg.InstanceTTL, e.Log, reg)
	metrics := lockstrategy.NewLockMetrics(reg, cfg.SlowHold, e.Log)
	lock := lockstrategy.NewRedisLock(redsync.New(goredis.NewPool(rdb)), rdb, lockstrategy.RedisLockOptions{
		TTL: cfg.LockTTL, Extend: cfg.LockExtend, Poll: cfg.LockPoll,
	}, metrics)
	opts := lockstrategy.Options{Wait: cfg.LockWait, Batch: cfg.GroupCommit, Hooks: cfg.Hooks}
	return &redisLock{admission: ledger, hybrid: lockstrategy.NewHybrid(e.Store, ledger, lock, opts, metrics),
		twin: lockstrategy.New("unguarded-redis", e.Store, lock, lockstrategy.NoGuard, opts, metrics), metrics: reg, rdb: rdb}
}

// putProduct starts a sale of sku as the service's PutProduct does: admission's state deleted,
// the product written, the admission counter rebuilt from it.
func (l *redisLock) putProduct(ctx context.Context, env *Env, sku string, units int64) error {
	if err := l.admission.Invalidate(ctx, sku); err != nil {
		return err
	}
	if _, err := env.Store.PutProduct(ctx, stock.ProductSpec{SKU: sku, Name: sku, Stock: units, MaxPerOrder: 1}); err != nil {
		return err
	}
	return l.admission.Reconcile(ctx, sku)
}

// place is the form: hybrid (guarded), or its twin behind the same admission — admitted as
// hybrid admits, its reservation given back when the order fails, and, when Redis cannot be
// asked (an error with no domain code), handed on without one as hybrid does, where the twin's
// section answers unavailable.
func (l *redisLock) place(guarded bool) placer {
	if guarded {
		return func(ctx context.Context, req stock.OrderRequest) error {
			_, err := l.hybrid.PlaceOrder(ctx, req)
			return err
		}
	}
	return func(ctx context.Context, req stock.OrderRequest) error {
		res, err := l.admission.Admit(ctx, req)
		if err != nil && (ctx.Err() != nil || stock.Code(err) != "internal") {
			return err
		}
		req.Reservation = res
		if _, err := l.twin.PlaceOrder(ctx, req); err != nil {
			if res.ID != "" {
				l.admission.GiveBack(ctx, req, err)
			}
			return err
		}
		l.admission.Done(res)
		return nil
	}
}

// counter is the sum of a counter family's series on the lock's metrics.
func (l *redisLock) counter(name string) float64 { return counterOf(l.metrics, name) }

func (l *redisLock) close() error {
	return errors.Join(l.hybrid.Close(), l.rdb.Close())
}
