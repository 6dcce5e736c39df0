package queued

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/flashsale/seckill/internal/orderqueue"
	"github.com/flashsale/seckill/internal/stock"
)

// PlaceCheckout implements lockstrategy.Strategy: the checkout it returns is queued, not
// placed. It takes an order's steps as one: admission of every line or none, each line's
// reservation under the checkout's id (so that the first record of that id decides for every
// line, as for an order), one message, one record, 202. Its writer places every line in one
// transaction, or rejects the checkout whole.
func (s *Queued) PlaceCheckout(ctx context.Context, req stock.CheckoutRequest) (stock.Checkout, error) {
	id := ulid.Make().String()
	lines := req.Admitted()
	for i := range lines {
		lines[i].OrderID, lines[i].Reservation = ulid.Make().String(), stock.Reservation{ID: id}
	}
	if _, err := s.admission.Admit(ctx, lines, s.opts.MaxWaiting); err != nil {
		return stock.Checkout{}, admissionFailed("checkout", err)
	}
	o := orderqueue.Order{OrderID: id, SKU: lines[0].SKU, UserID: req.UserID, Strategy: req.Strategy,
		IdempotencyKey: req.IdempotencyKey, Reservation: id, AcceptedAt: time.Now().UTC().Truncate(time.Microsecond)}
	for _, l := range lines {
		o.Lines = append(o.Lines, orderqueue.Line{OrderID: l.OrderID, SKU: l.SKU, Quantity: l.Quantity})
	}
	if err := s.send(ctx, o); err != nil {
		return stock.Checkout{}, err
	}
	return queuedCheckout(o, stock.Queued), nil
}

// Checkout reads the record of a checkout: queued, rejected with its reason, or — placed — its
// rows. stock.ErrNotFound when the queue has no record of it (or it is an order's),
// stock.ErrUnavailable when the queue does not answer.
func (s *Queued) Checkout(ctx context.Context, checkoutID string) (stock.Checkout, error) {
	rec, err := s.queue.Get(ctx, checkoutID)
	return s.checkout(ctx, rec, err)
}

// WaitCheckout is Checkout once the checkout ended, or as it stands when wait passes;
// stock.ErrNotFound at once when the queue has no record of it (another strategy's checkout).
func (s *Queued) WaitCheckout(ctx context.Context, checkoutID string, wait time.Duration) (stock.Checkout, error) {
	rec, err := s.queue.WaitRecorded(ctx, checkoutID, wait)
	return s.checkout(ctx, rec, err)
}

func (s *Queued) checkout(ctx context.Context, rec orderqueue.Record, err error) (stock.Checkout, error) {
	switch {
	case errors.Is(err, orderqueue.ErrNotFound):
		return stock.Checkout{}, fmt.Errorf("%w: %w", stock.ErrNotFound, err)
	case err != nil:
		return stock.Checkout{}, fmt.Errorf("%w: %w", stock.ErrUnavailable, err)
	case len(rec.Lines) == 0 && rec.State != orderqueue.Rejected:
		return stock.Checkout{}, fmt.Errorf("%s is an order, not a checkout: %w", rec.OrderID, stock.ErrNotFound)
	case rec.State == orderqueue.Placed && rec.Row != nil:
		// As its writer placed it, a moment ago (orderqueue.Queue.Wait).
		co := queuedCheckout(rec.Order, stock.Status(rec.Row.Status))
		co.ExpiresAt, co.CreatedAt = rec.Row.ExpiresAt, rec.Row.CreatedAt
		for i := range co.Lines {
			co.Lines[i].ExpiresAt, co.Lines[i].CreatedAt = co.ExpiresAt, co.CreatedAt
		}
		return co, nil
	case rec.State == orderqueue.Placed:
		return s.store.Checkout(ctx, rec.OrderID)
	case rec.State == orderqueue.Rejected:
		// A sweeper's record of a checkout given up names no lines: the buyer's answer was 503.
		co := queuedCheckout(rec.Order, stock.Rejected)
		co.Reason = rec.Reason
		for i := range co.Lines {
			co.Lines[i].Reason = rec.Reason
		}
		return co, nil
	}
	// Still queued, as the record stands: a placed checkout's record stays so, and then its rows
	// are the answer.
	if co, err := s.store.Checkout(ctx, rec.OrderID); err == nil {
		return co, nil
	}
	return queuedCheckout(rec.Order, stock.Queued), nil
}

// ReplayCheckout finds the checkout of req's Idempotency-Key while it is queued, as Replay an
// order: the buyer's reservation of its first product names the key and the checkout.
func (s *Queued) ReplayCheckout(ctx context.Context, req stock.CheckoutRequest) (stock.Checkout, error) {
	first := stock.SKUOrder(req.Lines)[0]
	held, err := s.admission.Held(ctx, first.SKU, req.UserID)
	if err != nil {
		return stock.Checkout{}, err
	}
	if held.IdempotencyKey != req.IdempotencyKey {
		return stock.Checkout{}, fmt.Errorf("key %q: no queued checkout: %w", req.IdempotencyKey, stock.ErrNotFound)
	}
	rec, err := s.queue.Get(ctx, held.ID)
	switch {
	case err != nil:
		return s.checkout(ctx, rec, err)
	case rec.State == orderqueue.Rejected:
		return stock.Checkout{}, fmt.Errorf("key %q: checkout %s rejected: %w", req.IdempotencyKey, held.ID, stock.ErrNotFound)
	case len(rec.Lines) == 0 || checkoutRequest(rec.Order).Fingerprint() != req.Fingerprint():
		return stock.Checkout{}, fmt.Errorf("key %q: %w", req.IdempotencyKey, stock.ErrIdempotencyConflict)
	}
	return s.checkout(ctx, rec, nil)
}
