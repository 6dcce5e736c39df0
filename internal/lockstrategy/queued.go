package lockstrategy

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/oklog/ulid/v2"
	"golang.org/x/sync/errgroup"

	"github.com/flashsale/seckill/internal/admission"
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
// Order of events for one order:
//  1. Admission (hybrid's Lua script) reserves the units under the order's id, on this
//     instance's heartbeat lease: sold out / already purchased are answered here, never queued.
//  2. The order is published (its id the message id: a retry is one message), then recorded
//     queued, then its reservation is handed over to the queue, then 202. From the record on,
//     whichever writer takes the message resolves the reservation; before it, a sweeper that
//     finds the reservation orphaned records the order rejected and returns the units — the
//     first record decides, so the order is placed or returned, never both (internal/orderqueue).
//  3. A writer records the order queued if nobody has (the publisher may have died before it),
//     drops it if a sweeper rejected it first, acks it at once if the database has it already (a
//     writer committed it and died before its ack), and places the rest with hybrid's section,
//     which settles the reservations of the orders written.
//  4. Each order's record ends placed, or rejected with the database's reason and its
//     reservation given back; then its message is acked. A failure that decided nothing (the
//     database did not answer) naks it: it comes back, to this writer or another.
//     An order recorded queued whose message the queue lost is sent again (resend).
//
// With Redis unreachable there is no admission to keep queued orders within the stock, so no
// order is accepted: it answers busy (429, Retry-After), and the buyer retries with its key. Taking
// hybrid's database path instead would sell units that admission holds for orders already answered
// 202, and a writer would then reject one of those (TestQueuedSale saw it, once, when an admission
// call timed out on a loaded machine and opened the breaker). A Redis that
// lost its data (flushed, a failover without the last writes) warms its counter from the
// database, which does not count the orders still queued: until they are written admission
// accepts more than the stock, and the writers reject the excess as sold_out — every order still
// ends, and the database never sells a unit twice, but for that while queued and active orders
// may exceed the stock.
type Queued struct {
	hybrid    *Hybrid
	admission *admission.Ledger
	queue     *orderqueue.Queue
	store     *stock.Store
	opts      QueuedOptions
	log       *slog.Logger
	stop      context.CancelFunc
	writers   sync.WaitGroup
}

// QueuedOptions tune the queued strategy.
type QueuedOptions struct {
	Writers int           // writer loops on this instance (default 2)
	Batch   int           // orders one writer takes at a time (default 64)
	Idle    time.Duration // how long an idle writer waits for an order before asking again (default 1 s)
	Retry   time.Duration // how long an order that could not be decided waits before it comes back (default 250 ms)
	Publish time.Duration // budget of an order's publish, and again of its record (default 2 s)
	// MaxWaiting bounds the orders of a product accepted and not yet written or rejected, on
	// all instances: past it a new order is answered busy, so that none waits behind more than
	// this many (0: only the queue's own bound).
	MaxWaiting int
}

// NewQueued returns the queued strategy over hybrid's admission and section, and starts its
// writers on queue. Close stops them.
func NewQueued(h *Hybrid, queue *orderqueue.Queue, opts QueuedOptions, log *slog.Logger) *Queued {
	if opts.Writers <= 0 {
		opts.Writers = 2
	}
	if opts.Batch <= 0 {
		opts.Batch = 64
	}
	if opts.Idle <= 0 {
		opts.Idle = time.Second
	}
	if opts.Retry <= 0 {
		opts.Retry = 250 * time.Millisecond
	}
	if opts.Publish <= 0 {
		opts.Publish = 2 * time.Second
	}
	ctx, stop := context.WithCancel(context.Background())
	s := &Queued{hybrid: h, admission: h.admission, queue: queue, store: h.run.store, opts: opts, log: log, stop: stop}
	h.admission.Expect(s)
	timeout := 2*h.run.opts.Wait + 10*time.Second
	for range opts.Writers {
		s.writers.Go(func() { queue.Work(ctx, opts.Batch, opts.Idle, timeout, s.write) })
	}
	s.writers.Go(func() { s.resend(ctx) })
	return s
}

// Name implements Strategy.
func (s *Queued) Name() string { return "queued" }

// Close stops the writers, after the batches in hand.
func (s *Queued) Close() error {
	s.stop()
	s.writers.Wait()
	return nil
}

// PlaceOrder implements Strategy: the order it returns is queued (stock.Queued), not placed.
func (s *Queued) PlaceOrder(ctx context.Context, req stock.OrderRequest) (stock.Order, error) {
	req.OrderID = ulid.Make().String()
	req.Reservation = stock.Reservation{ID: req.OrderID}
	res, err := s.admission.AdmitWithin(ctx, req, s.opts.MaxWaiting)
	if errors.Is(err, admission.ErrRedisDown) {
		// No 202 can be promised without admission, and the database path is no fallback here:
		// it would sell units that admission holds for orders already answered 202, which the
		// writers would then reject. The buyer retries shortly, with its key.
		return stock.Order{}, stock.Busy(stock.BusyNoAdmission, fmt.Errorf("queued %s: admission cannot be asked, retry: %w", req.SKU, err))
	}
	if err != nil {
		return stock.Order{}, err
	}
	if err := s.keyUnused(ctx, req); err != nil {
		s.admission.GiveBack(ctx, req, fmt.Errorf("%w: %w", admission.ErrNotPlaced, err))
		return stock.Order{}, err
	}
	o := orderqueue.Order{OrderID: req.OrderID, SKU: req.SKU, UserID: req.UserID, Quantity: req.Quantity, Strategy: req.Strategy,
		IdempotencyKey: req.IdempotencyKey, Reservation: res.ID, AcceptedAt: time.Now().UTC().Truncate(time.Microsecond)}
	if h := s.hybrid.run.opts.Hooks.Admitted; h != nil {
		h(ctx, o.OrderID)
	}
	// Past admission the order's steps run to their end even if the client goes: a publish cut
	// off halfway would leave the buyer's reservation in doubt for a sweeper to settle.
	pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.opts.Publish)
	defer cancel()
	if _, err := s.queue.Publish(pctx, o); err != nil {
		if errors.Is(err, orderqueue.ErrFull) {
			err = stock.Busy(stock.BusyQueueFull, err)
			s.admission.GiveBack(pctx, req, err)
			return stock.Order{}, err
		}
		return s.inDoubt(ctx, req, o, res, err)
	}
	if h := s.hybrid.run.opts.Hooks.Published; h != nil {
		h(ctx, o.OrderID)
	}
	// The record has a budget of its own: a publish retried through a failover may have spent
	// the first. The message is out, so the 202 holds either way: without the record, whoever
	// records first decides — a writer, which then places the order, or a sweeper, which rejects
	// it (reason unavailable) and returns its units — and the buyer following the order sees
	// which. Answering unavailable instead would leave an order that may yet be placed behind an
	// answer that says nothing of it.
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.opts.Publish)
	defer cancel()
	defer s.admission.Done(res)
	rec, err := s.queue.Record(rctx, orderqueue.Record{Order: o, State: orderqueue.Queued})
	if err != nil {
		s.log.Debug("queued order not recorded; its writer records it, or a sweeper rejects it", "order", o.OrderID, "err", err)
	}
	if err == nil && neverAccepted(rec) {
		// A sweeper recorded it rejected first (this instance had stopped beating, frozen
		// between admission and here) and returned its units.
		return stock.Order{}, fmt.Errorf("order %s given up while this instance was frozen: %w", o.OrderID, stock.ErrUnavailable)
	}
	return s.accepted(rctx, req, o), nil
}

// keyUnused refuses an order whose Idempotency-Key a written order already carries, before it is
// accepted: the writer's insert would refuse it only after the 202. The service then answers that
// order (a replay) or idempotency_conflict (another buyer's key). Only admitted orders pay the
// read, so the crowd that admission turns away costs none. A database that cannot answer does not
// stop the sale: the writer's unique key still decides (refusal).
func (s *Queued) keyUnused(ctx context.Context, req stock.OrderRequest) error {
	if req.IdempotencyKey == "" {
		return nil
	}
	prior, err := s.store.OrderByIdempotencyKey(ctx, req.IdempotencyKey)
	if err != nil {
		if !errors.Is(err, stock.ErrNotFound) {
			s.log.Debug("idempotency key not checked before the 202; the writer's insert decides", "key", req.IdempotencyKey, "err", err)
		}
		return nil
	}
	return fmt.Errorf("key %q already used by order %s: %w", req.IdempotencyKey, prior.OrderID, stock.ErrDuplicateRequest)
}

// accepted hands the reservation of an order whose message is out over to the queue, and is the
// order the buyer's 202 answers.
func (s *Queued) accepted(ctx context.Context, req stock.OrderRequest, o orderqueue.Order) stock.Order {
	if err := s.admission.HandOver(ctx, req.SKU, []stock.OrderRequest{req}); err != nil {
		s.log.Debug("reservation not handed over to the queue; the sweeper does it", "order", o.OrderID, "err", err)
	}
	return queuedOrder(o)
}

// inDoubt answers an order whose publish was not answered within its budget: the message may
// have landed, and a writer may place it. The first record decides, here as for the sweeper:
// the order is recorded rejected (reason unavailable) before the buyer hears 503, so that no
// writer places an order behind that answer, and its units go back at once; if a writer
// recorded it first, the message did land and the answer is the 202 after all. Only a record
// that cannot be written either leaves the reservation in doubt, for the sweeper, which asks the
// queue the same question once it answers.
func (s *Queued) inDoubt(ctx context.Context, req stock.OrderRequest, o orderqueue.Order, res stock.Reservation, published error) (stock.Order, error) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.opts.Publish)
	defer cancel()
	unavailable := fmt.Errorf("%w: %w", stock.ErrUnavailable, published)
	rec, err := s.queue.Record(rctx, orderqueue.Record{Order: o, State: orderqueue.Rejected, Reason: givenUp})
	switch {
	case err != nil:
		s.admission.GiveBack(rctx, req, unavailable) // not definite: in doubt, for the sweeper
		return stock.Order{}, unavailable
	case neverAccepted(rec):
		s.admission.GiveBack(rctx, req, fmt.Errorf("%w: %w", admission.ErrNotPlaced, unavailable))
		return stock.Order{}, unavailable
	}
	defer s.admission.Done(res)
	return s.accepted(rctx, req, o), nil
}

// givenUp is the reason of an order rejected before any writer took it — by a sweeper, or by
// its publisher in doubt — so that none ever will: the record of an order never accepted.
// Writers never reject for it (refusal).
var givenUp = stock.Code(stock.ErrUnavailable)

// neverAccepted reports whether the record that stands for an order says it was never accepted:
// given up before any writer took it. Any other record — queued, placed, or a writer's rejection
// — means a writer took or will take its message: the order was accepted, and its record ends it
// (TestQueuedRecordedFirst).
func neverAccepted(rec orderqueue.Record) bool {
	switch {
	case planted.On(planted.AnyRejectionGivenUp):
		return rec.State == orderqueue.Rejected
	case planted.On(planted.NoneGivenUp):
		return false
	}
	return rec.State == orderqueue.Rejected && rec.Reason == givenUp
}

// queuedOrder is the order a queued record stands for.
func queuedOrder(o orderqueue.Order) stock.Order {
	return stock.Order{OrderID: o.OrderID, SKU: o.SKU, UserID: o.UserID, Quantity: o.Quantity, Strategy: o.Strategy,
		IdempotencyKey: o.IdempotencyKey, CreatedAt: o.AcceptedAt, Status: stock.Queued,
		RequestHash: request(o).Fingerprint()}
}

// request is the order request a message carries.
func request(o orderqueue.Order) stock.OrderRequest {
	return stock.OrderRequest{SKU: o.SKU, UserID: o.UserID, Quantity: o.Quantity, Strategy: o.Strategy,
		IdempotencyKey: o.IdempotencyKey, OrderID: o.OrderID, Reservation: stock.Reservation{ID: o.Reservation}}
}

// held is a delivery this writer holds, with its order's record as it claimed it.
type held struct {
	*orderqueue.Delivery
	claimed orderqueue.Claimed
}

// queueLanes bounds a batch's requests to the queue in flight at once: they are independent,
// and one connection carries them side by side, so a batch waits about one round trip per
// queueLanes orders instead of one per order.
const queueLanes = 16

// eachOrder runs f over hs, queueLanes at a time, and waits for all of them.
func eachOrder(hs []held, f func(i int, h held)) {
	var g errgroup.Group
	g.SetLimit(queueLanes)
	for i, h := range hs {
		g.Go(func() error {
			f(i, h)
			return nil
		})
	}
	_ = g.Wait()
}

// write is one writer's batch of one product (steps 3 and 4).
func (s *Queued) write(ctx context.Context, b orderqueue.Batch) {
	hs := make([]held, len(b.Deliveries))
	for i, d := range b.Deliveries {
		hs[i].Delivery = d
	}
	kept := make([]bool, len(hs))
	eachOrder(hs, func(i int, h held) {
		c, err := s.queue.Claim(ctx, h.Order)
		switch {
		case err != nil:
			s.retry(h.Delivery, err)
		case c.State == orderqueue.Rejected && !planted.On(planted.UncheckedWriter):
			// A sweeper was first, or a writer rejected it and stopped before its ack: the
			// give-back is by reservation id, so a second one returns nothing.
			s.admission.GiveBack(ctx, request(h.Order), fmt.Errorf("order rejected: %w", admission.ErrNotPlaced))
			_ = h.Ack()
		default:
			hs[i].claimed, kept[i] = c, true
		}
	})
	var todo []held // in the order the queue took them
	for i, h := range hs {
		if kept[i] {
			todo = append(todo, h)
		}
	}
	todo = s.ackPlaced(ctx, b.SKU, todo)
	if len(todo) == 0 {
		return
	}
	reqs := make([]stock.OrderRequest, len(todo))
	for i, h := range todo {
		reqs[i] = request(h.Order)
	}
	placed := s.hybrid.section(ctx, b.SKU, func() []stock.OrderRequest { return reqs })
	var ok, refused []held
	refusals := map[string]error{}
	for i, p := range placed {
		if errors.Is(p.Err, stock.ErrDuplicateRequest) {
			// Another order holds its key (both were accepted while neither was written): a
			// refusal for good, or the order would come back for ever.
			p.Err = fmt.Errorf("%w: %w", stock.ErrIdempotencyConflict, p.Err)
		}
		switch {
		case p.Err == nil:
			ok = append(ok, todo[i])
		case refusal(p.Err):
			refused = append(refused, todo[i])
			refusals[todo[i].Order.OrderID] = p.Err
		default:
			s.retry(todo[i].Delivery, p.Err)
		}
	}
	eachOrder(ok, func(_ int, h held) { s.finish(ctx, h, orderqueue.Placed, nil) })
	// A refusal may be about the order itself: another writer placed it meanwhile (its
	// AckWait passed while it committed), and this one found its buyer holding it.
	eachOrder(s.ackPlaced(ctx, b.SKU, refused), func(_ int, h held) {
		s.finish(ctx, h, orderqueue.Rejected, refusals[h.Order.OrderID])
	})
}

// ackPlaced finishes and acks the deliveries whose orders the database has (placed by a writer
// that stopped before its ack, or by another one) and returns the others; all of them are
// handed back when the database cannot say.
func (s *Queued) ackPlaced(ctx context.Context, sku string, hs []held) []held {
	if len(hs) == 0 {
		return nil
	}
	ids := make([]string, len(hs))
	for i, h := range hs {
		ids[i] = h.Order.OrderID
	}
	written, err := s.store.Placed(ctx, ids)
	if err != nil {
		for _, h := range hs {
			s.retry(h.Delivery, err)
		}
		return nil
	}
	var rest, done []held
	for _, h := range hs {
		if written[h.Order.OrderID] {
			done = append(done, h)
		} else {
			rest = append(rest, h)
		}
	}
	eachOrder(done, func(_ int, h held) { s.finish(ctx, h, orderqueue.Placed, nil) })
	reqs := make([]stock.OrderRequest, len(done))
	for i, h := range done {
		reqs[i] = request(h.Order)
	}
	s.admission.Settle(ctx, sku, reqs, make([]stock.Placed, len(done)))
	return rest
}

// finish writes the order's final record, gives a rejected order's units back, and acks it.
// A record that stands otherwise (the other final state, written first) is what the buyer was
// told: it is kept, and the reservation follows it.
func (s *Queued) finish(ctx context.Context, h held, state orderqueue.State, why error) {
	r := orderqueue.Record{Order: h.Order, State: state}
	if why != nil {
		r.Reason = stock.Code(why)
	}
	rec, err := s.queue.Finish(ctx, h.claimed, r)
	if err != nil {
		s.retry(h.Delivery, err)
		return
	}
	switch {
	case state == orderqueue.Rejected && rec.State == orderqueue.Rejected:
		s.admission.GiveBack(ctx, request(h.Order), why)
	case rec.State != state:
		// Cannot happen while every writer records an order queued before it places it and
		// reads the database before it rejects it; said loudly, since the buyer's answer and the
		// database now disagree.
		s.log.Error("queued order: its record and the database disagree", "order", h.Order.OrderID,
			"record", rec.State, "database", state)
	}
	_ = h.Ack()
}

// resend puts back on the queue, every AckWait, the orders of this instance's recent products
// that hold a reservation and are still recorded queued two AckWaits after their 202 while the
// queue holds no message of their product old enough to be theirs: their message was lost — a
// stream leader killed as it took the message (TestQueuedClusterLosesANode saw one), a server
// that lost its last writes. Each order is sent again at most once per two AckWaits.
func (s *Queued) resend(ctx context.Context) {
	every := s.queue.AckWait()
	tick := time.NewTicker(every)
	defer tick.Stop()
	sent := map[string]time.Time{}
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		for _, sku := range s.admission.Recent(admission.RecentWindow) {
			if err := s.resendLost(ctx, sku, 2*every, sent); err != nil {
				s.log.Debug("queued orders not checked for lost messages", "sku", sku, "err", err)
			}
		}
		for id, at := range sent {
			if time.Since(at) > 10*every {
				delete(sent, id)
			}
		}
	}
}

// resendLost sends again the lost messages of sku's orders older than after (see resend).
func (s *Queued) resendLost(ctx context.Context, sku string, after time.Duration, sent map[string]time.Time) error {
	reservations, err := s.admission.Reservations(ctx, sku)
	if err != nil {
		return err
	}
	var backlog *orderqueue.Backlog
	for _, h := range reservations {
		id, err := ulid.ParseStrict(h.ID)
		if err != nil {
			continue
		}
		accepted := ulid.Time(id.Time())
		if time.Since(accepted) < after || time.Since(sent[h.ID]) < after {
			continue
		}
		if backlog == nil {
			b, err := s.queue.BacklogOf(ctx, sku)
			if err != nil {
				return err
			}
			backlog = &b
		}
		// A message stored no later than the order's publish could have taken is perhaps its own.
		if backlog.Depth > 0 && !backlog.Oldest.After(accepted.Add(s.opts.Publish)) {
			continue
		}
		rec, err := s.queue.Get(ctx, h.ID)
		if err != nil || rec.State != orderqueue.Queued {
			continue
		}
		sent[h.ID] = time.Now()
		if dup, err := s.queue.Resend(ctx, rec.Order); err == nil && !dup {
			s.log.Warn("queued order sent again: the queue had lost its message", "order", h.ID, "sku", sku)
		}
	}
	return nil
}

// retry hands a delivery back to the queue: its order was not decided.
func (s *Queued) retry(d *orderqueue.Delivery, err error) {
	s.log.Debug("queued order not decided; it comes back", "order", d.Order.OrderID, "err", err)
	_ = d.Nak(s.opts.Retry)
}

// refusal reports whether the database decided against the order — for good, whoever asks
// again: sold out, a buyer who holds an order, outside the sale window, a product gone. Busy and
// unavailable decide nothing: the order is tried again.
func refusal(err error) bool {
	switch stock.Code(err) {
	case "busy", "unavailable", "internal", "canceled":
		return false
	}
	return true
}

// Pending implements admission.Pending, for the sweeper: a reservation whose order was recorded
// queued is left to its writer (its message went out); one with no record is recorded rejected
// now, so that no writer ever places it, and its units may go back. Reservations that are not
// the queued strategy's (not an order id) have no message: they are not asked about.
func (s *Queued) Pending(ctx context.Context, sku string, held []admission.Held) (map[string]bool, error) {
	writable := map[string]bool{}
	for _, h := range held {
		if _, err := ulid.ParseStrict(h.ID); err != nil {
			continue
		}
		rec, err := s.queue.Record(ctx, orderqueue.Record{
			Order: orderqueue.Order{OrderID: h.ID, SKU: sku, UserID: h.User, Quantity: h.Units, Strategy: s.Name(),
				IdempotencyKey: h.IdempotencyKey, Reservation: h.ID, AcceptedAt: time.Now().UTC()},
			State:  orderqueue.Rejected,
			Reason: givenUp,
		})
		if err != nil {
			return nil, err
		}
		writable[h.ID] = rec.State != orderqueue.Rejected
	}
	return writable, nil
}

// Order reads the record of an order: queued, rejected with its reason, or — placed — its row.
// stock.ErrNotFound when the queue has no record of it, stock.ErrUnavailable when the queue does
// not answer.
func (s *Queued) Order(ctx context.Context, orderID string) (stock.Order, error) {
	rec, err := s.queue.Get(ctx, orderID)
	return s.order(ctx, rec, err)
}

// WaitOrder is Order once the order's record is final, or as it stands when wait passes.
func (s *Queued) WaitOrder(ctx context.Context, orderID string, wait time.Duration) (stock.Order, error) {
	rec, err := s.queue.Wait(ctx, orderID, wait)
	return s.order(ctx, rec, err)
}

// WaitRecorded is WaitOrder for an order the queue has a record of: stock.ErrNotFound at once
// when it has none.
func (s *Queued) WaitRecorded(ctx context.Context, orderID string, wait time.Duration) (stock.Order, error) {
	rec, err := s.queue.WaitRecorded(ctx, orderID, wait)
	return s.order(ctx, rec, err)
}

func (s *Queued) order(ctx context.Context, rec orderqueue.Record, err error) (stock.Order, error) {
	if errors.Is(err, orderqueue.ErrNotFound) {
		return stock.Order{}, fmt.Errorf("%w: %w", stock.ErrNotFound, err)
	}
	if err != nil {
		return stock.Order{}, fmt.Errorf("%w: %w", stock.ErrUnavailable, err)
	}
	switch rec.State {
	case orderqueue.Placed:
		return s.store.Order(ctx, rec.OrderID)
	case orderqueue.Rejected:
		o := queuedOrder(rec.Order)
		o.Status, o.Reason = stock.Rejected, rec.Reason
		return o, nil
	}
	// Still queued, as the record stands: a writer may have committed it and stopped before its
	// placed record (the message comes back to another within AckWait), and then the row is
	// the answer.
	if o, err := s.store.Order(ctx, rec.OrderID); err == nil {
		return o, nil
	}
	return queuedOrder(rec.Order), nil
}

// Replay finds the order of req's Idempotency-Key while it is queued: the buyer's reservation
// names the key and the order (its id), and the order's record says where it is. A queued or
// placed order is the answer; stock.ErrNotFound when the key holds no queued order.
func (s *Queued) Replay(ctx context.Context, req stock.OrderRequest) (stock.Order, error) {
	held, err := s.admission.Held(ctx, req.SKU, req.UserID)
	if err != nil {
		return stock.Order{}, err
	}
	if held.IdempotencyKey != req.IdempotencyKey {
		return stock.Order{}, fmt.Errorf("key %q: no queued order: %w", req.IdempotencyKey, stock.ErrNotFound)
	}
	o, err := s.Order(ctx, held.ID)
	if err == nil && o.Status == stock.Rejected {
		return stock.Order{}, fmt.Errorf("key %q: order %s rejected: %w", req.IdempotencyKey, held.ID, stock.ErrNotFound)
	}
	if err == nil && o.RequestHash != req.Fingerprint() {
		return stock.Order{}, fmt.Errorf("key %q: %w", req.IdempotencyKey, stock.ErrIdempotencyConflict)
	}
	return o, err
}

// Backlog is how many of sku's orders are queued: accepted, not yet written.
func (s *Queued) Backlog(ctx context.Context, sku string) (int64, error) {
	b, err := s.queue.BacklogOf(ctx, sku)
	return int64(b.Depth), err
}
