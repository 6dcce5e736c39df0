// Package lockstrategy holds the ways an order can be serialised against concurrent orders for
// the same product — a Redis lock behind fast admission (package admission), an etcd lock and a
// ZooKeeper lock with fencing tokens, a database row lock, a lock table, the unguarded
// twins of the lock services (the lock alone, unsafe on purpose) and no lock at all (naive) —
// behind one interface, and the lock primitives they need. Each strategy has one critical
// section, a function of "the orders to place" (batcher), and every guarded one ends in a
// conditional write in package stock: the lock keeps the hot row calm, the database keeps the
// invariant.
package lockstrategy

import (
	"context"

	"github.com/flashsale/seckill/internal/stock"
)

// A Strategy places one order, serialising it against concurrent orders for the same product.
// It returns stock.ErrSoldOut, stock.ErrAlreadyPurchased, stock.ErrBusy, stock.ErrNotFound,
// stock.ErrInvalid, stock.ErrDuplicateRequest, stock.ErrUnavailable, or a wrapped internal error.
type Strategy interface {
	Name() string
	PlaceOrder(ctx context.Context, req stock.OrderRequest) (stock.Order, error)
}

// Hooks reach into the one critical section of every strategy, for tests that must hold a
// section open as a paused holder would (GC, a frozen VM, SIGSTOP) or act at its most delicate
// moment. The zero value, which production uses, does nothing.
type Hooks struct {
	// InSection runs inside the critical section of every strategy at one moment: the lock held
	// (the row locked, for pessimistic; naive has no lock) and the product read, right before the
	// orders are written — the window between a read and its write that every guard is for
	// (TestHookMoment).
	InSection func(ctx context.Context, orders []stock.OrderRequest)
}

func (h Hooks) inSection(ctx context.Context, orders []stock.OrderRequest) {
	if h.InSection != nil {
		h.InSection(ctx, orders)
	}
}
