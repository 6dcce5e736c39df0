package queued

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/flashsale/seckill/internal/admission"
	"github.com/flashsale/seckill/internal/orderqueue"
	"github.com/flashsale/seckill/internal/planted"
	"github.com/flashsale/seckill/internal/stock"
)

// Place implements Strategy: the request it returns is queued (stock.Queued), not placed. An
// order and a checkout take the same steps, as one entry of their product's next batch: admission
// of every line or none, each line's reservation under the request's id (so that its batch's
// first record decides for every line), one message and one record for the batch, 202. Its writer
// places every line in one transaction, or rejects the request whole.
//
// A request whose units are held by orders of batches in flight — this instance's or another's —
// asks again in a later batch until its wait budget runs out, as admission's own wait does
// (admission.Ledger.Admit): the units are decided within a publish, and given back if it fails.
func (s *Queued) Place(ctx context.Context, req stock.CheckoutRequest) (stock.Checkout, error) {
	subject, size := req.SKUs()[0], s.size(req)
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

// size is about the bytes req's order takes in a message: its ids are minted later, all of one
// length.
func (s *Queued) size(req stock.CheckoutRequest) int {
	o, _ := orderIn(orderqueue.NewBatch(""), req)
	data, _ := json.Marshal(o)
	return len(data)
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

// sendRound sends the requests of subject's product that arrived while its last batch was out
// (group commit, step 2): up to Options.Batch of them, in one message of at most
// Options.BatchBytes — or several, one after another, when they weigh more. It runs on the
// product's drainer (keyqueue), on no buyer's context: past admission a batch's steps run to
// their end even if its buyers go, or a publish cut off halfway would leave their reservations
// in doubt for a sweeper to settle.
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

// send takes the requests es from their admission to their 202, as one batch: nil once it is
// accepted; otherwise each buyer's answer, every line's units given back or left in doubt for
// the sweeper. Every entry is answered by its end.
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
		if errs[i] != nil {
			e.answer(stock.Checkout{}, admissionFailed(errs[i]))
			continue
		}
		admitted = append(admitted, e)
	}
	return admitted
}

// admissionFailed is the answer to a request that admission did not take.
func admissionFailed(err error) error {
	if errors.Is(err, admission.ErrRedisDown) {
		// No 202 can be promised without admission, and the database path is no fallback here:
		// it would sell units that admission holds for orders already answered 202, which the
		// writers would then reject. The buyer retries shortly, with its key.
		return stock.Busy(stock.BusyNoAdmission, fmt.Errorf("queued: admission cannot be asked, retry: %w", err))
	}
	return err
}

// keysUnused refuses, and gives back, the admitted requests whose Idempotency-Key a written order
// already carries (keyUnused), and returns the others.
func (s *Queued) keysUnused(ctx context.Context, es []*entry) []*entry {
	errs := make([]error, len(es))
	var wg sync.WaitGroup
	for i, e := range es {
		if e.req.IdempotencyKey != "" {
			wg.Go(func() { errs[i] = s.keyUnused(ctx, e.req.IdempotencyKey) })
		}
	}
	wg.Wait()
	var unused []*entry
	for i, e := range es {
		if errs[i] != nil {
			s.admission.GiveBack(ctx, e.lines, fmt.Errorf("%w: %w", admission.ErrNotPlaced, errs[i]))
			e.answer(stock.Checkout{}, errs[i])
			continue
		}
		unused = append(unused, e)
	}
	return unused
}

// publish sends batch b of the admitted requests es — one synced write for all of them — then
// records it queued, hands their reservations over to the queue and answers their 202s. The 202
// comes after both writes returned: a 202 is a promise that the order survives the queue's crash
// and ends placed or refused by the stock, and a batch with no record may yet be given up by a
// sweeper (reason unavailable).
func (s *Queued) publish(b orderqueue.Batch, es []*entry) {
	pctx, cancel := context.WithTimeout(context.Background(), s.opts.Publish)
	defer cancel()
	if _, err := s.queue.Publish(pctx, b); err != nil {
		if errors.Is(err, orderqueue.ErrFull) {
			err = stock.Busy(stock.BusyQueueFull, err)
			for _, e := range es {
				s.admission.GiveBack(pctx, e.lines, err)
				e.answer(stock.Checkout{}, err)
			}
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
	defer s.done(es)
	if err == nil && neverAccepted(rec) {
		// A sweeper recorded it given up first (this instance had stopped beating, frozen
		// between admission and here) and returned its units — of the product it swept: the
		// give-back of every line returns the others' (a second give-back returns nothing).
		unavailable := fmt.Errorf("batch %s given up while this instance was frozen: %w", b.ID, stock.ErrUnavailable)
		for _, e := range es {
			s.admission.GiveBack(rctx, e.lines, fmt.Errorf("%w: %w", admission.ErrNotPlaced, unavailable))
			e.answer(stock.Checkout{}, unavailable)
		}
		return
	}
	// Queued, perhaps with orders a writer rejected already: they were accepted, and their
	// followers read how they ended.
	s.accepted(rctx, b)
	s.answerAccepted(es)
}

// answerAccepted answers each of es 202: its request, queued.
func (s *Queued) answerAccepted(es []*entry) {
	for _, e := range es {
		e.answer(queuedCheckout(e.order, stock.Queued), nil)
	}
}

// done ends the tracking of es's reservations here: their batch's record decides them now.
func (s *Queued) done(es []*entry) {
	for _, e := range es {
		s.admission.Done(stock.Reservation{ID: e.order.Reservation})
	}
}

// accepted hands the reservations of a batch whose message and record are out over to the
// queue, one call per product: its 202s may go.
func (s *Queued) accepted(ctx context.Context, b orderqueue.Batch) {
	bySKU := map[string][]stock.OrderRequest{}
	var skus []string
	for _, o := range b.Orders {
		for _, line := range requestOf(o).Lines {
			if _, ok := bySKU[line.SKU]; !ok {
				skus = append(skus, line.SKU)
			}
			bySKU[line.SKU] = append(bySKU[line.SKU], line)
		}
	}
	for _, sku := range skus {
		if err := s.admission.HandOver(ctx, sku, bySKU[sku]); err != nil {
			s.log.Debug("reservations not handed over to the queue; the sweeper does it", "batch", b.ID, "sku", sku, "err", err)
		}
	}
}

// inDoubt answers a batch whose publish was not answered within its budget, or whose record
// could not be written after it: the message may have landed, and a writer may place its orders.
// The first record decides, here as for the sweeper: the batch is recorded given up (reason
// unavailable) before its buyers hear 503, so that no writer places an order behind that answer,
// and its units go back at once; if a writer recorded it first, the message did land and the
// answer is the 202 after all. Only a record that cannot be written either leaves the
// reservations in doubt, for the sweeper, which asks the queue the same question once it
// answers.
func (s *Queued) inDoubt(b orderqueue.Batch, es []*entry, published error) {
	rctx, cancel := context.WithTimeout(context.Background(), s.opts.Publish)
	defer cancel()
	unavailable := fmt.Errorf("%w: %w", stock.ErrUnavailable, published)
	rec, err := s.queue.Record(rctx, orderqueue.BatchRecord{Batch: b, State: orderqueue.Rejected, Reason: givenUp})
	switch {
	case err != nil:
		for _, e := range es {
			s.admission.GiveBack(rctx, e.lines, unavailable) // not definite: in doubt, for the sweeper
			e.answer(stock.Checkout{}, unavailable)
		}
		return
	case neverAccepted(rec):
		for _, e := range es {
			s.admission.GiveBack(rctx, e.lines, fmt.Errorf("%w: %w", admission.ErrNotPlaced, unavailable))
			e.answer(stock.Checkout{}, unavailable)
		}
		return
	}
	defer s.done(es)
	s.accepted(rctx, b)
	s.answerAccepted(es)
}
