package queued

import (
	"context"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/flashsale/seckill/internal/admission"
	"github.com/flashsale/seckill/internal/orderqueue"
)

// Pending answers admission's sweeper (admission.Pending) from the order queue; the composition
// root gives it to the ledger at construction, before the strategy exists.
type Pending struct {
	Queue *orderqueue.Queue
}

// Pending implements admission.Pending: a reservation whose order was recorded
// queued is left to its writer (its message went out); one with no record is recorded rejected
// now, so that no writer ever places it, and its units may go back. Reservations that are not
// the queued strategy's (not an order id) have no message: they are not asked about.
func (p Pending) Pending(ctx context.Context, sku string, held []admission.Held) (map[string]bool, error) {
	writable := map[string]bool{}
	for _, h := range held {
		if _, err := ulid.ParseStrict(h.ID); err != nil {
			continue
		}
		rec, err := p.Queue.Record(ctx, orderqueue.Record{
			Order: orderqueue.Order{OrderID: h.ID, SKU: sku, UserID: h.User, Quantity: h.Units, Strategy: name,
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
