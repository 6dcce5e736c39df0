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
// stock.ErrNotFound when the queue has no record of it (or it is a checkout's),
// stock.ErrUnavailable when the queue does not answer.
func (s *Queued) Order(ctx context.Context, orderID string) (stock.Order, error) {
	rec, err := s.queue.Get(ctx, orderID)
	return line(s.read(ctx, rec, err, false))
}

// WaitOrder is Order once the order ended, or as it stands when wait passes.
func (s *Queued) WaitOrder(ctx context.Context, orderID string, wait time.Duration) (stock.Order, error) {
	if o, ok := s.written(ctx, orderID); ok {
		return o, nil
	}
	rec, err := s.queue.Wait(ctx, orderID, wait)
	return line(s.read(ctx, rec, err, false))
}

// WaitRecorded is WaitOrder for an order the queue has a record of: stock.ErrNotFound at once
// when it has none.
func (s *Queued) WaitRecorded(ctx context.Context, orderID string, wait time.Duration) (stock.Order, error) {
	if o, ok := s.written(ctx, orderID); ok {
		return o, nil
	}
	rec, err := s.queue.WaitRecorded(ctx, orderID, wait)
	return line(s.read(ctx, rec, err, false))
}

// Checkout reads the record of a checkout, as Order an order's.
func (s *Queued) Checkout(ctx context.Context, checkoutID string) (stock.Checkout, error) {
	rec, err := s.queue.Get(ctx, checkoutID)
	return s.read(ctx, rec, err, true)
}

// WaitCheckout is Checkout once the checkout ended, or as it stands when wait passes;
// stock.ErrNotFound at once when the queue has no record of it (another strategy's checkout).
func (s *Queued) WaitCheckout(ctx context.Context, checkoutID string, wait time.Duration) (stock.Checkout, error) {
	rec, err := s.queue.WaitRecorded(ctx, checkoutID, wait)
	return s.read(ctx, rec, err, true)
}

// line is the order of a request of one line read as a checkout.
func line(co stock.Checkout, err error) (stock.Order, error) {
	if err != nil {
		return stock.Order{}, err
	}
	return co.Lines[0], nil
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

// read is the request a record stands for — an order's (checkout false) or a checkout's: queued,
// rejected with its reason, or — placed — its rows.
func (s *Queued) read(ctx context.Context, rec orderqueue.Record, err error, checkout bool) (stock.Checkout, error) {
	switch {
	case errors.Is(err, orderqueue.ErrNotFound):
		return stock.Checkout{}, fmt.Errorf("%w: %w", stock.ErrNotFound, err)
	case err != nil:
		return stock.Checkout{}, fmt.Errorf("%w: %w", stock.ErrUnavailable, err)
	case checkout == (len(rec.Lines) == 0) && !(checkout && rec.State == orderqueue.Rejected):
		// A sweeper's record of a checkout given up names no lines: the buyer's answer was 503.
		return stock.Checkout{}, fmt.Errorf("%s is not a record of this kind: %w", rec.OrderID, stock.ErrNotFound)
	case rec.State == orderqueue.Placed && rec.Row != nil:
		// As its writer placed it, a moment ago (orderqueue.Queue.Wait).
		co := queuedCheckout(rec.Order, stock.Status(rec.Row.Status))
		co.ExpiresAt, co.CreatedAt = rec.Row.ExpiresAt, rec.Row.CreatedAt
		for i := range co.Lines {
			co.Lines[i].ExpiresAt, co.Lines[i].CreatedAt = co.ExpiresAt, co.CreatedAt
		}
		return co, nil
	case rec.State == orderqueue.Placed:
		return s.stored(ctx, rec.Order)
	case rec.State == orderqueue.Rejected:
		co := queuedCheckout(rec.Order, stock.Rejected)
		if checkout && len(rec.Lines) == 0 {
			co = stock.Checkout{CheckoutID: rec.OrderID, UserID: rec.UserID, Strategy: rec.Strategy, Status: stock.Rejected, CreatedAt: rec.AcceptedAt}
		}
		co.Reason = rec.Reason
		for i := range co.Lines {
			co.Lines[i].Reason = rec.Reason
		}
		return co, nil
	}
	// Still queued, as the record stands: a placed request's record stays so, and then its rows
	// are the answer.
	if co, err := s.stored(ctx, rec.Order); err == nil {
		return co, nil
	}
	return queuedCheckout(rec.Order, stock.Queued), nil
}

// stored reads the rows of the request a message carries.
func (s *Queued) stored(ctx context.Context, o orderqueue.Order) (stock.Checkout, error) {
	if len(o.Lines) > 0 {
		return s.store.Checkout(ctx, o.OrderID)
	}
	order, err := s.store.Order(ctx, o.OrderID)
	return stock.Single(order), err
}

// Replay finds the request of req's Idempotency-Key while it is queued: the buyer's reservation
// of its first product names the key and the request (its id), and the request's record says
// where it is. A queued or placed request is the answer; stock.ErrNotFound when the key holds
// none, stock.ErrIdempotencyConflict when it holds another.
func (s *Queued) Replay(ctx context.Context, req stock.CheckoutRequest) (stock.Checkout, error) {
	held, err := s.admission.Held(ctx, req.SKUs()[0], req.UserID)
	if err != nil {
		return stock.Checkout{}, err
	}
	if held.IdempotencyKey != req.IdempotencyKey {
		return stock.Checkout{}, fmt.Errorf("key %q: nothing queued: %w", req.IdempotencyKey, stock.ErrNotFound)
	}
	rec, err := s.queue.Get(ctx, held.ID)
	if err != nil {
		return s.read(ctx, rec, err, !req.Order)
	}
	prior := requestOf(rec.Order)
	switch {
	case rec.State == orderqueue.Rejected:
		return stock.Checkout{}, fmt.Errorf("key %q: %s rejected: %w", req.IdempotencyKey, held.ID, stock.ErrNotFound)
	case prior.Order != req.Order || prior.Fingerprint() != req.Fingerprint():
		return stock.Checkout{}, fmt.Errorf("key %q: %w", req.IdempotencyKey, stock.ErrIdempotencyConflict)
	}
	return s.read(ctx, rec, nil, !req.Order)
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
