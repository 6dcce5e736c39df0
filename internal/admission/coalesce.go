package admission

import (
	"context"
	"slices"
	"sync"
)

// coalescer holds, per product, the callers waiting for that product's next Redis call: the
// first to arrive starts the product's drainer, which sends them a batch at a time until none is
// left. Admission (batch.go) and the queued strategy's hand-overs (HandOver) share it.
type coalescer[T comparable] struct {
	mu      sync.Mutex
	waiting map[string][]T // a key is present while its drainer runs
	// send makes one call for batch, all of sku, and answers every one of them.
	send func(ctx context.Context, sku string, batch []T)
}

func newCoalescer[T comparable](send func(ctx context.Context, sku string, batch []T)) *coalescer[T] {
	return &coalescer[T]{waiting: map[string][]T{}, send: send}
}

// await queues t for sku's next call, starting sku's drainer if none runs (batches of at most
// n), and waits until t's call is answered (done closed). When ctx ends first, a t still waiting
// is taken out and never sent (ctx's error); a t already sent is waited for, so that what its
// call did is never left behind untracked.
func (c *coalescer[T]) await(ctx context.Context, sku string, t T, done <-chan struct{}, n int) error {
	if c.add(sku, t) {
		go c.drain(sku, n)
	}
	select {
	case <-done:
		return nil
	case <-ctx.Done():
	}
	if c.remove(sku, t) {
		return ctx.Err()
	}
	<-done
	return nil
}

// drain sends sku's waiting callers, at most n a call, until none is left. Each call runs on a
// context of its own, bounded by admitTimeout: the caller who happened to start the drainer must
// not cut off everyone else's.
func (c *coalescer[T]) drain(sku string, n int) {
	for batch := c.take(sku, n); batch != nil; batch = c.take(sku, n) {
		ctx, cancel := context.WithTimeoutCause(context.Background(), admitTimeout, errAdmitSlow)
		c.send(ctx, sku, batch)
		cancel()
	}
}

// add queues t for sku's next call, and reports whether the caller must start sku's drainer.
func (c *coalescer[T]) add(sku string, t T) (start bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	q, running := c.waiting[sku]
	c.waiting[sku] = append(q, t)
	return !running
}

// take is the drainer's next batch of sku, at most n; none left, the drainer ends (nil).
func (c *coalescer[T]) take(sku string, n int) []T {
	c.mu.Lock()
	defer c.mu.Unlock()
	q := c.waiting[sku]
	if len(q) == 0 {
		delete(c.waiting, sku)
		return nil
	}
	n = min(len(q), n)
	c.waiting[sku] = q[n:]
	return q[:n:n]
}

// remove takes t out of sku's queue, and reports whether it was still there (its call not sent).
func (c *coalescer[T]) remove(sku string, t T) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	q := c.waiting[sku]
	i := slices.Index(q, t)
	if i < 0 {
		return false
	}
	c.waiting[sku] = slices.Delete(q, i, i+1)
	return true
}
