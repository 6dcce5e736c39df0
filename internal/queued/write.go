package queued

import (
	"context"
	"errors"
	"fmt"

	"golang.org/x/sync/errgroup"

	"github.com/flashsale/seckill/internal/admission"
	"github.com/flashsale/seckill/internal/orderqueue"
	"github.com/flashsale/seckill/internal/planted"
	"github.com/flashsale/seckill/internal/stock"
)

// taken is a delivery this writer took, with its order's record as it claimed it.
type taken struct {
	*orderqueue.Delivery
	claimed orderqueue.Claimed
}

// queueLanes bounds a batch's requests to the queue in flight at once: they are independent,
// and one connection carries them side by side, so a batch waits about one round trip per
// queueLanes orders instead of one per order.
const queueLanes = 16

// eachOrder runs f over ts, queueLanes at a time, and waits for all of them.
func eachOrder(ts []taken, f func(i int, h taken)) {
	var g errgroup.Group
	g.SetLimit(queueLanes)
	for i, h := range ts {
		g.Go(func() error {
			f(i, h)
			return nil
		})
	}
	_ = g.Wait()
}

// write is one writer's batch of one product (steps 3 and 4).
func (s *Queued) write(ctx context.Context, b orderqueue.Batch) {
	ts := make([]taken, len(b.Deliveries))
	for i, d := range b.Deliveries {
		ts[i].Delivery = d
	}
	kept := make([]bool, len(ts))
	eachOrder(ts, func(i int, h taken) {
		c, err := s.queue.Claim(ctx, h.Order)
		switch {
		case err != nil:
			s.retry(h.Delivery, err)
		case c.State == orderqueue.Rejected && !planted.On(planted.UncheckedWriter):
			// A sweeper was first, or a writer rejected it and stopped before its ack: the
			// give-back is by reservation id, so a second one returns nothing.
			s.admission.GiveBack(ctx, request(h.Order), fmt.Errorf("order rejected: %w", admission.ErrNotPlaced))
			_ = h.Ack()
		default:
			ts[i].claimed, kept[i] = c, true
		}
	})
	var todo []taken // in the order the queue took them
	for i, h := range ts {
		if kept[i] {
			todo = append(todo, h)
		}
	}
	todo = s.ackPlaced(ctx, b.SKU, todo)
	if len(todo) == 0 {
		return
	}
	reqs := make([]stock.OrderRequest, len(todo))
	for i, h := range todo {
		reqs[i] = request(h.Order)
	}
	placed := s.section(ctx, b.SKU, func() []stock.OrderRequest { return reqs })
	var ok, refused []taken
	rows := map[string]stock.Order{}
	refusals := map[string]error{}
	for i, p := range placed {
		if errors.Is(p.Err, stock.ErrDuplicateRequest) {
			// Another order holds its key (both were accepted while neither was written): a
			// refusal for good, or the order would come back for ever.
			p.Err = fmt.Errorf("%w: %w", stock.ErrIdempotencyConflict, p.Err)
		}
		switch {
		case p.Err == nil:
			ok = append(ok, todo[i])
			rows[todo[i].Order.OrderID] = p.Order
		case refusal(p.Err):
			refused = append(refused, todo[i])
			refusals[todo[i].Order.OrderID] = p.Err
		default:
			s.retry(todo[i].Delivery, p.Err)
		}
	}
	for _, h := range ok {
		s.finish(ctx, h, placedAs(h, rows[h.Order.OrderID]), nil)
	}
	// A refusal may be about the order itself: another writer placed it meanwhile (its
	// AckWait passed while it committed), and this one found its buyer holding it.
	eachOrder(s.ackPlaced(ctx, b.SKU, refused), func(_ int, h taken) {
		s.finish(ctx, h, orderqueue.Record{Order: h.Order, State: orderqueue.Rejected}, refusals[h.Order.OrderID])
	})
}

// placedAs is the end of an order its writer placed as row.
func placedAs(h taken, row stock.Order) orderqueue.Record {
	return orderqueue.Record{Order: h.Order, State: orderqueue.Placed,
		Row: &orderqueue.Row{Status: string(row.Status), ExpiresAt: row.ExpiresAt, CreatedAt: row.CreatedAt}}
}

// ackPlaced finishes and acks the deliveries whose orders the database has (placed by a writer
// that stopped before its ack, or by another one) and returns the others; all of them are
// handed back when the database cannot say.
func (s *Queued) ackPlaced(ctx context.Context, sku string, ts []taken) []taken {
	if len(ts) == 0 {
		return nil
	}
	ids := make([]string, len(ts))
	for i, h := range ts {
		ids[i] = h.Order.OrderID
	}
	written, err := s.store.Placed(ctx, ids)
	if err != nil {
		for _, h := range ts {
			s.retry(h.Delivery, err)
		}
		return nil
	}
	var rest, done []taken
	for _, h := range ts {
		if written[h.Order.OrderID] {
			done = append(done, h)
		} else {
			rest = append(rest, h)
		}
	}
	for _, h := range done {
		// Its row is read by its followers: this writer did not write it.
		s.finish(ctx, h, orderqueue.Record{Order: h.Order, State: orderqueue.Placed}, nil)
	}
	reqs := make([]stock.OrderRequest, len(done))
	for i, h := range done {
		reqs[i] = request(h.Order)
	}
	s.admission.Settle(ctx, sku, reqs, make([]stock.Placed, len(done)))
	return rest
}

// finish ends the order as r (orderqueue.Queue.Finish), gives a rejected order's units back,
// and acks it. A rejection that finds the order rejected already keeps that record, which is
// what the buyer was told, and the reservation follows it.
func (s *Queued) finish(ctx context.Context, h taken, r orderqueue.Record, why error) {
	if why != nil {
		r.Reason = stock.Code(why)
	}
	state := r.State
	rec, err := s.queue.Finish(ctx, h.claimed, r)
	if err != nil {
		s.retry(h.Delivery, err)
		return
	}
	switch {
	case state == orderqueue.Rejected && rec.State == orderqueue.Rejected:
		s.admission.GiveBack(ctx, request(h.Order), why)
	case rec.State != state:
		// Cannot happen while every writer records an order queued before it places it and
		// reads the database before it rejects it; said loudly, since the buyer's answer and the
		// database now disagree.
		s.log.Error("queued order: its record and the database disagree", "order", h.Order.OrderID,
			"record", rec.State, "database", state)
	}
	_ = h.Ack()
}

// retry hands a delivery back to the queue: its order was not decided.
func (s *Queued) retry(d *orderqueue.Delivery, err error) {
	s.log.Debug("queued order not decided; it comes back", "order", d.Order.OrderID, "err", err)
	_ = d.Nak(s.opts.Retry)
}

// refusal reports whether the database decided against the order — for good, whoever asks
// again: sold out, a buyer who holds an order, outside the sale window, a product gone. Busy and
// unavailable decide nothing: the order is tried again.
func refusal(err error) bool {
	switch stock.Code(err) {
	case "busy", "unavailable", "internal", "canceled":
		return false
	}
	return true
}
