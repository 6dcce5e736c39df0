package queued

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/oklog/ulid/v2"
	"github.com/segmentio/encoding/json"

	"github.com/flashsale/seckill/internal/admission"
	"github.com/flashsale/seckill/internal/orderqueue"
	"github.com/flashsale/seckill/internal/planted"
	"github.com/flashsale/seckill/internal/stock"
)

// Place implements Strategy: the request it returns is queued, not placed. It is one entry of its
// product's next batch, every line reserved under its id, so the batch's first record decides
// them all. Units held by batches in flight are decided within a publish: the request asks again
// in a later batch until its wait budget runs out, as admission.Ledger.Admit does.
func (s *Queued) Place(ctx context.Context, req stock.CheckoutRequest) (stock.Checkout, error) {
	// The bytes its order takes in a message: its ids, minted later, are of one length.
	o, _ := orderIn(orderqueue.NewBatch(""), req)
	data, _ := json.Marshal(o)
	subject, size := req.SKUs()[0], len(data)
	heldWait := s.opts.LockWait
	if planted.On(planted.HeldAtOnce) {
		heldWait = 0
	}
	start := time.Now()
	for pause := time.Millisecond; ; pause = min(2*pause, 16*time.Millisecond) {
		e := &entry{req: req, size: size, done: make(chan struct{})}
		if err := s.sending.Await(ctx, subject, e, e.done); err != nil {
			return stock.Checkout{}, err // no batch took it: nothing admitted
		}
		if stock.CauseOfBusy(e.err) != stock.BusyHeld || time.Since(start)+pause >= heldWait {
			return e.out, e.err
		}
		select {
		case <-ctx.Done():
			return e.out, e.err
		case <-time.After(pause/2 + rand.N(pause)):
		}
	}
}

// entry is one request waiting for its product's next batch, and then its answer.
type entry struct {
	req      stock.CheckoutRequest
	size     int                  // its order's bytes in a message
	order    orderqueue.Order     // as its batch carries it
	lines    []stock.OrderRequest // as admission reserves them
	out      stock.Checkout
	err      error
	answered bool
	done     chan struct{}
}

// answer tells the entry's buyer, once: later answers are ignored.
func (e *entry) answer(out stock.Checkout, err error) {
	if e.answered {
		return
	}
	e.out, e.err, e.answered = out, err, true
	close(e.done)
}

// orderIn is req as an order of batch b, with a fresh id minted in it, and its lines as admission
// reserves them: every line under that id.
func orderIn(b orderqueue.Batch, req stock.CheckoutRequest) (orderqueue.Order, []stock.OrderRequest) {
	id := b.NewID()
	lines := req.Admitted()
	for i := range lines {
		lines[i].OrderID, lines[i].Reservation = ulid.Make().String(), stock.Reservation{ID: id}
	}
	if req.Order {
		lines[0].OrderID = id
	}
	o := orderqueue.Order{OrderID: id, Checkout: !req.Order, SKU: lines[0].SKU, UserID: req.UserID, Strategy: req.Strategy,
		IdempotencyKey: req.IdempotencyKey, Reservation: id, AcceptedAt: time.Now().UTC().Truncate(time.Microsecond)}
	for _, l := range lines {
		o.Lines = append(o.Lines, orderqueue.Line{OrderID: l.OrderID, SKU: l.SKU, Quantity: l.Quantity})
	}
	return o, lines
}

// sendRound sends the requests of subject's product that arrived while its last batch was out,
// in messages of at most Options.BatchBytes. It runs on no buyer's context: a publish cut off
// halfway by a buyer who left would leave its batch's reservations in doubt.
func (s *Queued) sendRound(subject string, take func() []*entry) {
	es := take()
	for len(es) > 0 {
		n, size := 1, es[0].size
		for n < len(es) && size+es[n].size <= s.opts.BatchBytes {
			size += es[n].size
			n++
		}
		s.send(subject, es[:n])
		es = es[n:]
	}
}

// send takes the requests es, one batch, from admission to their answers: 202, or a refusal with
// their units given back or left in doubt for the sweeper. Every entry is answered by its end.
func (s *Queued) send(subject string, es []*entry) {
	defer func() {
		for _, e := range es {
			e.answer(stock.Checkout{}, fmt.Errorf("queued: request left unanswered: %w", stock.ErrUnavailable))
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), s.opts.Publish)
	defer cancel()
	b := orderqueue.NewBatch(subject)
	for _, e := range es {
		e.order, e.lines = orderIn(b, e.req)
	}
	es = s.keysUnused(ctx, s.admit(ctx, es))
	if len(es) == 0 {
		return
	}
	for _, e := range es {
		b.Orders = append(b.Orders, e.order)
	}
	if h := s.opts.Hooks.Admitted; h != nil {
		for _, e := range es {
			h(ctx, e.order.OrderID)
		}
	}
	if planted.On(planted.AcceptedUnstored) {
		s.answerAccepted(es)
	}
	s.publish(b, es)
}

// admit asks admission about each of es at once — those of one set of products go to Redis in
// one call — and answers those it did not take. Each asks once (AdmitOnce): a line whose units
// are held by another of the batch must not wait for them here, where they wait for it.
func (s *Queued) admit(ctx context.Context, es []*entry) []*entry {
	errs := make([]error, len(es))
	var wg sync.WaitGroup
	for i, e := range es {
		wg.Go(func() { _, errs[i] = s.admission.AdmitOnce(ctx, e.lines, s.opts.MaxWaiting) })
	}
	wg.Wait()
	var admitted []*entry
	for i, e := range es {
		err := errs[i]
		if err == nil {
			admitted = append(admitted, e)
			continue
		}
		if errors.Is(err, admission.ErrRedisDown) {
			// No 202 without admission, and the database path is no fallback: it would sell
			// units admission holds for orders already answered 202. The buyer retries.
			err = stock.Busy(stock.BusyNoAdmission, fmt.Errorf("queued: admission cannot be asked, retry: %w", err))
		}
		e.answer(stock.Checkout{}, err)
	}
	return admitted
}

// refuse gives back the units of es, for why (admission.Ledger.GiveBack), and answers each err.
func (s *Queued) refuse(ctx context.Context, es []*entry, why, err error) {
	for _, e := range es {
		s.admission.GiveBack(ctx, e.lines, why)
		e.answer(stock.Checkout{}, err)
	}
}

// publish sends batch b of the admitted requests es, records it queued, hands their reservations
// to the queue and answers 202. The 202 waits for both writes: it promises the order survives a
// crash of the queue and ends placed or refused, and a batch with no record may yet be given up.
func (s *Queued) publish(b orderqueue.Batch, es []*entry) {
	pctx, cancel := context.WithTimeout(context.Background(), s.opts.Publish)
	defer cancel()
	if _, err := s.queue.Publish(pctx, b); err != nil {
		if errors.Is(err, orderqueue.ErrFull) {
			err = stock.Busy(stock.BusyQueueFull, err)
			s.refuse(pctx, es, err, err)
			return
		}
		s.inDoubt(b, es, err)
		return
	}
	if h := s.opts.Hooks.Published; h != nil {
		for _, e := range es {
			h(pctx, e.order.OrderID)
		}
	}
	// The record has a budget of its own: a publish retried through a failover may have spent
	// the first. Without it the batch is in doubt, as a publish not answered is.
	rctx, cancel := context.WithTimeout(context.Background(), s.opts.Publish)
	defer cancel()
	rec, err := s.queue.Record(rctx, orderqueue.BatchRecord{Batch: b, State: orderqueue.Queued})
	if err != nil && !planted.On(planted.UnrecordedAccepted) {
		s.inDoubt(b, es, err)
		return
	}
	if err == nil && neverAccepted(rec) {
		// A sweeper recorded it given up first (this instance froze) and returned the units of
		// its product. Giving back every line returns the others'; a second returns nothing.
		unavailable := fmt.Errorf("batch %s given up while this instance was frozen: %w", b.ID, stock.ErrUnavailable)
		s.refuse(rctx, es, fmt.Errorf("%w: %w", admission.ErrNotPlaced, unavailable), unavailable)
		return
	}
	// Queued, perhaps with orders a writer rejected already: they were accepted, and their
	// followers read how they ended.
	s.accept(rctx, b, es)
}

// answerAccepted answers each of es 202: its request, queued.
func (s *Queued) answerAccepted(es []*entry) {
	for _, e := range es {
		e.answer(queuedCheckout(e.order, stock.Queued), nil)
	}
}

// accept hands the reservations of batch b, whose message and record are out, over to the queue,
// one call per product, then answers es 202 and ends their tracking here: the record decides them.
func (s *Queued) accept(ctx context.Context, b orderqueue.Batch, es []*entry) {
	bySKU := map[string][]stock.OrderRequest{}
	for _, o := range b.Orders {
		for _, line := range requestOf(o).Lines {
			bySKU[line.SKU] = append(bySKU[line.SKU], line)
		}
	}
	for sku, lines := range bySKU {
		if err := s.admission.HandOver(ctx, sku, lines); err != nil {
			s.log.Debug("reservations not handed over to the queue; the sweeper does it", "batch", b.ID, "sku", sku, "err", err)
		}
	}
	s.answerAccepted(es)
	for _, e := range es {
		s.admission.Done(stock.Reservation{ID: e.order.Reservation})
	}
}

// inDoubt answers a batch whose publish or record went unanswered: its message may have landed.
// The first record decides: recorded given up before its buyers hear 503, so that no writer
// places an order behind that answer, its units go back; recorded first by a writer, it is 202.
// A failed record leaves the units in doubt, for the sweeper.
func (s *Queued) inDoubt(b orderqueue.Batch, es []*entry, published error) {
	rctx, cancel := context.WithTimeout(context.Background(), s.opts.Publish)
	defer cancel()
	unavailable := fmt.Errorf("%w: %w", stock.ErrUnavailable, published)
	rec, err := s.queue.Record(rctx, orderqueue.BatchRecord{Batch: b, State: orderqueue.Rejected, Reason: givenUp})
	switch {
	case err != nil:
		s.refuse(rctx, es, unavailable, unavailable) // not definite: in doubt, for the sweeper
		return
	case neverAccepted(rec):
		s.refuse(rctx, es, fmt.Errorf("%w: %w", admission.ErrNotPlaced, unavailable), unavailable)
		return
	}
	s.accept(rctx, b, es)
}
