package lockstrategy

import (
	"context"
	"errors"
	"fmt"

	"github.com/flashsale/seckill/internal/stock"
)

// Pessimistic serialises orders with the database's own row lock: one transaction takes the
// product row with SELECT ... FOR UPDATE NOWAIT, checks, decrements and inserts. It needs no
// extra component, and it is honest about contention: a locked row answers busy at once (429
// with Retry-After) rather than parking a connection behind the lock until the pool runs dry.
type Pessimistic struct{ store *stock.Store }

// NewPessimistic returns the pessimistic strategy over store.
func NewPessimistic(store *stock.Store) *Pessimistic { return &Pessimistic{store: store} }

// Name implements Strategy.
func (*Pessimistic) Name() string { return "pessimistic" }

// PlaceOrder implements Strategy.
func (p *Pessimistic) PlaceOrder(ctx context.Context, req stock.OrderRequest) (stock.Order, error) {
	order, err := p.store.PlaceOrderNowait(ctx, req)
	// Under the row lock nobody else can change the row, so a conditional update that matched
	// nothing means the row changed between statements (a reset): the client should retry.
	if errors.Is(err, stock.ErrBusy) || errors.Is(err, stock.ErrVersionConflict) {
		return stock.Order{}, fmt.Errorf("lock products/%s: %w", req.SKU, stock.ErrBusy)
	}
	return order, err
}
