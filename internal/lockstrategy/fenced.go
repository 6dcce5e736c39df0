package lockstrategy

import (
	"context"
	"errors"
	"fmt"

	"github.com/flashsale/seckill/internal/stock"
)

// fencedWrite is the write of the lock services' sections (etcd, ZooKeeper): the orders, under
// the holder's fencing token (stock.Store.PlaceFenced). held says whether the lock is still
// known to be the holder's — a section whose lease or session is known to be gone is abandoned
// before it writes; between that check and the write, the token is what stops a holder whose
// lock runs out. A write fenced out by a token ahead of the lock service itself — which no
// holder can have been granted: the service was replaced and its sequence started again — is
// retried once after recover has reset that fence; a genuine fence-out is busy, never a sale.
func fencedWrite(ctx context.Context, store *stock.Store, reqs []stock.OrderRequest, token stock.Token, key, strategy string,
	metrics *LockMetrics, hooks Hooks, held func(context.Context) bool, recover func(context.Context, *stock.FenceError) bool) []stock.Placed {
	if len(reqs) == 0 {
		return nil
	}
	for attempt := 1; ; attempt++ {
		if !held(ctx) {
			metrics.lostAt(strategy, key)
			return failAll(len(reqs), fmt.Errorf("lock %s lost before the write, section abandoned: %w", key, stock.ErrBusy))
		}
		placed, err := store.PlaceFenced(ctx, reqs, token, func(ctx context.Context) error {
			hooks.inSection(ctx, reqs)
			return nil
		})
		var fenced *stock.FenceError
		if errors.As(err, &fenced) && attempt == 1 && recover(ctx, fenced) {
			continue
		}
		switch {
		case err == nil:
			return placed
		case errors.Is(err, stock.ErrFencedOut):
			metrics.fenced(strategy)
			return failAll(len(reqs), fmt.Errorf("lock %s: %w: %w", key, stock.ErrBusy, err))
		case errors.Is(err, stock.ErrVersionConflict) && attempt < 3:
			metrics.retried(strategy) // a writer outside the lock moved the stock: read again
			continue
		case errors.Is(err, stock.ErrVersionConflict):
			return failAll(len(reqs), fmt.Errorf("%w: %w", stock.ErrBusy, err))
		}
		return failAll(len(reqs), err)
	}
}
