// Package lockstrategy holds the ways an order can be serialised against concurrent orders for
// the same product (Strategy). A strategy is a lock that keeps the hot row calm and a guard that
// keeps the invariant when the lock fails; one section runner (section.go) owns what every
// strategy needs. naive and the unguarded twins are unsafe on purpose.
package lockstrategy

import (
	"context"

	"github.com/flashsale/seckill/internal/lock"
	"github.com/flashsale/seckill/internal/stock"
)

// A Strategy places a request (an order: one line; a checkout: several), serialising it against
// concurrent requests for the same products. It returns stock.ErrSoldOut, ErrAlreadyPurchased,
// ErrBusy, ErrNotFound, ErrInvalid, ErrDuplicateRequest, ErrUnavailable, or a wrapped internal
// error; a refusal of some lines is a *stock.CheckoutError naming them. req is valid: the
// service checks it first (a product twice would take its turn twice).
type Strategy interface {
	Name() string
	Place(ctx context.Context, req stock.CheckoutRequest) (stock.Checkout, error)
}

// Hooks reach into every strategy's section, and the queued strategy's publish, for tests that
// pause there or act at the most delicate moment. The zero value, production's, does nothing.
type Hooks struct {
	// InSection runs with the locks held and the products read, right before the write: the
	// window every guard is for.
	InSection func(ctx context.Context, orders []stock.OrderRequest)
	// Written runs in a section that settles reservations once its orders are committed and its
	// lock released: a written order still holds its reservation.
	Written func(ctx context.Context, orders []stock.OrderRequest)
	// Locking runs before each product's lock is taken: skus in lock order, held of them held.
	Locking func(ctx context.Context, skus []string, held int)
	// Admitted runs in the queued strategy after admission, before the batch's message is sent.
	Admitted func(ctx context.Context, orderID string)
	// Published runs in the queued strategy once the batch is out, before it is recorded queued.
	Published func(ctx context.Context, orderID string)
	// Taken runs in the queued strategy when a writer has taken a message, before it claims it.
	Taken func(ctx context.Context, orderID string)
}

// Locked is a strategy that is a lock and a guard and nothing around them: etcd and zookeeper
// (Fence), dblock (the lock table, Version), and the unguarded twins (NoGuard).
type Locked struct{ batched }

// New returns the strategy name: sections under locker's lock, written under guard. Without its
// lock service it answers unavailable: it has no safe way without the lock.
func New(name string, store *stock.Store, locker lock.Locker, guard Guard, opts Options, metrics *LockMetrics) *Locked {
	l := &Locked{batched{run: newRunner(name, store, locker, guard, opts, metrics)}}
	l.run.readFirst = guard != NoGuard // the unguarded twins keep the incident's recipe whole
	l.batch = newBatcher(l.run, l.run.section)
	return l
}

// LockKey names sku's lock in its lock service.
func (l *Locked) LockKey(sku string) string { return l.run.locker.Key(sku) }

// LockBackend names its lock service: redis, etcd, zookeeper or database.
func (l *Locked) LockBackend() string { return l.run.locker.Backend() }

// Close releases what the strategy's lock keeps open (an etcd session, a Redis subscription).
func (l *Locked) Close() error { return l.run.locker.Close() }
