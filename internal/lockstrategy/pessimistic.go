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
// product row with SELECT ... FOR UPDATE, decides, decrements and inserts. It needs no extra
// component, and it cannot pile up connections behind the hot row: at most one section per
// product and instance waits for the row (the batcher), for at most the lock wait, and a row it
// could not have answers busy (429 with Retry-After).
type Pessimistic struct {
	store   *stock.Store
	opts    PessimisticOptions
	metrics *LockMetrics
	batch   *batcher
}

// PessimisticOptions tune the row-lock strategy.
type PessimisticOptions struct {
	// Batch is how many queued orders of a SKU one transaction may place (group commit); 1 or
	// less: one order per transaction.
	Batch int
	// Wait bounds the wait for the row: on MySQL the row's lock queue (stock.Options.LockWait),
	// then tries again, jittered, until Wait runs out (SQLite, which cannot queue, relies on that).
	Wait  time.Duration
	Hooks Hooks
}

// NewPessimistic returns the pessimistic strategy over store.
func NewPessimistic(store *stock.Store, opts PessimisticOptions, metrics *LockMetrics) *Pessimistic {
	p := &Pessimistic{store: store, opts: opts, metrics: metrics}
	p.batch = newBatcher(p.Name(), opts.Batch, opts.Wait, metrics, p.section)
	return p
}

// Name implements Strategy.
func (*Pessimistic) Name() string { return "pessimistic" }

// PlaceOrder implements Strategy.
func (p *Pessimistic) PlaceOrder(ctx context.Context, req stock.OrderRequest) (stock.Order, error) {
	return p.batch.place(ctx, req)
}

// section is the critical section: the orders are taken once the row is held, inside the
// transaction, so the orders that arrived while it waited in the row's lock queue come too. A
// row it could not have is tried again with capped, jittered backoff until the wait runs out.
func (p *Pessimistic) section(ctx context.Context, sku string, take func() []stock.OrderRequest) []stock.Placed {
	start := time.Now()
	deadline := start.Add(p.opts.Wait)
	backoff := time.Millisecond
	held := func() []stock.OrderRequest {
		reqs := take()
		p.opts.Hooks.inSection(ctx, reqs) // the row is locked: a pause here holds it
		return reqs
	}
	for {
		placed, err := p.store.PlaceLocked(ctx, sku, held)
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
