package lockstrategy

import (
	"context"
	"time"

	"github.com/flashsale/seckill/internal/stock"
)

// Naive reads, checks and writes with no lock. It is unsafe on purpose — concurrent buyers read
// the same stock and overwrite each other's decrements — and it is refused unless the server
// allows unsafe strategies. It exists so that every test and load run can show that its checks
// see overselling: a check that never fails proves nothing.
type Naive struct {
	store *stock.Store
	pause time.Duration
}

// NewNaive returns the naive strategy. pause is slept between the read and the write, standing
// in for the network and application latency that opens the race window in production.
func NewNaive(store *stock.Store, pause time.Duration) *Naive {
	return &Naive{store: store, pause: pause}
}

// Name implements Strategy.
func (*Naive) Name() string { return "naive" }

// PlaceOrder implements Strategy.
func (n *Naive) PlaceOrder(ctx context.Context, req stock.OrderRequest) (stock.Order, error) {
	return n.store.PlaceOrderUnguarded(ctx, req, n.pause)
}
