package lockstrategy

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/flashsale/seckill/internal/freezepoint"
	"github.com/flashsale/seckill/internal/lock"
	"github.com/flashsale/seckill/internal/planted"
	"github.com/flashsale/seckill/internal/stock"
)

// Options tune every strategy's sections alike.
type Options struct {
	// Wait is how long a section waits for its lock (or, for pessimistic, its row) before
	// answering busy.
	Wait time.Duration
	// Batch is how many queued orders of a SKU one section may place under one acquisition and
	// one write (group commit); 1 or less: one order per section.
	Batch int
	Hooks Hooks
}

// attempts is how many guarded writes a section tries after a concurrent change before it
// answers busy: a rule of the section, not a setting — a writer outside the lock is rare
// (a repair, a lock lost and retaken), and one that keeps moving the row is not outwaited.
const attempts = 5

// runner is the one critical section of every strategy made of a lock and a guard: wait for
// the lock within the budget, take the batch, stop the section when its lock is lost, write
// under the guard with the fault hook at its one moment, release, and answer busy for what a
// lost lock abandoned. A strategy is then its recipe: which lock, which guard, and what it does
// around the section (hybrid: admission before, settle after).
type runner struct {
	name    string
	store   *stock.Store
	locker  lock.Locker // nil: no lock at all (naive)
	guard   Guard
	opts    Options
	metrics *LockMetrics
	local   localLocks // the instance's turns on its products: its sections' and its checkouts'
	// pause is slept between the read and the write of an unguarded section: naive's stand-in
	// for the latency that opens the race window in production.
	pause time.Duration
	// fallback places the orders when the lock service cannot be reached at all
	// (lock.ErrUnreachable); nil: they answer unavailable, as a strategy with no safe way without
	// its lock must.
	fallback func(ctx context.Context, reqs []stock.OrderRequest, err error) []stock.Placed
	// readFirst has a section read its product before it takes the lock, and answer a sold-out
	// one without it (soldOut): the strategies with no admission in front of their lock.
	readFirst bool
	// settle runs after the release, outside the lock, with what the section wrote (hybrid:
	// the reservations of written orders end).
	settle func(ctx context.Context, sku string, reqs []stock.OrderRequest, placed []stock.Placed)
}

func newRunner(name string, store *stock.Store, locker lock.Locker, guard Guard, opts Options, metrics *LockMetrics) *runner {
	return &runner{name: name, store: store, locker: locker, guard: guard, opts: opts, metrics: metrics}
}

// batcher returns the batcher that runs s — r's section, or a strategy's around it — over r's
// batches.
func (r *runner) batcher(s section) *batcher {
	return newBatcher(r.name, r.opts.Batch, r.opts.Wait, r.metrics, s)
}

// section is the critical section over sku (see section in batch.go).
func (r *runner) section(ctx context.Context, sku string, take func() []stock.OrderRequest) []stock.Placed {
	if r.locker == nil {
		placed, _ := r.write(ctx, nil, sku, take())
		return placed
	}
	if placed, ok := r.soldOut(ctx, sku, take); ok {
		return placed
	}
	key := r.locker.Key(sku)
	start := time.Now()
	waitCtx, cancel := context.WithTimeout(ctx, r.opts.Wait)
	release, err := r.local.take(waitCtx, sku)
	if err != nil {
		cancel()
		return failAll(len(take()), waitFailed(ctx, key, r.opts.Wait, err))
	}
	defer release()
	l, err := r.locker.Lock(waitCtx, key)
	outwaited := waitCtx.Err() != nil
	cancel()
	if err != nil {
		if errors.Is(err, lock.ErrUnreachable) && r.fallback != nil {
			return r.fallback(ctx, take(), err)
		}
		return failAll(len(take()), r.lockErr(ctx, key, outwaited, err))
	}
	locked := time.Now()
	r.metrics.waited(r.name, locked.Sub(start))
	section, stop := untilLost(ctx, l)
	reqs := take()
	placed, left := r.write(section, l, key, reqs)
	freezepoint.At(freezepoint.Committed)
	stop()
	r.metrics.held(r.name, key, time.Since(locked))
	unlockCtx, cancelUnlock := context.WithTimeout(context.WithoutCancel(ctx), lock.UnlockTimeout)
	if !l.Unlock(unlockCtx, left) {
		r.metrics.lostAt(r.name, key)
	}
	cancelUnlock()
	if r.settle != nil {
		if h := r.opts.Hooks.Written; h != nil {
			h(ctx, reqs)
		}
		r.settle(ctx, sku, reqs, placed)
	}
	abandoned(section, key, placed)
	return placed
}

// soldOut answers a batch of a product the database shows at zero stock, before any lock
// (stock.Store.SoldOut), when r reads first: a sold-out answer needs no lock. A failed read
// leaves the batch to the section, which meets the failure itself.
func (r *runner) soldOut(ctx context.Context, sku string, take func() []stock.OrderRequest) ([]stock.Placed, bool) {
	if !r.readFirst || planted.On(planted.SoldOutUnderLock) {
		return nil, false
	}
	placed, ok, err := r.store.SoldOut(ctx, sku, take)
	return placed, ok && err == nil
}

// inSection runs the fault hook at its one moment in every strategy: the lock held, the product
// read, right before the write (TestHookMoment).
func (r *runner) inSection(ctx context.Context, reqs []stock.OrderRequest) {
	freezepoint.At(freezepoint.Locked)
	if r.opts.Hooks.InSection != nil {
		r.opts.Hooks.InSection(ctx, reqs)
	}
}

// untilLost returns the section's context, cancelled (cause: lock.ErrLost) when l is lost: a
// section that has not written yet abandons its write, and one that is writing is stopped by its
// guard if another holder has written since. stop must be called before the lock is released.
func untilLost(ctx context.Context, l lock.Lock) (section context.Context, stop func()) {
	lost := l.Lost()
	if lost == nil {
		return ctx, func() {}
	}
	section, cancel := context.WithCancelCause(ctx)
	done := make(chan struct{})
	go func() {
		select {
		case <-lost:
			cancel(lock.ErrLost)
		case <-done:
		}
	}()
	return section, func() {
		close(done)
		cancel(nil)
	}
}

// abandoned turns the failures of a section whose lock was lost mid-way into busy: nothing of
// them was written, and the client may retry. Orders it did write, and sold-out answers, stand.
func abandoned(section context.Context, key string, placed []stock.Placed) {
	if !errors.Is(context.Cause(section), lock.ErrLost) {
		return
	}
	for i := range placed {
		if placed[i].Err != nil && !errors.Is(placed[i].Err, stock.ErrSoldOut) {
			placed[i].Err = stock.Busy(stock.BusyLockLost, fmt.Errorf("lock %s lost mid-section, section abandoned", key))
		}
	}
}

// lockErr is the answer of a wait for key's lock that failed with err: unavailable when the
// lock service could not be reached, or its backend failed before the wait ran out (the
// database under the lock table, etcd refusing a lease); else busy (waitFailed).
func (r *runner) lockErr(ctx context.Context, key string, outwaited bool, err error) error {
	switch {
	case errors.Is(err, lock.ErrUnreachable):
		return fmt.Errorf("lock %s: %w: %w", key, stock.ErrUnavailable, err)
	case errors.Is(err, stock.ErrUnavailable) && !outwaited && ctx.Err() == nil:
		return err
	}
	return waitFailed(ctx, key, r.opts.Wait, err)
}

// failAll answers every order of a batch with err.
func failAll(n int, err error) []stock.Placed {
	out := make([]stock.Placed, n)
	for i := range out {
		out[i].Err = err
	}
	return out
}

// waitFailed maps a wait for a lock that ran out of budget to busy, unless the section's own
// context is gone (then its error is returned).
func waitFailed(ctx context.Context, key string, budget time.Duration, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return stock.Busy(stock.BusyLockWait, fmt.Errorf("lock %s: waited %s: %w", key, budget, err))
}
