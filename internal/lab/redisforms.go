package lab

import (
	"context"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/flashsale/seckill/internal/admission"
	"github.com/flashsale/seckill/internal/app"
	"github.com/flashsale/seckill/internal/stock"
)

// redisLock is one service instance's Redis lock, built by app.Open as cmd/api builds it —
// hybrid: admission, a redsync lock with its watchdog, the batcher, the release messages — with
// both writes the lock can guard: hybrid's version check, and its unguarded twin's write of the
// stock it read (the unguarded-redis strategy). As the service offers it, unguarded-redis has no
// admission — the incident's code in «Locks in practice» had none — so beside hybrid it differs in two mechanisms,
// and admission alone caps the orders at the stock whatever the write does. Here both writes sit
// behind the same admission — for the twin, a ledger of the instance's own name on its Redis —
// so that the version check is the one difference between the forms: a lock that fails then
// shows in the stock column (two holders' decrements, one written over the other), which the
// audit reads, whether or not the orders outnumber the stock.
type redisLock struct {
	*instance
	admission *admission.Ledger // the twin's
}

// newRedisLock builds the instance of c, and the twin's admission beside it.
func (e *Env) newRedisLock(ctx context.Context, c app.Config) (*redisLock, error) {
	c = e.named(c)
	inst, err := e.newInstance(ctx, c)
	if err != nil {
		return nil, err
	}
	ledger := admission.New(inst.app.Redis()[0], inst.app.Store(), c.Service.Instance, c.Service.InstanceTTL, e.Log, prometheus.NewRegistry(),
		admission.Options{})
	return &redisLock{instance: inst, admission: ledger}, nil
}

// putProduct starts a sale of sku through the instance, as the admin API does: admission's
// state deleted, the product written, the admission counter rebuilt from it.
func (l *redisLock) putProduct(ctx context.Context, sku string, units int64) error {
	_, err := l.PutProduct(ctx, stock.ProductSpec{SKU: sku, Name: sku, Stock: units, MaxPerOrder: 1})
	return err
}

// place is the form: hybrid (guarded), or its twin behind the same admission — admitted as
// hybrid admits, its reservation given back when the order fails, and, when Redis cannot be
// asked (an error with no domain code), handed on without one as hybrid does, where the twin's
// section answers unavailable.
func (l *redisLock) place(guarded bool) placer {
	if guarded {
		return l.via("hybrid")
	}
	twin := l.via("unguarded-redis")
	return func(ctx context.Context, req stock.OrderRequest) error {
		res, err := l.admission.Admit(ctx, []stock.OrderRequest{req}, 0)
		if err != nil && (ctx.Err() != nil || stock.Code(err) != "internal") {
			return err
		}
		if err == nil {
			req.Reservation = res[0]
		}
		if err := twin(ctx, req); err != nil {
			if req.Reservation.ID != "" {
				l.admission.GiveBack(ctx, []stock.OrderRequest{req}, err)
			}
			return err
		}
		l.admission.Done(req.Reservation)
		return nil
	}
}

// counter is the sum of a counter family's series on the instance's metrics.
func (l *redisLock) counter(name string) float64 { return counterOf(l.app.Metrics(), name) }
