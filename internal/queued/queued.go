// Package queued is the architecture flash sales are known for — pre-deduct in Redis, queue the
// order, answer 202 at once, write later — with its classic bug closed: Redis decremented and the
// message never sent.
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

// Queued is the queued strategy. The buyer has 202 at Redis speed and follows the order by its
// id; writers on every instance place the queue's batches with hybrid's section, one database
// write per batch. A product's orders that arrive while its last batch is out go together in
// the next (group commit, no timer): a sale's crowd shares its fsyncs.
//
// One batch's life:
//  1. Admission reserves each order's units under an id minted in the batch, on this instance's
//     lease: sold out and already purchased are answered here, never queued.
//  2. The batch is published (a retry is one message), recorded queued, its reservations handed
//     to the queue, its orders answered 202. Until the record a sweeper may record it given up:
//     the first record decides, so each order is placed or returned, never both.
//  3. A writer places its orders, one section per set of products, and rejects in the record
//     those the database refuses, units given back. The batch is acked once every order is
//     decided, naked otherwise to come back. A batch whose message the queue lost is sent again.
//
// A Redis that lost its data warms from the database, which does not count queued orders: until
// they are written admission accepts too many and writers reject the excess as sold_out. No unit
// sells twice, but meanwhile queued and active orders may exceed the stock.
type Queued struct {
	section   Section
	admission *admission.Ledger
	queue     *orderqueue.Queue
	store     *stock.Store
	sending   *keyqueue.Queue[*entry] // by product: the requests waiting for its next batch
	reading   *keyqueue.Queue[*rowRead]
	opts      Options
	log       *slog.Logger
	stop      context.CancelFunc
	writers   sync.WaitGroup
}

// Section places a batch of requests for the same products in one transaction, under their locks
// (in SKU order) and version guards, and settles the reservations written: Hybrid.Section's.
type Section func(ctx context.Context, skus []string, take func() []stock.CheckoutRequest) []stock.Placed

// Options tune the queued strategy (app.Defaults); every duration and count but MaxWaiting is required.
type Options struct {
	Writers int // writer loops on this instance
	Batch   int // orders in one message (group commit), and messages in one writer's take
	// BatchBytes bounds a message, so a batch and its record fit NATS's max_payload (1 MB).
	BatchBytes int
	Idle       time.Duration // how long an idle writer waits for an order before asking again
	Retry      time.Duration // how long an order that could not be decided waits before it comes back
	Publish    time.Duration // budget of an order's publish, and again of its record
	// MaxWaiting bounds a product's orders accepted and not yet decided, on all instances: past
	// it an order is answered busy rather than wait behind them (0: only the queue's bound).
	MaxWaiting int
	// LockWait is the section's wait for its lock; a writer's batch has twice that and 10 s.
	LockWait time.Duration
	// Hooks, for tests: Admitted and Published run for each order of a batch its publisher sends,
	// Taken for each order a writer takes.
	Hooks lockstrategy.Hooks
}

// New returns the queued strategy on ledger, section (hybrid's), store and queue, its writers
// started; Close stops them. The ledger's sweeper asks the queue through Pending.
func New(section Section, ledger *admission.Ledger, store *stock.Store, queue *orderqueue.Queue, opts Options, log *slog.Logger) (*Queued, error) {
	if opts.Writers <= 0 || opts.Batch <= 0 || opts.BatchBytes <= 0 || opts.Idle <= 0 || opts.Retry <= 0 || opts.Publish <= 0 || opts.LockWait <= 0 {
		return nil, fmt.Errorf("queued options %+v: writers, batch, batch bytes, idle, retry, publish and lock wait are required", opts)
	}
	ctx, stop := context.WithCancel(context.Background())
	s := &Queued{section: section, admission: ledger, queue: queue, store: store, opts: opts, log: log, stop: stop}
	s.sending = keyqueue.New(opts.Batch, s.sendRound)
	s.reading = keyqueue.New(rowsRead, s.readRows)
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

// givenUp is the reason of a batch a sweeper or its publisher in doubt gave up before any writer
// took it, so that none ever will. Writers never reject for it (refusal).
var givenUp = stock.Code(stock.ErrUnavailable)

// neverAccepted reports whether a batch's record says it was given up before any writer took it.
// Any other record means a writer took or will take it: its orders were accepted.
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
// line carries the order's key, as its row would.
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
		co.Lines[0].IdempotencyKey = o.IdempotencyKey
	}
	return co
}
