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

// batcher is how every strategy places requests: requests for the same products that arrive
// while a critical section of theirs runs wait in a queue, and the next section takes the queue
// (up to a batch's most) — one acquisition of each lock, one conditional stock update per
// product, one insert for all of them (group commit). A request's key is its set of products in
// SKU order: an order's is its one SKU, so a product's orders ride together, and so do checkouts
// of the same products; requests of other products, or of the same ones in part, never ride
// together — their sections take other locks. A section is a function of "the requests to
// place", so one request per section (most 1) and many share one path: the strategy's only one.
// The batcher also runs at most one section per key in an instance, so an instance's requests
// take turns in memory, where waiting is free, and only one of them at a time waits for the
// distributed locks — unless its sections overlap (naive's).
type batcher struct {
	strategy string
	metrics  *LockMetrics
	section  section
	timeout  time.Duration // bounds one section: its lock wait, then the write and its retries
	// overlap lets a key's sections run at once in an instance: every request starts a drainer
	// of its own, which takes what has queued, as a request with no lock in front of it would.
	// Only naive sets it: one section per product at a time is itself a lock, held in memory,
	// and with it naive could not race within one instance — on the embedded default, the only
	// one.
	overlap bool
	queue   *keyqueue.Queue[*waiter] // by key: the requests waiting for the next section
}

// A section is one critical section over the products skus (in SKU order). It calls take as
// soon as it holds their locks (or has failed to get them), and answers each request take
// returned, in order; take returns the same requests if called again (a section that retries its
// write), and may return none (the requests gave up while the section waited for its locks).
// Taking the queue at the grant rather than before the wait lets the requests that arrived while
// the section waited — while other instances held the locks — ride along in the same batch:
// under contention that is most of them.
type section func(ctx context.Context, skus []string, take func() []stock.CheckoutRequest) []stock.Placed

type waiter struct {
	req    stock.CheckoutRequest
	placed stock.Placed
	done   chan struct{}
}

// newBatcher returns strategy's batcher of up to most requests per section (at least one);
// lockWait is the section's budget for its locks, and the section may take twice that plus time
// to write.
func newBatcher(strategy string, most int, lockWait time.Duration, metrics *LockMetrics, s section) *batcher {
	b := &batcher{strategy: strategy, metrics: metrics, section: s, timeout: 2*lockWait + 5*time.Second}
	b.queue = keyqueue.New(most, b.round)
	return b
}

// place queues req and waits for its answer. The first request of an idle key starts that key's
// drainer (with overlap, every request starts one), which runs sections until the queue is
// empty; no request waits for another's answer beyond the section that places it. A request that
// gives up (ctx) before a section took it is taken out of the queue and never placed; once
// taken, it waits for the section's answer, so that what it returns is what happened.
func (b *batcher) place(ctx context.Context, req stock.CheckoutRequest) (stock.Checkout, error) {
	if err := ctx.Err(); err != nil {
		// Gone before it queued: never placed. Queued, a section fast enough to answer before
		// the wait below would race the cancellation for it.
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

// round runs one section over key's queue. Sections run on their own context: the request that
// happened to start the drainer must not cancel everyone else's.
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
		// Empty only if its requests gave up since the drainer looked, or (overlap) another
		// section took them.
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
