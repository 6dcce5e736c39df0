package lockstrategy

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/flashsale/seckill/internal/admission"
	"github.com/flashsale/seckill/internal/keyqueue"
	"github.com/flashsale/seckill/internal/stock"
)

// batcher is how every strategy places requests: those that arrive while a section for their
// products (the key) runs wait, and the next section takes them together (group commit): one
// acquisition of each lock, one update per product, one insert. One section per key runs in an
// instance, so its requests take turns in memory, where waiting is free, not at the lock.
type batcher struct {
	strategy string
	metrics  *LockMetrics
	section  section
	timeout  time.Duration // bounds one section: its lock wait, then the write and its retries
	// overlap lets a key's sections run at once (naive): one at a time is itself a lock, and
	// naive could not race within the one instance of the default.
	overlap bool
	queue   *keyqueue.Queue[*waiter] // by key: the requests waiting for the next section
}

// batched is a strategy whose requests go through its runner's batcher: its name and its Place.
type batched struct {
	run   *runner
	batch *batcher
}

// Name implements Strategy.
func (b *batched) Name() string { return b.run.name }

// Place implements Strategy.
func (b *batched) Place(ctx context.Context, req stock.CheckoutRequest) (stock.Checkout, error) {
	return b.batch.place(ctx, req)
}

// A section is one critical section over the products skus (in SKU order). It calls take once
// it holds their locks (or failed to), and answers each request take returned, in order. take
// returns the same requests if called again, or none. Taking at the grant, not before the wait,
// lets the requests that arrived meanwhile ride along: under contention, most of them.
type section func(ctx context.Context, skus []string, take func() []stock.CheckoutRequest) []stock.Placed

type waiter struct {
	req    stock.CheckoutRequest
	placed stock.Placed
	done   chan struct{}
}

// newBatcher returns the batcher that runs s (r's section, or a strategy's around it) over r's
// batches. A section may take twice r's lock wait, plus time to write.
func newBatcher(r *runner, s section) *batcher {
	b := &batcher{strategy: r.name, metrics: r.metrics, section: s, timeout: 2*r.opts.Wait + 5*time.Second}
	b.queue = keyqueue.New(r.opts.Batch, b.round)
	return b
}

// place queues req and waits for its answer. A request that gives up before a section took it
// leaves unplaced; once taken, it waits for the answer, so that it returns what happened.
func (b *batcher) place(ctx context.Context, req stock.CheckoutRequest) (stock.Checkout, error) {
	if err := ctx.Err(); err != nil {
		// Gone already: never queued, so no fast section races its cancellation to place it.
		return stock.Checkout{}, fmt.Errorf("%w: %w", errAbandoned, err)
	}
	w := &waiter{req: req, done: make(chan struct{})}
	await := b.queue.Await
	if b.overlap {
		await = b.queue.AwaitOverlapping
	}
	b.metrics.enqueued(b.strategy, 1)
	if err := await(ctx, strings.Join(req.SKUs(), "\x00"), w, w.done); err != nil {
		b.metrics.enqueued(b.strategy, -1)
		return stock.Checkout{}, fmt.Errorf("%w: %w", errAbandoned, err)
	}
	return w.placed.Checkout, w.placed.Err
}

// round runs one section over key's queue, on its own context: the request that started the
// drainer must not cancel everyone else's.
func (b *batcher) round(key string, take func() []*waiter) {
	var (
		batch []*waiter
		reqs  []stock.CheckoutRequest
	)
	ctx, cancel := context.WithTimeoutCause(context.Background(), b.timeout, errSectionTimeout)
	results := b.section(ctx, strings.Split(key, "\x00"), func() []stock.CheckoutRequest {
		if reqs != nil {
			return reqs
		}
		batch = take()
		b.metrics.enqueued(b.strategy, -len(batch))
		reqs = make([]stock.CheckoutRequest, len(batch))
		for i, w := range batch {
			reqs[i] = w.req
		}
		if len(reqs) > 0 { // a section that took nothing placed no batch
			b.metrics.batched(b.strategy, len(reqs))
		}
		return reqs
	})
	cancel()
	for i, w := range batch {
		w.placed = results[i]
		close(w.done)
	}
}

// errSectionTimeout is the cause of a section's end that is not the lock's: its time is up.
// errAbandoned marks a request that gave up before any section took it: certainly not placed.
var (
	errAbandoned      = fmt.Errorf("request gave up before its section: %w", admission.ErrNotPlaced)
	errSectionTimeout = errors.New("section took too long")
)
