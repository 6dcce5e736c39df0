package lockstrategy

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/flashsale/seckill/internal/lock"
	"github.com/flashsale/seckill/internal/stock"
)

// Checkouts: several products in one order, every line placed or none (the store's checkout
// sections, internal/stock/checkout.go). One lock is easy; two need an order: every strategy
// takes its locks — its rows, its admission — in SKU order (stock.SKUOrder), so two crossed
// checkouts (A+B against B+A) never each hold what the other waits for. A checkout does not
// ride in the batcher's group commit: a batch is one product's, a checkout spans several. It
// takes its products' turns in the instance (local), then their locks, each in SKU order.

// A CheckoutPlacer places checkouts. It returns a Strategy's errors; a refusal of some lines
// is a *stock.CheckoutError naming them.
type CheckoutPlacer interface {
	PlaceCheckout(ctx context.Context, req stock.CheckoutRequest) (stock.Checkout, error)
}

// PlaceCheckout implements CheckoutPlacer.
func (l *Locked) PlaceCheckout(ctx context.Context, req stock.CheckoutRequest) (stock.Checkout, error) {
	return l.run.checkout(ctx, req)
}

// PlaceCheckout implements CheckoutPlacer: no lock and no guard, as unsafe as an order.
func (n *Naive) PlaceCheckout(ctx context.Context, req stock.CheckoutRequest) (stock.Checkout, error) {
	return n.run.writeCheckout(ctx, nil, req)
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

// lockAll takes the turn and the lock of every line's product in SKU order, within the
// section's wait. On failure it releases what it took, and answers as a section would.
func (r *runner) lockAll(ctx context.Context, lines []stock.OrderRequest) (*holds, error) {
	h := &holds{}
	start := time.Now()
	waitCtx, cancel := context.WithTimeout(ctx, r.opts.Wait)
	defer cancel()
	for _, line := range lines {
		key := r.locker.Key(line.SKU)
		release, err := r.local.take(waitCtx, line.SKU)
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
		h.skus, h.locks, h.releases = append(h.skus, line.SKU), append(h.locks, l), append(h.releases, release)
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

// checkout places req under the lock of every line's product, taken in SKU order, written under
// r's guard. A lock lost mid-way stops the write, and the checkout answers busy.
func (r *runner) checkout(ctx context.Context, req stock.CheckoutRequest) (stock.Checkout, error) {
	h, err := r.lockAll(ctx, stock.SKUOrder(req.Lines))
	if err != nil {
		return stock.Checkout{}, err
	}
	locked := time.Now()
	section, stops := ctx, make([]func(), len(h.locks))
	for i, l := range h.locks {
		section, stops[i] = untilLost(section, l)
	}
	co, err := r.writeCheckout(section, h, req)
	for i := len(stops) - 1; i >= 0; i-- {
		stops[i]()
	}
	r.metrics.held(r.name, r.locker.Key(h.skus[0]), time.Since(locked))
	r.release(ctx, h)
	if err != nil && !errors.Is(err, stock.ErrSoldOut) && errors.Is(context.Cause(section), lock.ErrLost) {
		err = stock.Busy(stock.BusyLockLost, fmt.Errorf("a lock of the checkout was lost mid-section, section abandoned: %w", err))
	}
	return co, err
}

// writeCheckout writes req under r's guard, h held (nil: no lock).
func (r *runner) writeCheckout(ctx context.Context, h *holds, req stock.CheckoutRequest) (stock.Checkout, error) {
	lines := stock.SKUOrder(req.Lines)
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
	switch r.guard {
	case Version:
		return r.versionedCheckout(ctx, req, lines)
	case Fence:
		var co stock.Checkout
		err := r.fencedWrite(ctx, h.lockOf, func(tokens map[string]stock.Token) (err error) {
			co, err = r.store.PlaceCheckoutFenced(ctx, req, tokens, hook)
			return err
		}, h.skus...)
		return co, err
	}
	co, err := r.store.PlaceCheckoutUnguarded(ctx, req, hook)
	if errors.Is(err, stock.ErrVersionConflict) {
		return stock.Checkout{}, stock.Busy(stock.BusyConflicts, err)
	}
	return co, err
}

// versionedCheckout reads every product of the checkout, then writes every line at the versions
// read (stock.Store.PlaceCheckoutAt), reading again when another writer got there first — up to
// attempts times, then busy.
func (r *runner) versionedCheckout(ctx context.Context, req stock.CheckoutRequest, lines []stock.OrderRequest) (stock.Checkout, error) {
	for i := 1; ; i++ {
		reads := make([]stock.Product, len(lines))
		for j, line := range lines {
			p, err := r.store.Product(ctx, line.SKU)
			if errors.Is(err, stock.ErrNotFound) {
				return stock.Checkout{}, &stock.CheckoutError{SKUs: []string{line.SKU}, Err: err}
			}
			if err != nil {
				return stock.Checkout{}, err
			}
			reads[j] = p
		}
		r.inSection(ctx, lines)
		co, err := r.store.PlaceCheckoutAt(ctx, req, reads)
		if !errors.Is(err, stock.ErrVersionConflict) {
			return co, err
		}
		if i >= attempts {
			return stock.Checkout{}, stock.Busy(stock.BusyConflicts, fmt.Errorf("%d version conflicts on the checkout's products: %w", i, err))
		}
		r.metrics.retried(r.name)
	}
}
