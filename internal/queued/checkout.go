package queued

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/flashsale/seckill/internal/orderqueue"
	"github.com/flashsale/seckill/internal/stock"
)

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
	case len(rec.Lines) == 0 || requestOf(rec.Order).Fingerprint() != req.Fingerprint():
		return stock.Checkout{}, fmt.Errorf("key %q: %w", req.IdempotencyKey, stock.ErrIdempotencyConflict)
	}
	return s.checkout(ctx, rec, nil)
}
