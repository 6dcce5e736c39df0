package queued

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"golang.org/x/sync/errgroup"

	"github.com/flashsale/seckill/internal/admission"
	"github.com/flashsale/seckill/internal/orderqueue"
	"github.com/flashsale/seckill/internal/planted"
	"github.com/flashsale/seckill/internal/stock"
)

// inHand is a batch this writer took: its record as claimed, and what became of its orders.
type inHand struct {
	*orderqueue.Delivery
	claimed  orderqueue.Claimed
	fresh    bool             // first delivered and proven queued (provenQueued): no order to look up first
	open     int              // orders not yet placed or rejected in the record
	refused  map[string]error // orders the database refused, to reject in the record: by id
	retry    error            // why an order could not be decided: the batch comes back
	answered bool             // acked or naked
}

// decided reports whether every order of the batch is placed, or refused and to be rejected.
func (h *inHand) decided() bool { return h.open == len(h.refused) && h.retry == nil }

// held is one order of a batch in hand.
type held struct {
	h *inHand
	o orderqueue.Order
}

// queueLanes bounds a take's concurrent requests to the queue (claims, hooks), independent ones.
const queueLanes = 16

// write is one writer's take of one product's batches: each set of products' orders in one
// section (one lock, one conditional update, one multi-row insert), in the order taken.
func (s *Queued) write(ctx context.Context, t orderqueue.Taken) {
	if hook := s.opts.Hooks.Taken; hook != nil {
		var g errgroup.Group
		g.SetLimit(queueLanes)
		for _, d := range t.Deliveries {
			for _, o := range d.Batch.Orders {
				g.Go(func() error { hook(ctx, o.OrderID); return nil })
			}
		}
		_ = g.Wait()
	}
	hands := s.claim(ctx, t)
	var again, fresh []held // each in the order the queue took them
	for _, h := range hands {
		if h.answered || h.retry != nil {
			continue
		}
		for _, o := range h.Batch.Orders {
			if _, ended := h.claimed.Rejected[o.OrderID]; ended {
				continue
			}
			if h.fresh {
				fresh = append(fresh, held{h: h, o: o})
			} else {
				again = append(again, held{h: h, o: o})
			}
		}
	}
	// Only a batch handed out before may have rows; its orders are older and go first. A fresh
	// batch's order written through another copy (resent) is refused by the section, and
	// writeSome finds its row then.
	todo := append(s.ackPlaced(ctx, again), fresh...)
	sets := map[string][]held{}
	var keys []string
	for _, e := range todo {
		key := strings.Join(requestOf(e.o).SKUs(), "\x00")
		if _, ok := sets[key]; !ok {
			keys = append(keys, key)
		}
		sets[key] = append(sets[key], e)
	}
	for _, key := range keys {
		s.writeSome(ctx, sets[key])
	}
	for _, h := range hands {
		switch {
		case h.answered:
		case h.retry != nil:
			s.again(h, h.retry)
		default:
			s.finish(ctx, h)
		}
	}
}

// claim takes each batch of t in hand, reading its record where it may say otherwise than queued
// (orderqueue.Queue.Claim). One given up is dropped, its units given back, and acked. Orders its
// record says rejected (a writer stopped before its ack) are decided, their units given back again.
func (s *Queued) claim(ctx context.Context, t orderqueue.Taken) []*inHand {
	proven := s.provenQueued(ctx, t)
	hands := make([]*inHand, len(t.Deliveries))
	var g errgroup.Group
	g.SetLimit(queueLanes)
	for i, d := range t.Deliveries {
		h := &inHand{Delivery: d, open: len(d.Batch.Orders), refused: map[string]error{}}
		hands[i] = h
		if proven[d.Batch.ID] || planted.On(planted.UncheckedWriter) {
			h.claimed, h.fresh = orderqueue.Unread(d.Batch), proven[d.Batch.ID]
			continue
		}
		g.Go(func() error {
			c, err := s.queue.Claim(ctx, d.Batch)
			switch {
			case err != nil:
				h.retry = err
			case neverAccepted(c.BatchRecord):
				// A sweeper (or the publisher in doubt) was first: none of its orders was
				// accepted. A give-back is by reservation id, so a second returns nothing.
				for _, o := range d.Batch.Orders {
					s.admission.GiveBack(ctx, requestOf(o).Lines, fmt.Errorf("batch given up: %w", admission.ErrNotPlaced))
				}
				h.answered = true
				_ = h.Ack()
			default:
				h.claimed = c
				for _, o := range d.Batch.Orders {
					if why, ended := c.Rejected[o.OrderID]; ended {
						s.admission.GiveBack(ctx, requestOf(o).Lines, fmt.Errorf("order rejected %s: %w", why, admission.ErrNotPlaced))
						h.open--
					}
				}
			}
			return nil
		})
	}
	_ = g.Wait()
	return hands
}

// provenQueued are the batches of t, by id, whose record need not be read: first deliveries with
// a reservation handed over to the queue (one Redis read for all). A hand-over follows the queued
// record, so no sweeper gave the batch up and no writer rejected an order of it.
func (s *Queued) provenQueued(ctx context.Context, t orderqueue.Taken) map[string]bool {
	var first []stock.OrderRequest
	for _, d := range t.Deliveries {
		if d.Deliveries == 1 && !d.Resent {
			for _, o := range d.Batch.Orders {
				first = append(first, requestOf(o).Lines[0]) // the line of the batch's product
			}
		}
	}
	if len(first) == 0 {
		return nil
	}
	handed, err := s.admission.HandedOver(ctx, t.SKU, first)
	if err != nil {
		s.log.Debug("reservations handed over not read; every batch is claimed", "sku", t.SKU, "err", err)
		return nil
	}
	proven := map[string]bool{}
	for _, d := range t.Deliveries {
		proven[d.Batch.ID] = slices.ContainsFunc(d.Batch.Orders, func(o orderqueue.Order) bool { return handed[o.Reservation] })
	}
	return proven
}

// writeSome writes es, all for one set of products, in one section, which settles the
// reservations of those written; then finishes the batches it decided the last orders of.
func (s *Queued) writeSome(ctx context.Context, es []held) {
	reqs := make([]stock.CheckoutRequest, len(es))
	for i, e := range es {
		reqs[i] = requestOf(e.o)
	}
	var refused []held
	var ends []orderqueue.Record
	refusals := map[string]error{}
	for i, p := range s.section(ctx, reqs[0].SKUs(), func() []stock.CheckoutRequest { return reqs }) {
		e, err := es[i], p.Err
		if errors.Is(err, stock.ErrDuplicateRequest) {
			// Another order holds its key (both were accepted while neither was written): a
			// refusal for good, or the order would come back for ever.
			err = fmt.Errorf("%w: %w", stock.ErrIdempotencyConflict, err)
		}
		switch {
		case err == nil:
			e.h.open--
			row := &orderqueue.Row{Status: string(p.Checkout.Status), ExpiresAt: p.Checkout.ExpiresAt, CreatedAt: p.Checkout.CreatedAt}
			ends = append(ends, orderqueue.Record{Order: e.o, State: orderqueue.Placed, Row: row})
		case refusal(err):
			refused = append(refused, e)
			refusals[e.o.OrderID] = err
		case e.h.retry == nil:
			e.h.retry = err
		}
	}
	s.queue.Placed(ends...) // one message tells every end
	// A refusal may be about the order itself: another writer placed it meanwhile (its
	// AckWait passed while it committed), and this one found its buyer holding it.
	for _, e := range s.ackPlaced(ctx, refused) {
		e.h.refused[e.o.OrderID] = refusals[e.o.OrderID]
	}
	for _, e := range es {
		if !e.h.answered && (e.h.decided() || planted.On(planted.AckedUndecided)) {
			s.finish(ctx, e.h)
		}
	}
}

// ackPlaced decides the orders of es the database has (placed by a writer that stopped before
// its ack) and returns the others; when it cannot say, their batches come back. It finds them by
// reservation: the order's id, or the checkout's for all its lines.
func (s *Queued) ackPlaced(ctx context.Context, es []held) []held {
	if len(es) == 0 {
		return nil
	}
	ids := make([]string, len(es))
	for i, e := range es {
		ids[i] = e.o.Reservation
		if planted.On(planted.CheckoutFoundByLine) && e.o.Checkout {
			ids[i] = e.o.Lines[0].OrderID
		}
	}
	written, err := s.store.Placed(ctx, ids)
	if err != nil {
		for _, e := range es {
			e.h.retry = cmp.Or(e.h.retry, err)
		}
		return nil
	}
	var rest []held
	var ends []orderqueue.Record
	var settled []stock.OrderRequest
	for i, e := range es {
		if !written[ids[i]] {
			rest = append(rest, e)
			continue
		}
		e.h.open--
		// Without its row, which its followers read: this writer did not write it.
		ends = append(ends, orderqueue.Record{Order: e.o, State: orderqueue.Placed})
		settled = append(settled, requestOf(e.o).Lines...)
	}
	s.queue.Placed(ends...)
	s.admission.Settle(ctx, settled)
	return rest
}

// finish ends a batch whose orders are all decided: those refused are rejected in its record in
// one write (orderqueue.Queue.Reject), their units given back, and the batch is acked. An order
// rejected already keeps that record, which the buyer was told; its give-back follows it.
func (s *Queued) finish(ctx context.Context, h *inHand) {
	if len(h.refused) > 0 {
		why := make(map[string]string, len(h.refused))
		for id, err := range h.refused {
			why[id] = stock.Code(err)
		}
		rec, err := s.queue.Reject(ctx, h.claimed, why)
		if err != nil {
			s.again(h, err)
			return
		}
		for _, o := range h.Batch.Orders {
			err, refused := h.refused[o.OrderID]
			if !refused {
				continue
			}
			if rec.Rejected[o.OrderID] != why[o.OrderID] {
				err = fmt.Errorf("order rejected %s: %w", rec.Rejected[o.OrderID], admission.ErrNotPlaced)
			}
			s.admission.GiveBack(ctx, requestOf(o).Lines, err)
		}
		h.open -= len(h.refused)
		clear(h.refused)
	}
	h.answered = true
	_ = h.Ack()
}

// again hands a batch back to the queue: an order of it was not decided.
func (s *Queued) again(h *inHand, err error) {
	s.log.Debug("queued batch not decided; it comes back", "batch", h.Batch.ID, "err", err)
	h.answered = true
	_ = h.Nak(s.opts.Retry)
}

// refusal reports whether the database decided against the order for good (sold out, a buyer who
// holds one, outside the window, no product). Busy and unavailable decide nothing: it comes back.
func refusal(err error) bool {
	switch stock.Code(err) {
	case "busy", "unavailable", "internal", "canceled":
		return false
	}
	return true
}
