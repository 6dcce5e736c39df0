package lockstrategy

import (
	"context"
	"time"

	"github.com/flashsale/seckill/internal/stock"
)

// NewNaive returns the naive strategy: no lock and no guard — read, check, write the stock
// computed from the read. It is unsafe on purpose — concurrent sections read the same stock and
// overwrite each other's decrements — and it is refused unless the server allows unsafe
// strategies. It exists so that every test and load run can show that its checks see
// overselling: a check that never fails proves nothing. Its sections overlap (batcher.overlap),
// so that it races within one instance as it does across several, on the embedded store as on
// MySQL. pause is slept between the read and the write, standing in for the network and
// application latency that opens the race window in production; the fault hook runs after it,
// right before the write, as in every strategy.
func NewNaive(store *stock.Store, pause time.Duration, opts Options, metrics *LockMetrics) *Naive {
	opts.Wait = pause
	r := newRunner("naive", store, nil, NoGuard, opts, metrics)
	r.pause = pause
	n := &Naive{batch: r.batcher(r.section)}
	n.batch.overlap = true
	return n
}

// Naive is the runner with no lock and no guard (NewNaive).
type Naive struct {
	batch *batcher
}

// Name implements Strategy.
func (*Naive) Name() string { return "naive" }

// Place implements Strategy.
func (n *Naive) Place(ctx context.Context, req stock.CheckoutRequest) (stock.Checkout, error) {
	return n.batch.place(ctx, req)
}
