package lockstrategy

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/flashsale/seckill/internal/freezepoint"
	"github.com/flashsale/seckill/internal/lock"
	"github.com/flashsale/seckill/internal/planted"
	"github.com/flashsale/seckill/internal/stock"
)

// Options tune every strategy's sections alike.
type Options struct {
	// Wait is how long a section waits for its lock (pessimistic: its row) before answering busy.
	Wait time.Duration
	// Batch is how many queued orders one section may place under one acquisition and one write
	// (group commit); 1 or less: one order per section.
	Batch int
	Hooks Hooks
}

// attempts is how many guarded writes a section tries before it answers busy: a writer outside
// the lock is rare (a repair, a lock lost and retaken), and one that keeps moving the row is not
// outwaited.
const attempts = 5

// runner is the one critical section of every strategy: wait for the lock within the budget,
// take the batch, stop when the lock is lost, write under the guard with the fault hook at its
// one moment, release, and answer busy for what a lost lock abandoned. A strategy is its recipe.
type runner struct {
	name    string
	store   *stock.Store
	locker  lock.Locker // nil: no lock at all (naive)
	guard   Guard
	opts    Options
	metrics *LockMetrics
	local   localLocks // the instance's turns on its products
	// pause is naive's stand-in, between read and write, for the latency of production.
	pause time.Duration
	// fallback places the requests when the lock service cannot be reached (lock.ErrUnreachable);
	// nil: they answer unavailable, as a strategy with no safe way without its lock must.
	fallback func(ctx context.Context, reqs []stock.CheckoutRequest, err error) []stock.Placed
	// readFirst answers a sold-out batch before any lock (soldOut), where no admission does.
	readFirst bool
	// settle runs after the release with the lines the section wrote (hybrid: end the reservations).
	settle func(ctx context.Context, written []stock.OrderRequest)
}

func newRunner(name string, store *stock.Store, locker lock.Locker, guard Guard, opts Options, metrics *LockMetrics) *runner {
	return &runner{name: name, store: store, locker: locker, guard: guard, opts: opts, metrics: metrics,
		local: localLocks{keys: map[string]*localLock{}}}
}

// section is the critical section over skus (batch.go): the turn and the lock of every product
// in SKU order, the one global order that keeps two crossed checkouts (A+B, B+A) from each
// holding what the other waits for; then the batch written under r's guard; then the release.
func (r *runner) section(ctx context.Context, skus []string, take func() []stock.CheckoutRequest) []stock.Placed {
	if r.locker == nil {
		placed, _ := r.write(ctx, nil, take())
		return placed
	}
	if placed, ok := r.soldOut(ctx, skus, take); ok {
		return placed
	}
	h, err := r.lockAll(ctx, skus)
	if err != nil {
		if errors.Is(err, lock.ErrUnreachable) && r.fallback != nil {
			return r.fallback(ctx, take(), err)
		}
		return failAll(len(take()), err)
	}
	locked := time.Now()
	section, stops := ctx, make([]func(), len(h.locks))
	for i, l := range h.locks {
		section, stops[i] = untilLost(section, l)
	}
	reqs := take()
	placed, left := r.write(section, h, reqs)
	freezepoint.At(freezepoint.Committed)
	for i := len(stops) - 1; i >= 0; i-- {
		stops[i]()
	}
	r.metrics.held(r.name, r.locker.Key(skus[0]), time.Since(locked))
	r.release(ctx, h, left)
	if r.settle != nil {
		if hook := r.opts.Hooks.Written; hook != nil {
			hook(ctx, linesOf(reqs))
		}
		var written []stock.CheckoutRequest
		for i, req := range reqs {
			if placed[i].Err == nil {
				written = append(written, req)
			}
		}
		r.settle(ctx, linesOf(written))
	}
	abandoned(section, placed)
	return placed
}

// soldOut answers a batch with a product at zero stock before any lock, when r reads first: a
// sold-out answer needs no lock. A failed read leaves the batch to the section.
func (r *runner) soldOut(ctx context.Context, skus []string, take func() []stock.CheckoutRequest) ([]stock.Placed, bool) {
	if !r.readFirst || planted.On(planted.SoldOutUnderLock) {
		return nil, false
	}
	placed, ok, err := r.store.SoldOut(ctx, skus, take)
	return placed, ok && err == nil
}

// inSection runs the fault hook at its one moment in every strategy: the locks held, the
// products read, right before the write.
func (r *runner) inSection(ctx context.Context, reqs []stock.CheckoutRequest) {
	freezepoint.At(freezepoint.Locked)
	if r.opts.Hooks.InSection != nil {
		r.opts.Hooks.InSection(ctx, linesOf(reqs))
	}
}

// linesOf are the lines of every request of a batch.
func linesOf(reqs []stock.CheckoutRequest) []stock.OrderRequest {
	var lines []stock.OrderRequest
	for _, r := range reqs {
		lines = append(lines, r.Admitted()...)
	}
	return lines
}

// localLocks are one instance's turns on its products, taken before each lock: a product's
// orders and checkouts have different batcher keys, and one etcd session's mutex taken twice
// does not exclude itself.
type localLocks struct {
	mu   sync.Mutex
	keys map[string]*localLock
}

type localLock struct {
	held  chan struct{} // full while a section has the product's turn
	users int           // holders and waiters; the entry goes with the last
}

// take waits for sku's turn until ctx ends, and returns its release.
func (l *localLocks) take(ctx context.Context, sku string) (release func(), err error) {
	l.mu.Lock()
	k := l.keys[sku]
	if k == nil {
		k = &localLock{held: make(chan struct{}, 1)}
		l.keys[sku] = k
	}
	k.users++
	l.mu.Unlock()
	leave := func() {
		l.mu.Lock()
		if k.users--; k.users == 0 {
			delete(l.keys, sku)
		}
		l.mu.Unlock()
	}
	select {
	case k.held <- struct{}{}:
		return func() { <-k.held; leave() }, nil
	case <-ctx.Done():
		leave()
		return nil, ctx.Err()
	}
}

// holds are the locks of a section's products, in SKU order.
type holds struct {
	skus     []string
	locks    []lock.Lock
	releases []func()
}

// lockAll takes the turn and the lock of every product of skus in order, within the section's
// wait. On failure it releases what it took, and answers as a section would.
func (r *runner) lockAll(ctx context.Context, skus []string) (*holds, error) {
	h := &holds{}
	start := time.Now()
	waitCtx, cancel := context.WithTimeout(ctx, r.opts.Wait)
	defer cancel()
	for _, sku := range skus {
		key := r.locker.Key(sku)
		if r.opts.Hooks.Locking != nil {
			r.opts.Hooks.Locking(waitCtx, skus, len(h.locks))
		}
		release, err := r.local.take(waitCtx, sku)
		if err != nil {
			r.release(ctx, h, nil)
			return nil, r.lockErr(ctx, key, true, err)
		}
		l, err := r.locker.Lock(waitCtx, key)
		if err != nil {
			release()
			r.release(ctx, h, nil)
			return nil, r.lockErr(ctx, key, waitCtx.Err() != nil, err)
		}
		h.skus, h.locks, h.releases = append(h.skus, sku), append(h.locks, l), append(h.releases, release)
	}
	r.metrics.waited(r.name, time.Since(start))
	return h, nil
}

// release lets go of h's locks and turns in reverse order, handing each lock its product as the
// section left it, when known.
func (r *runner) release(ctx context.Context, h *holds, left map[string]*stock.Product) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), lock.UnlockTimeout)
	defer cancel()
	for i := len(h.locks) - 1; i >= 0; i-- {
		if !h.locks[i].Unlock(ctx, left[h.skus[i]]) {
			r.metrics.lostAt(r.name, r.locker.Key(h.skus[i]))
		}
		h.releases[i]()
	}
}

// untilLost returns the section's context, cancelled (cause: lock.ErrLost) when l is lost: an
// unwritten section abandons its write, a writing one is stopped by its guard. Call stop
// before the release.
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
// them was written, and the client may retry. Written requests and sold-out answers stand.
func abandoned(section context.Context, placed []stock.Placed) {
	if !errors.Is(context.Cause(section), lock.ErrLost) {
		return
	}
	for i := range placed {
		if placed[i].Err != nil && !errors.Is(placed[i].Err, stock.ErrSoldOut) {
			placed[i].Err = stock.Busy(stock.BusyLockLost, fmt.Errorf("a lock of the section was lost mid-way, section abandoned (%v)", placed[i].Err))
		}
	}
}

// lockErr answers a failed wait for key's lock: err for a fallback to take; unavailable when the
// lock service was unreachable, or its backend failed before the wait ran out (the database
// under the lock table, etcd refusing a lease); the section's context error; else busy.
func (r *runner) lockErr(ctx context.Context, key string, outwaited bool, err error) error {
	switch {
	case errors.Is(err, lock.ErrUnreachable) && r.fallback != nil:
		return err
	case errors.Is(err, lock.ErrUnreachable):
		return fmt.Errorf("lock %s: %w: %w", key, stock.ErrUnavailable, err)
	case errors.Is(err, stock.ErrUnavailable) && !outwaited && ctx.Err() == nil:
		return err
	case ctx.Err() != nil:
		return ctx.Err()
	}
	return stock.Busy(stock.BusyLockWait, fmt.Errorf("lock %s: waited %s: %w", key, r.opts.Wait, err))
}

// failAll answers every request of a batch with err.
func failAll(n int, err error) []stock.Placed {
	out := make([]stock.Placed, n)
	for i := range out {
		out[i].Err = err
	}
	return out
}
