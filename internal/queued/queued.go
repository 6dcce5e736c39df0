package queued

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/flashsale/seckill/internal/admission"
	"github.com/flashsale/seckill/internal/keyqueue"
	"github.com/flashsale/seckill/internal/lockstrategy"
	"github.com/flashsale/seckill/internal/orderqueue"
	"github.com/flashsale/seckill/internal/planted"
	"github.com/flashsale/seckill/internal/stock"
)

// Queued is the architecture flash sales are known for — pre-deduct in Redis, queue the order,
// answer at once, write later — with its classic bug closed: Redis decremented and the message
// never sent. The buyer has 202 at Redis speed and follows the order by its id; writers on every
// instance take the queue in batches per product and place them with hybrid's section (its lock
// and its version-guarded write), so the database sees one write per batch.
//
// Group commit: the orders an instance accepts for a product while its last batch is being
// published go out together in the next — one message and one record, each one synced write for
// all of them, the batch being whatever came during the last write (no timer), up to
// Options.Batch orders and Options.BatchBytes. A sale's crowd shares its fsyncs instead of paying
// two or three each.
//
// Order of events for one batch:
//  1. The requests of a product that arrived while its last batch was out are taken together,
//     each given an id minted in the batch (orderqueue.Batch.NewID: the order's record is found
//     from its id). Admission (hybrid's Lua script, package admission) reserves each one's units
//     under that id, on this instance's heartbeat lease: sold out / already purchased are
//     answered here, never queued.
//  2. The batch is published (its id the message id: a retry is one message), then recorded
//     queued, then its reservations are handed over to the queue, then each of its orders is
//     answered 202. From the record on, whichever writer takes the message resolves the
//     reservations; before it, a sweeper that finds one orphaned records the batch given up and
//     returns the units — the first record decides, so each order is placed or returned, never
//     both (internal/orderqueue).
//  3. A writer takes a batch handed over to the queue as queued on its first delivery, without
//     reading its record; any other it claims: records it queued if nobody has (the publisher may
//     have died before it), drops it if a sweeper gave it up first. It decides at once the
//     orders its record says rejected and those the database has already (a writer committed
//     them and died before its ack), and places the rest with hybrid's section, all it took for one
//     set of products in one section, which settles the reservations of the orders written.
//  4. Each order ends placed — its row is its record from then on — or rejected in its batch's
//     record with the database's reason, its reservation given back, all of a batch's in one
//     write; its end is said to its followers. The batch is acked once every order of it is
//     decided. A failure that decided nothing (the database did not answer) naks it: it comes
//     back, to this writer or another, which decides only the orders not yet decided. A batch
//     recorded queued whose message the queue lost is sent again (resend).
//
// With Redis unreachable there is no admission to keep queued orders within the stock, so no
// order is accepted: it answers busy (429, Retry-After), and the buyer retries with its key.
// Taking hybrid's database path instead would sell units that admission holds for orders already
// answered 202, and a writer would then reject one of those. A Redis that lost its data (flushed,
// a failover without the last writes) warms its counter from the database, which does not count
// the orders still queued: until they are written admission accepts more than the stock, and the
// writers reject the excess as sold_out — every order still ends, and the database never sells a
// unit twice, but for that while queued and active orders may exceed the stock.
//
// The files follow a batch: publish.go and keys.go (1, 2), write.go (3, 4), resend.go, read.go (the
// buyer following an order), pending.go (the sweeper's question).
type Queued struct {
	section   Section
	admission *admission.Ledger
	queue     *orderqueue.Queue
	store     *stock.Store
	keys      *keyqueue.Queue[*keyCheck]
	sending   *keyqueue.Queue[*entry] // by product: the requests waiting for its next batch
	opts      Options
	log       *slog.Logger
	stop      context.CancelFunc
	writers   sync.WaitGroup
}

// Section places a batch of requests for the same products under their locks, taken in SKU
// order, and their version guards, in one transaction, and settles the reservations of those
// written: hybrid's (lockstrategy.Hybrid.Section).
type Section func(ctx context.Context, skus []string, take func() []stock.CheckoutRequest) []stock.Placed

// Options tune the queued strategy; app.Defaults has the service's. Every duration and count but
// MaxWaiting is required.
type Options struct {
	Writers int // writer loops on this instance
	// Batch bounds the orders of one message (group commit); a writer takes up to Batch
	// messages at a time, and places the orders it took for one set of products in one section.
	Batch int
	// BatchBytes bounds the bytes of one message, so that a batch and its record stay within
	// what the queue's servers take in one (NATS max_payload, 1 MB by default).
	BatchBytes int
	Idle       time.Duration // how long an idle writer waits for an order before asking again
	Retry      time.Duration // how long an order that could not be decided waits before it comes back
	Publish    time.Duration // budget of an order's publish, and again of its record
	// MaxWaiting bounds the orders of a product accepted and not yet written or rejected, on
	// all instances: past it a new order is answered busy, so that none waits behind more than
	// this many (0: only the queue's own bound).
	MaxWaiting int
	// LockWait is the section's wait for its lock; a writer's batch has twice that and 10 s.
	LockWait time.Duration
	// Hooks: Admitted and Published run at their moments of a batch's publisher, for each of
	// its orders, Taken at a writer's, for tests.
	Hooks lockstrategy.Hooks
}

// New returns the queued strategy: admission by ledger, orders and checkouts written by section
// (hybrid's) to store, and starts its writers on queue. Close stops them. The
// ledger's sweeper asks the queue about orphaned reservations through Pending, given to it at its
// construction.
func New(section Section, ledger *admission.Ledger, store *stock.Store, queue *orderqueue.Queue, opts Options, log *slog.Logger) (*Queued, error) {
	if opts.Writers <= 0 || opts.Batch <= 0 || opts.BatchBytes <= 0 || opts.Idle <= 0 || opts.Retry <= 0 || opts.Publish <= 0 || opts.LockWait <= 0 {
		return nil, fmt.Errorf("queued options %+v: writers, batch, batch bytes, idle, retry, publish and lock wait are required", opts)
	}
	ctx, stop := context.WithCancel(context.Background())
	s := &Queued{section: section, admission: ledger, queue: queue, store: store, opts: opts, log: log, stop: stop}
	s.keys = newKeyChecks(store, opts.Publish)
	s.sending = keyqueue.New(opts.Batch, s.sendRound)
	timeout := 2*opts.LockWait + 10*time.Second
	for range opts.Writers {
		s.writers.Go(func() { queue.Work(ctx, opts.Batch, opts.Idle, timeout, s.write) })
	}
	s.writers.Go(func() { s.resend(ctx) })
	return s, nil
}

// name is the strategy's, also in the records the sweeper writes.
const name = "queued"

// Name implements Strategy.
func (s *Queued) Name() string { return name }

// Close stops the writers, after the batches in hand.
func (s *Queued) Close() error {
	s.stop()
	s.writers.Wait()
	return nil
}

// givenUp is the reason of a batch given up before any writer took it — by a sweeper, or by its
// publisher in doubt — so that none ever will: the record of orders never accepted. Writers
// never reject for it (refusal).
var givenUp = stock.Code(stock.ErrUnavailable)

// neverAccepted reports whether the record that stands for a batch says it was never accepted:
// given up before any writer took it. Any other record — queued, with or without orders a writer
// rejected — means a writer took or will take its message: the orders were accepted, and the
// record and their rows end them (TestQueuedRecordedFirst).
func neverAccepted(rec orderqueue.BatchRecord) bool {
	switch {
	case planted.On(planted.AnyRejectionGivenUp):
		return rec.State == orderqueue.Rejected || len(rec.Rejected) > 0
	case planted.On(planted.NoneGivenUp):
		return false
	}
	return rec.State == orderqueue.Rejected && rec.Reason == givenUp
}

// requestOf is the request a message carries, every line under its reservation.
func requestOf(o orderqueue.Order) stock.CheckoutRequest {
	req := stock.CheckoutRequest{UserID: o.UserID, Strategy: o.Strategy, IdempotencyKey: o.IdempotencyKey, Order: !o.Checkout}
	if o.Checkout {
		req.CheckoutID = o.OrderID
	}
	for _, l := range o.Lines {
		req.Lines = append(req.Lines, stock.OrderRequest{SKU: l.SKU, UserID: o.UserID, Quantity: l.Quantity, Strategy: o.Strategy,
			OrderID: l.OrderID, Reservation: stock.Reservation{ID: o.Reservation}})
	}
	return req
}

// queuedCheckout is the request a queued record stands for, its lines in status. An order's one
// line carries the order's key and what it asked for, as its row would.
func queuedCheckout(o orderqueue.Order, status stock.Status) stock.Checkout {
	co := stock.Checkout{UserID: o.UserID, Strategy: o.Strategy, Status: status, CreatedAt: o.AcceptedAt}
	if o.Checkout {
		co.CheckoutID = o.OrderID
	}
	for _, l := range o.Lines {
		co.Lines = append(co.Lines, stock.Order{OrderID: l.OrderID, CheckoutID: co.CheckoutID, SKU: l.SKU, UserID: o.UserID,
			Quantity: l.Quantity, Strategy: o.Strategy, CreatedAt: o.AcceptedAt, Status: status})
	}
	if !o.Checkout {
		co.Lines[0].IdempotencyKey, co.Lines[0].RequestHash = o.IdempotencyKey, requestOf(o).Fingerprint()
	}
	return co
}
