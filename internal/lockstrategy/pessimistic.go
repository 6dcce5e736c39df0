package lockstrategy

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/flashsale/seckill/internal/stock"
)

// Pessimistic serialises orders with the database's own row lock: one transaction takes the
// product row with SELECT ... FOR UPDATE NOWAIT, checks, decrements and inserts. It needs no
// extra component, and it is honest about contention: a locked row answers busy at once (429
// with Retry-After) rather than parking a connection behind the lock until the pool runs dry.
type Pessimistic struct {
	store   *stock.Store
	opts    PessimisticOptions
	metrics *LockMetrics
	batch   *batcher // nil: one order per transaction
}

// PessimisticOptions tune the row-lock strategy.
type PessimisticOptions struct {
	// Batch, above 1, turns on group commit: up to Batch orders that queued for a SKU in this
	// instance take the row lock once, in one transaction. One order per transaction answers
	// busy as soon as the row is locked; a batch speaks for many buyers, and there is at most
	// one per SKU and instance, so it waits in the row's lock queue (stock.Store's LockWait) and
	// is tried again, jittered, until Wait runs out (SQLite, which cannot queue, relies on that).
	Batch int
	Wait  time.Duration
}

// NewPessimistic returns the pessimistic strategy over store.
func NewPessimistic(store *stock.Store, opts PessimisticOptions, metrics *LockMetrics) *Pessimistic {
	p := &Pessimistic{store: store, opts: opts, metrics: metrics}
	if opts.Batch > 1 {
		p.batch = newBatcher(p.Name(), opts.Batch, opts.Wait, metrics, p.placeBatch)
	}
	return p
}

// Name implements Strategy.
func (*Pessimistic) Name() string { return "pessimistic" }

// PlaceOrder implements Strategy.
func (p *Pessimistic) PlaceOrder(ctx context.Context, req stock.OrderRequest) (stock.Order, error) {
	if p.batch != nil {
		return p.batch.place(ctx, req)
	}
	order, err := p.store.PlaceOrderNowait(ctx, req)
	if lockLost(err) {
		return stock.Order{}, fmt.Errorf("lock products/%s: %w", req.SKU, stock.ErrBusy)
	}
	return order, err
}

// placeBatch places a batch under one row lock, trying again with capped, jittered backoff
// until the wait budget runs out. The batch is taken once the row is held, inside the
// transaction, so the orders that arrived while it waited in the row's lock queue come too.
func (p *Pessimistic) placeBatch(ctx context.Context, sku string, take func() []stock.OrderRequest) []stock.Placed {
	start := time.Now()
	deadline := start.Add(p.opts.Wait)
	backoff := time.Millisecond
	for {
		placed, err := p.store.PlaceBatchForUpdate(ctx, sku, take)
		if !lockLost(err) {
			if err != nil {
				return failAll(len(take()), err)
			}
			p.metrics.waited(p.Name(), time.Since(start))
			return placed
		}
		pause := backoff/2 + rand.N(backoff)
		if time.Now().Add(pause).After(deadline) {
			return failAll(len(take()), fmt.Errorf("lock products/%s: waited %s: %w", sku, p.opts.Wait, stock.ErrBusy))
		}
		select {
		case <-time.After(pause):
		case <-ctx.Done():
			return failAll(len(take()), ctx.Err())
		}
		backoff = min(2*backoff, 16*time.Millisecond)
	}
}

// lockLost reports an attempt that wrote nothing because another transaction had the row: its
// lock (ErrBusy), or — under the row lock nobody else can change the row, so a conditional update
// that matched nothing means the row changed between statements (a reset) — ErrVersionConflict.
func lockLost(err error) bool {
	return errors.Is(err, stock.ErrBusy) || errors.Is(err, stock.ErrVersionConflict)
}
