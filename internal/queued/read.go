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

// Read reads the request ref names from its record (read): stock.ErrNotFound when the queue has
// no record of its kind, stock.ErrUnavailable when the queue does not answer.
func (s *Queued) Read(ctx context.Context, ref stock.Ref) (stock.Checkout, error) {
	rec, err := s.queue.Get(ctx, ref.ID)
	return s.read(ctx, rec, err, ref.Checkout)
}

// Wait is Read once the request ended, or as it stands when wait passes; recorded: only if the
// queue has a record of it (stock.ErrNotFound at once when it has none).
func (s *Queued) Wait(ctx context.Context, ref stock.Ref, wait time.Duration, recorded bool) (stock.Checkout, error) {
	if co, ok := s.written(ctx, ref); ok {
		return co, nil
	}
	follow := s.queue.Wait
	if recorded {
		follow = s.queue.WaitRecorded
	}
	rec, err := follow(ctx, ref.ID, wait)
	return s.read(ctx, rec, err, ref.Checkout)
}

// heardFor is how long after its 202 a request's end, if it came, is surely among those the
// watch keeps (orderqueue.Queue.Wait): at a sale's rate they hold several seconds of ends.
const heardFor = 2 * time.Second

// written is the rows of a request accepted more than heardFor ago, if any: its record stays
// queued and the watch may have forgotten its end, so without this read its wait would run out.
// A younger request needs no read: a sale's followers ask at once.
func (s *Queued) written(ctx context.Context, ref stock.Ref) (stock.Checkout, bool) {
	id, err := ulid.ParseStrict(ref.ID)
	if err != nil || time.Since(ulid.Time(id.Time())) < heardFor {
		return stock.Checkout{}, false
	}
	co, err := s.row(ctx, ref)
	return co, err == nil
}

// read is the request a record stands for — an order's (checkout false) or a checkout's: queued,
// rejected with its reason, or — placed — its rows.
func (s *Queued) read(ctx context.Context, rec orderqueue.Record, err error, checkout bool) (stock.Checkout, error) {
	switch {
	case errors.Is(err, orderqueue.ErrNotFound):
		return stock.Checkout{}, fmt.Errorf("%w: %w", stock.ErrNotFound, err)
	case err != nil:
		return stock.Checkout{}, fmt.Errorf("%w: %w", stock.ErrUnavailable, err)
	case checkout != rec.Checkout && !(checkout && rec.State == orderqueue.Rejected):
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
		return s.row(ctx, stock.Ref{ID: rec.OrderID, Checkout: rec.Checkout})
	case rec.State == orderqueue.Rejected:
		co := queuedCheckout(rec.Order, stock.Rejected)
		if checkout && !rec.Checkout {
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
	if co, err := s.row(ctx, stock.Ref{ID: rec.OrderID, Checkout: rec.Checkout}); err == nil {
		return co, nil
	}
	return queuedCheckout(rec.Order, stock.Queued), nil
}

// rowRead is one follower's read of an order's row, made with the others' that came meanwhile.
type rowRead struct {
	id   string
	row  stock.Order
	err  error
	done chan struct{}
}

// rowsRead bounds the orders one query reads, and rowsReadFor how long it may take: a follower
// whose read went in it waits for it whatever its own deadline.
const (
	rowsRead    = 256
	rowsReadFor = 2 * time.Second
)

// row reads the rows of the request ref names. Followers whose end was heard before they asked
// read their rows (they may have moved on since) at the rate the writers place them: the orders
// that came while a read was out go in the next, one query for all (readRows). A checkout is
// read alone.
func (s *Queued) row(ctx context.Context, ref stock.Ref) (stock.Checkout, error) {
	if ref.Checkout {
		return s.store.Read(ctx, ref)
	}
	r := &rowRead{id: ref.ID, done: make(chan struct{})}
	if err := s.reading.Await(ctx, "", r, r.done); err != nil {
		return stock.Checkout{}, err
	}
	return stock.Single(r.row), r.err
}

// readRows reads the rows of the orders that asked while the last read was out, in one query on
// no follower's context: one who left must not fail the others'.
func (s *Queued) readRows(_ string, take func() []*rowRead) {
	rs := take()
	ids := make([]string, len(rs))
	for i, r := range rs {
		ids[i] = r.id
	}
	ctx, cancel := context.WithTimeout(context.Background(), rowsReadFor)
	defer cancel()
	rows, err := s.store.Orders(ctx, ids)
	for _, r := range rs {
		var ok bool
		if r.row, ok = rows[r.id]; err != nil {
			r.err = err
		} else if !ok {
			r.err = fmt.Errorf("order %s: %w", r.id, stock.ErrNotFound)
		}
		close(r.done)
	}
}

// Replay finds the request of req's Idempotency-Key while it is queued, by the buyer's
// reservation of its first product (it names the key and the request) and the request's record:
// stock.ErrNotFound when the key holds none, stock.ErrIdempotencyConflict when it holds another.
func (s *Queued) Replay(ctx context.Context, req stock.CheckoutRequest) (stock.Checkout, error) {
	held, err := s.admission.Held(ctx, req.SKUs()[0], req.UserID)
	if err != nil {
		return stock.Checkout{}, err
	}
	if held.IdempotencyKey != req.IdempotencyKey {
		return stock.Checkout{}, fmt.Errorf("key %q: nothing queued: %w", req.IdempotencyKey, stock.ErrNotFound)
	}
	rec, err := s.queue.Get(ctx, held.ID)
	prior := requestOf(rec.Order)
	switch {
	case err != nil: // read answers it
	case rec.State == orderqueue.Rejected:
		return stock.Checkout{}, fmt.Errorf("key %q: %s rejected: %w", req.IdempotencyKey, held.ID, stock.ErrNotFound)
	case prior.Order != req.Order || prior.Fingerprint() != req.Fingerprint():
		return stock.Checkout{}, fmt.Errorf("key %q: %w", req.IdempotencyKey, stock.ErrIdempotencyConflict)
	}
	return s.read(ctx, rec, err, !req.Order)
}

// Backlog is how many of sku's orders are accepted and not yet written: the reservations the
// queue holds less those with a row (kept until their settle). The audit reads the rows first,
// so an order written in between is counted in neither, never both. A checkout counts per product.
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
