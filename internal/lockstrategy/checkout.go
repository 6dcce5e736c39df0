package lockstrategy

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/flashsale/seckill/internal/keyqueue"
	"github.com/flashsale/seckill/internal/lock"
	"github.com/flashsale/seckill/internal/stock"
)

// Checkouts: several products in one order, every line placed or none (the store's checkout
// sections, internal/stock/checkout.go). One lock is easy; two need an order: every strategy
// takes its locks — its rows, its admission — in SKU order (stock.SKUOrder), so two crossed
// checkouts (A+B against B+A) never each hold what the other waits for. Checkouts of the same
// products ride together, as a product's orders do (group commit): one acquisition of each
// lock, one conditional update of each product, one insert (checkoutBatcher). A section takes
// its products' turns in the instance (local), then their locks, each in SKU order.

// PlaceCheckout implements Strategy.
func (l *Locked) PlaceCheckout(ctx context.Context, req stock.CheckoutRequest) (stock.Checkout, error) {
	return l.checkouts.place(ctx, req)
}

// PlaceCheckout implements Strategy: no lock and no guard, as unsafe as an order.
func (n *Naive) PlaceCheckout(ctx context.Context, req stock.CheckoutRequest) (stock.Checkout, error) {
	return n.checkouts.place(ctx, req)
}

// checkoutSection is one critical section over the products skus (in SKU order): it calls take
// once it holds their locks, and answers each checkout take returned, in order; take returns
// the same checkouts if called again.
type checkoutSection func(ctx context.Context, skus []string, take func() []stock.CheckoutRequest) []stock.CheckoutPlaced

// checkoutBatcher is the batcher of checkouts: checkouts of the same products that arrive while
// a section of theirs runs wait, and the next section takes them together (up to a batch's
// most), as batcher does a product's orders. Checkouts of other products, or of the same ones in
// part, never ride together: their sections take other locks.
type checkoutBatcher struct {
	section checkoutSection
	timeout time.Duration
	overlap bool // naive's: every checkout starts a section of its own
	queue   *keyqueue.Queue[*checkoutWaiter]
}

type checkoutWaiter struct {
	req    stock.CheckoutRequest
	placed stock.CheckoutPlaced
	done   chan struct{}
}

// checkoutBatcher returns the checkout batcher that runs s over r's batches.
func (r *runner) checkoutBatcher(s checkoutSection) *checkoutBatcher {
	b := &checkoutBatcher{section: s, timeout: 2*r.opts.Wait + 5*time.Second}
	b.queue = keyqueue.New(r.opts.Batch, b.round)
	return b
}

// place queues req behind the section of its products and waits for its answer.
func (b *checkoutBatcher) place(ctx context.Context, req stock.CheckoutRequest) (stock.Checkout, error) {
	if err := ctx.Err(); err != nil {
		return stock.Checkout{}, fmt.Errorf("%w: %w", errAbandoned, err)
	}
	lines := stock.SKUOrder(req.Lines)
	skus := make([]string, len(lines))
	for i, l := range lines {
		skus[i] = l.SKU
	}
	w := &checkoutWaiter{req: req, done: make(chan struct{})}
	await := b.queue.Await
	if b.overlap {
		await = b.queue.AwaitOverlapping
	}
	if err := await(ctx, strings.Join(skus, "\x00"), w, w.done); err != nil {
		return stock.Checkout{}, fmt.Errorf("%w: %w", errAbandoned, err)
	}
	return w.placed.Checkout, w.placed.Err
}

// round runs one section over the products key names, on a context of its own.
func (b *checkoutBatcher) round(key string, take func() []*checkoutWaiter) {
	var (
		batch []*checkoutWaiter
		reqs  []stock.CheckoutRequest
	)
	ctx, cancel := context.WithTimeoutCause(context.Background(), b.timeout, errSectionTimeout)
	results := b.section(ctx, strings.Split(key, "\x00"), func() []stock.CheckoutRequest {
		if reqs != nil {
			return reqs
		}
		batch = take()
		reqs = make([]stock.CheckoutRequest, len(batch))
		for i, w := range batch {
			reqs[i] = w.req
		}
		return reqs
	})
	cancel()
	for i, w := range batch {
		w.placed = results[i]
		close(w.done)
	}
}

// failCheckouts answers every checkout of a batch with err.
func failCheckouts(n int, err error) []stock.CheckoutPlaced {
	out := make([]stock.CheckoutPlaced, n)
	for i := range out {
		out[i].Err = err
	}
	return out
}

// localLocks are one instance's turns on its products: a section and a checkout of one instance
// take a product's turn before its lock. Within a strategy the batcher runs one section per
// product and instance, but a checkout comes from outside it — and two acquisitions of one
// etcd session's mutex do not exclude each other.
type localLocks struct {
	mu   sync.Mutex
	keys map[string]*localLock
}

type localLock struct {
	held  chan struct{} // full while a section or a checkout has the product's turn
	users int           // holders and waiters; the entry goes with the last
}

// take waits for sku's turn until ctx ends, and returns its release.
func (l *localLocks) take(ctx context.Context, sku string) (release func(), err error) {
	l.mu.Lock()
	if l.keys == nil {
		l.keys = map[string]*localLock{}
	}
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

// holds are the locks of a checkout's products, in SKU order.
type holds struct {
	skus     []string
	locks    []lock.Lock
	releases []func()
}

// lockOf is sku's lock, nil when the checkout holds none for it.
func (h *holds) lockOf(sku string) lock.Lock {
	for i, s := range h.skus {
		if s == sku {
			return h.locks[i]
		}
	}
	return nil
}

// lockAll takes the turn and the lock of every product of skus in their order (SKU order),
// within the section's wait. On failure it releases what it took, and answers as a section
// would.
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
			r.release(ctx, h)
			return nil, waitFailed(ctx, key, r.opts.Wait, err)
		}
		l, err := r.locker.Lock(waitCtx, key)
		if err != nil {
			release()
			r.release(ctx, h)
			return nil, r.lockErr(ctx, key, waitCtx.Err() != nil, err)
		}
		h.skus, h.locks, h.releases = append(h.skus, sku), append(h.locks, l), append(h.releases, release)
	}
	r.metrics.waited(r.name, time.Since(start))
	return h, nil
}

// release lets go of every lock and turn of h, in reverse order.
func (r *runner) release(ctx context.Context, h *holds) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), lock.UnlockTimeout)
	defer cancel()
	for i := len(h.locks) - 1; i >= 0; i-- {
		if !h.locks[i].Unlock(ctx, nil) {
			r.metrics.lostAt(r.name, r.locker.Key(h.skus[i]))
		}
		h.releases[i]()
	}
}

// checkoutSection is the critical section of a batch of checkouts of skus: the lock of every
// product, taken in SKU order, then the batch written under r's guard. A lock lost mid-way stops
// the write, and its checkouts answer busy.
func (r *runner) checkoutSection(ctx context.Context, skus []string, take func() []stock.CheckoutRequest) []stock.CheckoutPlaced {
	if r.locker == nil {
		return r.writeCheckouts(ctx, nil, take())
	}
	h, err := r.lockAll(ctx, skus)
	if err != nil {
		return failCheckouts(len(take()), err)
	}
	locked := time.Now()
	section, stops := ctx, make([]func(), len(h.locks))
	for i, l := range h.locks {
		section, stops[i] = untilLost(section, l)
	}
	placed := r.writeCheckouts(section, h, take())
	for i := len(stops) - 1; i >= 0; i-- {
		stops[i]()
	}
	r.metrics.held(r.name, r.locker.Key(skus[0]), time.Since(locked))
	r.release(ctx, h)
	if errors.Is(context.Cause(section), lock.ErrLost) {
		for i := range placed {
			if placed[i].Err != nil && !errors.Is(placed[i].Err, stock.ErrSoldOut) {
				placed[i].Err = stock.Busy(stock.BusyLockLost, fmt.Errorf("a lock of the checkout was lost mid-section, section abandoned: %w", placed[i].Err))
			}
		}
	}
	return placed
}

// writeCheckouts writes reqs under r's guard, h held (nil: no lock).
func (r *runner) writeCheckouts(ctx context.Context, h *holds, reqs []stock.CheckoutRequest) []stock.CheckoutPlaced {
	if len(reqs) == 0 {
		return nil
	}
	lines := stock.SKUOrder(reqs[0].Lines)
	hook := func(ctx context.Context) error {
		if r.pause > 0 {
			select {
			case <-time.After(r.pause):
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		r.inSection(ctx, lines)
		return ctx.Err()
	}
	var (
		placed []stock.CheckoutPlaced
		err    error
	)
	switch r.guard {
	case Version:
		return r.versionedCheckouts(ctx, reqs)
	case Fence:
		err = r.fencedWrite(ctx, h.lockOf, func(tokens map[string]stock.Token) (err error) {
			placed, err = r.store.PlaceCheckoutsFenced(ctx, reqs, tokens, hook)
			return err
		}, h.skus...)
	default:
		if placed, err = r.store.PlaceCheckoutsUnguarded(ctx, reqs, hook); errors.Is(err, stock.ErrVersionConflict) {
			err = stock.Busy(stock.BusyConflicts, err)
		}
	}
	if err != nil {
		return failCheckouts(len(reqs), err)
	}
	return placed
}

// versionedCheckouts reads every product of the batch, then writes its checkouts at the
// versions read (stock.Store.PlaceCheckoutsAt), reading again when another writer got there
// first — up to attempts times, then busy.
func (r *runner) versionedCheckouts(ctx context.Context, reqs []stock.CheckoutRequest) []stock.CheckoutPlaced {
	lines := stock.SKUOrder(reqs[0].Lines)
	for i := 1; ; i++ {
		reads := make([]stock.Product, len(lines))
		for j, line := range lines {
			p, err := r.store.Product(ctx, line.SKU)
			if errors.Is(err, stock.ErrNotFound) {
				return failCheckouts(len(reqs), &stock.CheckoutError{SKUs: []string{line.SKU}, Err: err})
			}
			if err != nil {
				return failCheckouts(len(reqs), err)
			}
			reads[j] = p
		}
		r.inSection(ctx, lines)
		placed, err := r.store.PlaceCheckoutsAt(ctx, reqs, reads)
		switch {
		case err == nil:
			return placed
		case !errors.Is(err, stock.ErrVersionConflict):
			return failCheckouts(len(reqs), err)
		case i >= attempts:
			return failCheckouts(len(reqs), stock.Busy(stock.BusyConflicts, fmt.Errorf("%d version conflicts on the checkout's products: %w", i, err)))
		}
		r.metrics.retried(r.name)
	}
}
