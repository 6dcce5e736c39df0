package queued

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/flashsale/seckill/internal/orderqueue"
	"github.com/flashsale/seckill/internal/planted"
	"github.com/flashsale/seckill/internal/stock"
)

// Order reads the record of an order: queued, rejected with its reason, or — placed — its row.
// stock.ErrNotFound when the queue has no record of it, stock.ErrUnavailable when the queue does
// not answer.
func (s *Queued) Order(ctx context.Context, orderID string) (stock.Order, error) {
	rec, err := s.queue.Get(ctx, orderID)
	return s.order(ctx, rec, err)
}

// WaitOrder is Order once the order ended, or as it stands when wait passes.
func (s *Queued) WaitOrder(ctx context.Context, orderID string, wait time.Duration) (stock.Order, error) {
	if o, ok := s.written(ctx, orderID); ok {
		return o, nil
	}
	rec, err := s.queue.Wait(ctx, orderID, wait)
	return s.order(ctx, rec, err)
}

// WaitRecorded is WaitOrder for an order the queue has a record of: stock.ErrNotFound at once
// when it has none.
func (s *Queued) WaitRecorded(ctx context.Context, orderID string, wait time.Duration) (stock.Order, error) {
	if o, ok := s.written(ctx, orderID); ok {
		return o, nil
	}
	rec, err := s.queue.WaitRecorded(ctx, orderID, wait)
	return s.order(ctx, rec, err)
}

// heardFor is how long after its 202 an order's end, if it came, is surely among those the
// watch keeps (orderqueue.Queue.Wait): at a sale's rate they hold several seconds of ends.
const heardFor = 2 * time.Second

// written is the row of an order accepted more than heardFor ago, if it has one. A placed
// order's record stays queued, and its end may be older than those the watch keeps: a wait on
// the record alone would hold a written order until its wait passed. A younger order's
// follower does without the read — a sale's followers ask at once.
func (s *Queued) written(ctx context.Context, orderID string) (stock.Order, bool) {
	id, err := ulid.ParseStrict(orderID)
	if err != nil || time.Since(ulid.Time(id.Time())) < heardFor {
		return stock.Order{}, false
	}
	o, err := s.store.Order(ctx, orderID)
	return o, err == nil
}

func (s *Queued) order(ctx context.Context, rec orderqueue.Record, err error) (stock.Order, error) {
	if errors.Is(err, orderqueue.ErrNotFound) {
		return stock.Order{}, fmt.Errorf("%w: %w", stock.ErrNotFound, err)
	}
	if err != nil {
		return stock.Order{}, fmt.Errorf("%w: %w", stock.ErrUnavailable, err)
	}
	switch {
	case rec.State == orderqueue.Placed && rec.Row != nil:
		// As its writer placed it, a moment ago (orderqueue.Queue.Wait).
		o := queuedOrder(rec.Order)
		o.Status, o.ExpiresAt, o.CreatedAt = stock.Status(rec.Row.Status), rec.Row.ExpiresAt, rec.Row.CreatedAt
		return o, nil
	case rec.State == orderqueue.Placed:
		return s.store.Order(ctx, rec.OrderID)
	case rec.State == orderqueue.Rejected:
		o := queuedOrder(rec.Order)
		o.Status, o.Reason = stock.Rejected, rec.Reason
		return o, nil
	}
	// Still queued, as the record stands: a placed order's record stays so, and then its row is
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

// Backlog is how many of sku's orders are queued: accepted, not yet written — the reservations
// the queue holds (admission.Ledger.InQueue) less those the database has an order of. A written
// order keeps its reservation until its settle, and its message until its ack: counted from
// either alone it would be counted twice, queued and in the product's rows, for that moment. The
// audit reads the rows first, so an order written between the reads is counted in neither: never
// in both. A checkout counts once under each of its products.
func (s *Queued) Backlog(ctx context.Context, sku string) (int64, error) {
	ids, err := s.admission.InQueue(ctx, sku)
	if err != nil || len(ids) == 0 || planted.On(planted.AuditCountsWritten) {
		return int64(len(ids)), err
	}
	written, err := s.store.Placed(ctx, ids)
	if err != nil {
		return 0, err
	}
	return int64(len(ids) - len(written)), nil
}
