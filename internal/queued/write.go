package queued

import (
	"context"
	"errors"
	"fmt"
	"strings"

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

// write is one writer's batch of one subject (steps 3 and 4): its requests, those for the same
// products together — a product's orders, the checkouts of one set of products — each set in
// one section, in the order the queue took its first request.
func (s *Queued) write(ctx context.Context, b orderqueue.Batch) {
	sets := map[string][]taken{}
	var keys []string
	for _, d := range b.Deliveries {
		key := strings.Join(requestOf(d.Order).SKUs(), "\x00")
		if _, ok := sets[key]; !ok {
			keys = append(keys, key)
		}
		sets[key] = append(sets[key], taken{Delivery: d})
	}
	for _, key := range keys {
		s.writeSome(ctx, sets[key])
	}
}

// outcome is what a section did with one order or checkout: its row as written, or why not.
type outcome struct {
	row *orderqueue.Row
	err error
}

// writeSome claims ts, finishes those decided already, writes the others in one section
// (place), and ends each as it came out.
func (s *Queued) writeSome(ctx context.Context, ts []taken) {
	if len(ts) == 0 {
		return
	}
	if hook := s.opts.Hooks.Taken; hook != nil {
		eachOrder(ts, func(_ int, h taken) { hook(ctx, h.Order.OrderID) })
	}
	kept := make([]bool, len(ts))
	unclaimed := s.unclaimed(ctx, ts)
	eachOrder(ts, func(i int, h taken) {
		if unclaimed[h.Order.Reservation] {
			ts[i].claimed, kept[i] = orderqueue.Claimed{Record: orderqueue.Record{Order: h.Order, State: orderqueue.Queued}}, true
			return
		}
		c, err := s.queue.Claim(ctx, h.Order)
		switch {
		case err != nil:
			s.retry(h.Delivery, err)
		case c.State == orderqueue.Rejected && !planted.On(planted.UncheckedWriter):
			// A sweeper was first, or a writer rejected it and stopped before its ack: the
			// give-back is by reservation id, so a second one returns nothing.
			s.admission.GiveBack(ctx, requests(h.Order), fmt.Errorf("order rejected: %w", admission.ErrNotPlaced))
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
	todo = s.ackPlaced(ctx, todo)
	if len(todo) == 0 {
		return
	}
	var refused, written []taken
	var ends []orderqueue.Record
	refusals := map[string]error{}
	for i, out := range s.place(ctx, todo) {
		h := todo[i]
		if errors.Is(out.err, stock.ErrDuplicateRequest) {
			// Another order holds its key (both were accepted while neither was written): a
			// refusal for good, or the order would come back for ever.
			out.err = fmt.Errorf("%w: %w", stock.ErrIdempotencyConflict, out.err)
		}
		switch {
		case out.err == nil:
			written = append(written, h)
			ends = append(ends, orderqueue.Record{Order: h.Order, State: orderqueue.Placed, Row: out.row})
		case refusal(out.err):
			refused = append(refused, h)
			refusals[h.Order.OrderID] = out.err
		default:
			s.retry(h.Delivery, out.err)
		}
	}
	s.placed(written, ends)
	// A refusal may be about the order itself: another writer placed it meanwhile (its
	// AckWait passed while it committed), and this one found its buyer holding it.
	eachOrder(s.ackPlaced(ctx, refused), func(_ int, h taken) {
		s.reject(ctx, h, refusals[h.Order.OrderID])
	})
}

// unclaimed are the orders of ts whose records their writer need not read: on their first
// delivery, with their reservations in the queue's hands (admission.Ledger.HandedOver). A
// reservation is handed over only once its order's record stood queued, so no sweeper gave the
// order up, and no writer before this one can have rejected it. Any other order is claimed
// (orderqueue.Queue.Claim): a redelivery, a checkout, or all of them when Redis cannot say.
func (s *Queued) unclaimed(ctx context.Context, ts []taken) map[string]bool {
	var first []stock.OrderRequest
	for _, h := range ts {
		if len(h.Order.Lines) == 0 && h.Deliveries == 1 {
			first = append(first, request(h.Order))
		}
	}
	if len(first) == 0 {
		return nil
	}
	handed, err := s.admission.HandedOver(ctx, first[0].SKU, first)
	if err != nil {
		s.log.Debug("reservations handed over not read; every order is claimed", "sku", first[0].SKU, "err", err)
		return nil
	}
	return handed
}

// place writes a batch of requests for the same products in hybrid's section — every line of
// each, or none — which settles the reservations of those written.
func (s *Queued) place(ctx context.Context, ts []taken) []outcome {
	reqs := make([]stock.CheckoutRequest, len(ts))
	for i, h := range ts {
		reqs[i] = requestOf(h.Order)
	}
	placed := s.section(ctx, reqs[0].SKUs(), func() []stock.CheckoutRequest { return reqs })
	out := make([]outcome, len(placed))
	for i, p := range placed {
		out[i].err = p.Err
		if p.Err == nil {
			out[i].row = &orderqueue.Row{Status: string(p.Checkout.Status), ExpiresAt: p.Checkout.ExpiresAt, CreatedAt: p.Checkout.CreatedAt}
		}
	}
	return out
}

// ackPlaced finishes and acks the deliveries whose orders the database has (placed by a writer
// that stopped before its ack, or by another one) and returns the others; all of them are
// handed back when the database cannot say. The database finds them by reservation, which is
// an order's id, or a checkout's for every one of its lines (written in one transaction).
func (s *Queued) ackPlaced(ctx context.Context, ts []taken) []taken {
	if len(ts) == 0 {
		return nil
	}
	ids := make([]string, len(ts))
	for i, h := range ts {
		ids[i] = h.Order.Reservation
		if planted.On(planted.CheckoutFoundByLine) && len(h.Order.Lines) > 0 {
			ids[i] = h.Order.Lines[0].OrderID
		}
	}
	written, err := s.store.Placed(ctx, ids)
	if err != nil {
		for _, h := range ts {
			s.retry(h.Delivery, err)
		}
		return nil
	}
	var rest, found []taken
	var ends []orderqueue.Record
	var settled []stock.OrderRequest
	for i, h := range ts {
		if !written[ids[i]] {
			rest = append(rest, h)
			continue
		}
		found = append(found, h)
		// Without its row, which its followers read: this writer did not write it.
		ends = append(ends, orderqueue.Record{Order: h.Order, State: orderqueue.Placed})
		settled = append(settled, requests(h.Order)...)
	}
	s.placed(found, ends)
	s.admission.Settle(ctx, settled)
	return rest
}

// placed ends the orders the database has, ts, as ends: said to their followers in one message
// (orderqueue.Queue.Placed), then acked.
func (s *Queued) placed(ts []taken, ends []orderqueue.Record) {
	s.queue.Placed(ends...)
	for _, h := range ts {
		_ = h.Ack()
	}
}

// reject ends the order rejected for why (orderqueue.Queue.Finish), gives its units back, and
// acks it. A rejection that finds the order rejected already keeps that record, which is what the
// buyer was told, and the reservation follows it.
func (s *Queued) reject(ctx context.Context, h taken, why error) {
	r := orderqueue.Record{Order: h.Order, State: orderqueue.Rejected, Reason: stock.Code(why)}
	if _, err := s.queue.Finish(ctx, h.claimed, r); err != nil {
		s.retry(h.Delivery, err)
		return
	}
	s.admission.GiveBack(ctx, requests(h.Order), why)
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
