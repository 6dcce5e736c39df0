package lockstrategy

import (
	"context"
	"errors"
	"fmt"

	"github.com/flashsale/seckill/internal/stock"
)

// The unguarded strategies — unguarded-redis, unguarded-etcd, unguarded-zookeeper — are the lock
// alone, as in the oversell post-mortem this project started from (eight servers, a Redis master
// with replicas, a SET NX EX lock; after a failover 100 units were sold 170 times): take the
// lock, read the stock, check it, write the stock computed from the read. They run the guarded strategies' own sections (the lock, its
// wait, its watchdog or session, one section per SKU and instance) and differ from them in one
// line: the write below, where the guarded ones write under a version (hybrid) or a fencing
// token (etcd, zookeeper). They are correct exactly as long as the lock is: a lock granted again
// after a failover, a lease or session that ran out under a paused holder, and a second holder's
// sale is written over — oversold. Unsafe on purpose, refused unless unsafe strategies are
// allowed; they exist so that every check that should see a failed lock oversell does see it.

// unguardedWrite reads the product, decides the orders against that read, runs beforeWrite
// (naive's race window, or a test's paused holder) and writes the stock it computed, with no
// condition on the row (stock.Store.PlaceUnguarded). Only a buyer or key taken between the read
// and the insert stops it: then nothing was written, and the orders answer busy.
func unguardedWrite(ctx context.Context, store *stock.Store, reqs []stock.OrderRequest, beforeWrite func(context.Context) error) []stock.Placed {
	if len(reqs) == 0 {
		return nil
	}
	placed, err := store.PlaceUnguarded(ctx, reqs, beforeWrite)
	if errors.Is(err, stock.ErrVersionConflict) {
		return failAll(len(reqs), fmt.Errorf("%w: %w", stock.ErrBusy, err))
	}
	if err != nil {
		return failAll(len(reqs), err)
	}
	return placed
}

// lockedWrite is the unguarded strategies' write: hooks run where a guarded section's check
// would be, with the lock held and the product read.
func lockedWrite(ctx context.Context, store *stock.Store, reqs []stock.OrderRequest, hooks Hooks) []stock.Placed {
	return unguardedWrite(ctx, store, reqs, func(ctx context.Context) error {
		hooks.inSection(ctx, reqs)
		return ctx.Err()
	})
}
