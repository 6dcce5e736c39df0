package admission

import (
	"context"
	"fmt"

	"github.com/flashsale/seckill/internal/stock"
)

// QueueOwner owns the reservations handed over to the order queue (HandOver): whichever
// instance's writer takes the message resolves it, so no heartbeat shows it alive.
const QueueOwner = "@queue"

// HandOver gives the reservations of reqs to the order queue (lua/handover.lua): their messages
// went out, so no sweeper returns their units, even once this instance is gone. A failed one is
// done by the sweeper once Pending confirms the message. Options.Batch batches them.
func (a *Ledger) HandOver(ctx context.Context, sku string, reqs []stock.OrderRequest) error {
	if a.opts.Batch <= 1 || len(reqs) != 1 {
		return a.handOver(ctx, sku, reqs)
	}
	h := &handedOver{req: reqs[0], done: make(chan struct{})}
	if err := a.handing.Await(ctx, sku, h, h.done); err != nil {
		return err
	}
	return h.err
}

// handedOver is one hand-over waiting for its product's next call.
type handedOver struct {
	req  stock.OrderRequest
	err  error
	done chan struct{}
}

// handOverRound is one hand-over call for the hand-overs of sku waiting in the queue.
func (a *Ledger) handOverRound(ctx context.Context, sku string, hs []*handedOver) {
	reqs := make([]stock.OrderRequest, len(hs))
	for i, h := range hs {
		reqs[i] = h.req
	}
	err := a.handOver(ctx, sku, reqs)
	for _, h := range hs {
		h.err = err
		close(h.done)
	}
}

// handOver moves the reservations of reqs to the queue's hash in one call.
func (a *Ledger) handOver(ctx context.Context, sku string, reqs []stock.OrderRequest) error {
	k := KeysOf(sku)
	args := make([]any, 0, 1+2*len(reqs))
	args = append(args, QueueOwner)
	for _, r := range reqs {
		args = append(args, r.UserID, r.Reservation.ID)
	}
	if err := handOverScript.Run(ctx, a.client, []string{k.Reserved, k.Queued}, args...).Err(); err != nil {
		return fmt.Errorf("hand over reservations of %s: %w: %w", sku, ErrRedisDown, err)
	}
	return nil
}

// HandedOver reports which of reqs' reservations the order queue holds, by id, in one read.
func (a *Ledger) HandedOver(ctx context.Context, sku string, reqs []stock.OrderRequest) (map[string]bool, error) {
	users := make([]string, len(reqs))
	for i, r := range reqs {
		users[i] = r.UserID
	}
	held, err := a.client.HMGet(ctx, KeysOf(sku).Queued, users...).Result()
	if err != nil {
		return nil, fmt.Errorf("reservations of %s handed over: %w: %w", sku, ErrRedisDown, err)
	}
	out := make(map[string]bool, len(reqs))
	for i, v := range held {
		if s, ok := v.(string); ok {
			if h, ok := parseHeld(users[i], s); ok && h.ID == reqs[i].Reservation.ID {
				out[h.ID] = true
			}
		}
	}
	return out, nil
}

// InQueue lists the ids of sku's reservations that the order queue holds: accepted orders or
// checkout lines not yet settled or given back.
func (a *Ledger) InQueue(ctx context.Context, sku string) ([]string, error) {
	held, err := a.client.HGetAll(ctx, KeysOf(sku).Queued).Result()
	if err != nil {
		return nil, fmt.Errorf("reservations of %s in the queue: %w: %w", sku, ErrRedisDown, err)
	}
	var ids []string
	for _, h := range parseHash(held) {
		ids = append(ids, h.ID)
	}
	return ids, nil
}
