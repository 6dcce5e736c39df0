package queued

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/flashsale/seckill/internal/orderqueue"
	"github.com/flashsale/seckill/internal/stock"
)

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
