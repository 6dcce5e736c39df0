package queued

import (
	"context"
	"time"

	"github.com/flashsale/seckill/internal/admission"
	"github.com/flashsale/seckill/internal/orderqueue"
)

// Pending answers admission's sweeper (admission.Pending) from the order queue; the composition
// root gives it to the ledger at construction, before the strategy exists.
type Pending struct {
	Queue *orderqueue.Queue
}

// Pending implements admission.Pending: a reservation whose batch was recorded queued is left to
// its writer, unless it rejected the order. A batch with no record is recorded given up now, so
// no writer ever places an order of it and its units may go back. Other strategies' are skipped.
func (p Pending) Pending(ctx context.Context, sku string, held []admission.Held) (map[string]bool, error) {
	byBatch := map[string][]admission.Held{}
	for _, h := range held {
		if id, ok := orderqueue.BatchOf(h.ID); ok {
			byBatch[id] = append(byBatch[id], h)
		}
	}
	writable := map[string]bool{}
	for id, hs := range byBatch {
		b := orderqueue.Batch{ID: id, SKU: sku}
		for _, h := range hs {
			b.Orders = append(b.Orders, orderqueue.Order{OrderID: h.ID, SKU: sku, UserID: h.User, Strategy: name,
				IdempotencyKey: h.IdempotencyKey, Reservation: h.ID, AcceptedAt: time.Now().UTC(),
				Lines: []orderqueue.Line{{OrderID: h.ID, SKU: sku, Quantity: h.Units}}})
		}
		rec, err := p.Queue.Record(ctx, orderqueue.BatchRecord{Batch: b, State: orderqueue.Rejected, Reason: givenUp})
		if err != nil {
			return nil, err
		}
		for _, h := range hs {
			r, ok := rec.Of(h.ID)
			writable[h.ID] = ok && r.State == orderqueue.Queued
		}
	}
	return writable, nil
}
