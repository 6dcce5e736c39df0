package lockstrategy

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/flashsale/seckill/internal/admission"
	"github.com/flashsale/seckill/internal/stock"
)

// batcher is how every strategy places orders: orders for a SKU that arrive while a critical
// section runs wait in a queue, and the next section takes the queue (up to max) — one lock
// acquisition, one conditional stock update, one insert for all of them (group commit). A
// section is a function of "the orders to place", so one order per section (max 1) and many
// share one path: the strategy's only one. The batcher also runs at most one section per SKU in
// an instance, so an instance's orders take turns in memory, where waiting is free, and only one
// of them at a time waits for the distributed lock — unless its sections overlap (naive's).
type batcher struct {
	strategy string
	metrics  *LockMetrics
	max      int
	section  section
	timeout  time.Duration // bounds one section: its lock wait, then the write and its retries
	// overlap lets a SKU's sections run at once in an instance: every order starts a drainer
	// of its own, which takes what has queued, as a request with no lock in front of it would.
	// Only naive sets it: one section per SKU at a time is itself a lock, held in memory, and
	// with it naive could not race within one instance — on the embedded default, the only one.
	overlap bool

	mu     sync.Mutex
	queues map[string][]*waiter // by SKU; without overlap, a key is present while its drainer runs
}

// A section is one critical section over sku. It calls take as soon as it holds the lock (or
// has failed to get it), and answers each order take returned, in order; take returns the same
// orders if called again (a section that retries its write), and may return none (the requests
// gave up while the section waited for its lock). Taking the
// queue at the grant rather than before the wait lets the orders that arrived while the section
// waited for the lock — while other instances held it — ride along in the same batch: under
// contention that is most of them.
type section func(ctx context.Context, sku string, take func() []stock.OrderRequest) []stock.Placed

type waiter struct {
	req  stock.OrderRequest
	done chan stock.Placed
}

// newBatcher returns strategy's batcher of up to most orders per section (at least one);
// lockWait is the section's budget for its lock, and the section may take twice that plus time
// to write.
func newBatcher(strategy string, most int, lockWait time.Duration, metrics *LockMetrics, s section) *batcher {
	return &batcher{strategy: strategy, metrics: metrics, max: max(1, most), section: s,
		timeout: 2*lockWait + 5*time.Second, queues: map[string][]*waiter{}}
}

// place queues req and waits for its answer. The first order of an idle SKU starts that SKU's
// drainer (with overlap, every order starts one), which runs sections until the queue is empty;
// no request waits for another's answer beyond the section that places it. A request that gives
// up (ctx) before a section took it is taken out of the queue and never placed; once taken, it
// waits for the section's answer, so that what it returns is what happened.
func (b *batcher) place(ctx context.Context, req stock.OrderRequest) (stock.Order, error) {
	if err := ctx.Err(); err != nil {
		// Gone before it queued: never placed. Queued, a section fast enough to answer before
		// the select below would race the cancellation for it.
		return stock.Order{}, fmt.Errorf("%w: %w", errAbandoned, err)
	}
	w := &waiter{req: req, done: make(chan stock.Placed, 1)}
	b.mu.Lock()
	q, running := b.queues[req.SKU]
	b.queues[req.SKU] = append(q, w)
	b.metrics.enqueued(b.strategy, 1)
	b.mu.Unlock()
	if !running || b.overlap {
		go b.drain(req.SKU)
	}
	select {
	case p := <-w.done:
		return p.Order, p.Err
	case <-ctx.Done():
	}
	b.mu.Lock()
	q = b.queues[req.SKU]
	if i := slices.Index(q, w); i >= 0 {
		b.queues[req.SKU] = slices.Delete(q, i, i+1)
		b.metrics.enqueued(b.strategy, -1)
		b.mu.Unlock()
		return stock.Order{}, fmt.Errorf("%w: %w", errAbandoned, ctx.Err())
	}
	b.mu.Unlock()
	p := <-w.done
	return p.Order, p.Err
}

// drain runs sections over sku's queue until it is empty. Sections run on their own context:
// the request that happened to start the drainer must not cancel everyone else's orders.
func (b *batcher) drain(sku string) {
	for {
		b.mu.Lock()
		if len(b.queues[sku]) == 0 {
			delete(b.queues, sku)
			b.mu.Unlock()
			return
		}
		b.mu.Unlock()

		var (
			batch []*waiter
			reqs  []stock.OrderRequest
		)
		ctx, cancel := context.WithTimeoutCause(context.Background(), b.timeout, errSectionTimeout)
		take := func() []stock.OrderRequest {
			if reqs != nil {
				return reqs
			}
			b.mu.Lock()
			q := b.queues[sku] // empty only if its requests gave up since the drainer looked, or (overlap) another section took them
			n := min(len(q), b.max)
			taken := q[:n:n]
			b.queues[sku] = q[n:]
			b.metrics.enqueued(b.strategy, -n)
			b.mu.Unlock()
			batch = taken
			reqs = make([]stock.OrderRequest, n)
			for i, w := range taken {
				reqs[i] = w.req
			}
			if len(reqs) > 0 { // a section that took nothing placed no batch
				b.metrics.batched(b.strategy, len(reqs))
			}
			return reqs
		}
		results := b.section(ctx, sku, take)
		cancel()
		for i, w := range batch {
			w.done <- results[i]
		}
	}
}

// errSectionTimeout is the cause of a section's end that is not the lock's: its time is up.
// errAbandoned marks a request that gave up before any section took it: certainly not placed.
var (
	errAbandoned      = fmt.Errorf("request gave up before its section: %w", admission.ErrNotPlaced)
	errSectionTimeout = errors.New("section took too long")
)
