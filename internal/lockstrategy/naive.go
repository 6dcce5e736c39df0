package lockstrategy

import (
	"context"
	"time"

	"github.com/flashsale/seckill/internal/stock"
)

// Naive reads, checks and writes with no lock. It is unsafe on purpose — concurrent sections
// read the same stock and overwrite each other's decrements — and it is refused unless the
// server allows unsafe strategies. It exists so that every test and load run can show that its
// checks see overselling: a check that never fails proves nothing. It has the shape of the
// others — a section over the orders that queued in this instance — without their guard, and
// without their turns: its sections overlap (batcher.overlap), so that it races within one
// instance as it does across several, on the embedded store as on MySQL.
type Naive struct {
	store *stock.Store
	pause time.Duration
	hooks Hooks
	batch *batcher
}

// NewNaive returns the naive strategy. pause is slept between the read and the write, standing
// in for the network and application latency that opens the race window in production; batch
// is how many queued orders one section places; hooks run after the pause, right before the
// write, as in every strategy.
func NewNaive(store *stock.Store, pause time.Duration, batch int, hooks Hooks, metrics *LockMetrics) *Naive {
	n := &Naive{store: store, pause: pause, hooks: hooks}
	n.batch = newBatcher(n.Name(), batch, pause, metrics, n.section)
	n.batch.overlap = true
	return n
}

// Name implements Strategy.
func (*Naive) Name() string { return "naive" }

// PlaceOrder implements Strategy.
func (n *Naive) PlaceOrder(ctx context.Context, req stock.OrderRequest) (stock.Order, error) {
	return n.batch.place(ctx, req)
}

// section reads, decides, pauses and writes the stock it computed (unguardedWrite).
func (n *Naive) section(ctx context.Context, _ string, take func() []stock.OrderRequest) []stock.Placed {
	reqs := take()
	return unguardedWrite(ctx, n.store, reqs, func(ctx context.Context) error {
		select {
		case <-time.After(n.pause):
		case <-ctx.Done():
			return ctx.Err()
		}
		n.hooks.inSection(ctx, reqs)
		return ctx.Err()
	})
}
