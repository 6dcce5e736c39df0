package queued

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/flashsale/seckill/internal/admission"
	"github.com/flashsale/seckill/internal/orderqueue"
	"github.com/flashsale/seckill/internal/planted"
	"github.com/flashsale/seckill/internal/stock"
)

// Place implements Strategy: the request it returns is queued (stock.Queued), not placed. An
// order and a checkout take the same steps: admission of every line or none, each line's
// reservation under the request's id (so that the first record of that id decides for every
// line), one message, one record, 202. Its writer places every line in one transaction, or
// rejects the request whole.
func (s *Queued) Place(ctx context.Context, req stock.CheckoutRequest) (stock.Checkout, error) {
	id := ulid.Make().String()
	lines := req.Admitted()
	for i := range lines {
		lines[i].OrderID, lines[i].Reservation = ulid.Make().String(), stock.Reservation{ID: id}
	}
	o := orderqueue.Order{OrderID: id, SKU: lines[0].SKU, UserID: req.UserID, Strategy: req.Strategy,
		IdempotencyKey: req.IdempotencyKey, Reservation: id, AcceptedAt: time.Now().UTC().Truncate(time.Microsecond)}
	if req.Order {
		lines[0].OrderID, o.Quantity = id, lines[0].Quantity
	} else {
		for _, l := range lines {
			o.Lines = append(o.Lines, orderqueue.Line{OrderID: l.OrderID, SKU: l.SKU, Quantity: l.Quantity})
		}
	}
	if _, err := s.admission.Admit(ctx, lines, s.opts.MaxWaiting); err != nil {
		return stock.Checkout{}, admissionFailed(err)
	}
	if err := s.send(ctx, o); err != nil {
		return stock.Checkout{}, err
	}
	return queuedCheckout(o, stock.Queued), nil
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

// send takes an admitted order, or checkout, from its admission to its 202 (step 2): nil once
// it is accepted; otherwise the buyer's answer, every line's units given back or left in doubt
// for the sweeper.
func (s *Queued) send(ctx context.Context, o orderqueue.Order) error {
	lines := requests(o)
	if err := s.keyUnused(ctx, o.IdempotencyKey); err != nil {
		s.admission.GiveBack(ctx, lines, fmt.Errorf("%w: %w", admission.ErrNotPlaced, err))
		return err
	}
	if h := s.opts.Hooks.Admitted; h != nil {
		h(ctx, o.OrderID)
	}
	// Past admission the order's steps run to their end even if the client goes: a publish cut
	// off halfway would leave the buyer's reservation in doubt for a sweeper to settle.
	pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.opts.Publish)
	defer cancel()
	if _, err := s.queue.Publish(pctx, o); err != nil {
		if errors.Is(err, orderqueue.ErrFull) {
			err = stock.Busy(stock.BusyQueueFull, err)
			s.admission.GiveBack(pctx, lines, err)
			return err
		}
		return s.inDoubt(ctx, o, err)
	}
	if h := s.opts.Hooks.Published; h != nil {
		h(ctx, o.OrderID)
	}
	// The record has a budget of its own: a publish retried through a failover may have spent
	// the first. No 202 without it: a 202 is a promise that the order ends placed or refused by
	// the stock, and an order with no record may yet be given up by a sweeper (reason
	// unavailable). Without it the order is in doubt, as a publish not answered is.
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.opts.Publish)
	defer cancel()
	rec, err := s.queue.Record(rctx, orderqueue.Record{Order: o, State: orderqueue.Queued})
	if err != nil && !planted.On(planted.UnrecordedAccepted) {
		return s.inDoubt(ctx, o, err)
	}
	defer s.admission.Done(stock.Reservation{ID: o.Reservation})
	if err == nil && neverAccepted(rec) {
		// A sweeper recorded it rejected first (this instance had stopped beating, frozen
		// between admission and here) and returned its units — of the product it swept: the
		// give-back of every line returns the others' (a second give-back returns nothing).
		unavailable := fmt.Errorf("order %s given up while this instance was frozen: %w", o.OrderID, stock.ErrUnavailable)
		s.admission.GiveBack(rctx, lines, fmt.Errorf("%w: %w", admission.ErrNotPlaced, unavailable))
		return unavailable
	}
	s.accepted(rctx, o)
	return nil
}

// accepted hands the reservations of an order whose message is out over to the queue: the
// order's 202 may go.
func (s *Queued) accepted(ctx context.Context, o orderqueue.Order) {
	for _, line := range requests(o) {
		if err := s.admission.HandOver(ctx, line.SKU, []stock.OrderRequest{line}); err != nil {
			s.log.Debug("reservation not handed over to the queue; the sweeper does it", "order", o.OrderID, "sku", line.SKU, "err", err)
		}
	}
}

// inDoubt answers an order whose publish was not answered within its budget, or whose record
// could not be written after it: the message may have landed, and a writer may place it. The
// first record decides, here as for the sweeper: the order is recorded rejected (reason
// unavailable) before the buyer hears 503, so that no writer places an order behind that
// answer, and its units go back at once; if a writer recorded it first, the message did land
// and the answer is the 202 after all (nil). Only a record that cannot be written either leaves
// the reservations in doubt, for the sweeper, which asks the queue the same question once it
// answers.
func (s *Queued) inDoubt(ctx context.Context, o orderqueue.Order, published error) error {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.opts.Publish)
	defer cancel()
	lines := requests(o)
	unavailable := fmt.Errorf("%w: %w", stock.ErrUnavailable, published)
	rec, err := s.queue.Record(rctx, orderqueue.Record{Order: o, State: orderqueue.Rejected, Reason: givenUp})
	switch {
	case err != nil:
		s.admission.GiveBack(rctx, lines, unavailable) // not definite: in doubt, for the sweeper
		return unavailable
	case neverAccepted(rec):
		s.admission.GiveBack(rctx, lines, fmt.Errorf("%w: %w", admission.ErrNotPlaced, unavailable))
		return unavailable
	}
	defer s.admission.Done(stock.Reservation{ID: o.Reservation})
	s.accepted(rctx, o)
	return nil
}
