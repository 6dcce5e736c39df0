package queued

import (
	"context"
	"fmt"
	"maps"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/flashsale/seckill/internal/admission"
	"github.com/flashsale/seckill/internal/orderqueue"
	"github.com/flashsale/seckill/internal/planted"
)

// resend, every AckWait, sends again the batches of recent products whose order is still recorded
// queued two AckWaits after its 202 with no message of its product old enough to be its own: the
// queue lost it (a stream leader killed, a server that lost its last writes). A batch goes whole,
// at most once per two AckWaits; its writer finds the orders decided already. The same look
// gives back the reservations of orders recorded rejected.
func (s *Queued) resend(ctx context.Context) {
	every := s.queue.AckWait()
	tick := time.NewTicker(every)
	defer tick.Stop()
	sent := map[string]time.Time{} // by batch
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		for _, sku := range s.admission.Recent(admission.RecentWindow) {
			if err := s.resendLost(ctx, sku, 2*every, sent); err != nil {
				s.log.Debug("queued orders not checked for lost messages", "sku", sku, "err", err)
			}
		}
		maps.DeleteFunc(sent, func(_ string, at time.Time) bool { return time.Since(at) > 10*every })
	}
}

// resendLost sends again the lost batches of sku's orders older than after (see resend).
func (s *Queued) resendLost(ctx context.Context, sku string, after time.Duration, sent map[string]time.Time) error {
	reservations, err := s.admission.Reservations(ctx, sku)
	if err != nil {
		return err
	}
	var backlog *orderqueue.Backlog
	for _, h := range reservations {
		id, err := ulid.ParseStrict(h.ID)
		batch, ok := orderqueue.BatchOf(h.ID)
		if err != nil || !ok {
			continue
		}
		accepted := ulid.Time(id.Time())
		if time.Since(accepted) < after || time.Since(sent[batch]) < after {
			continue
		}
		if backlog == nil {
			b, err := s.queue.BacklogOf(ctx, sku)
			if err != nil {
				return err
			}
			backlog = &b
		}
		// A message stored no later than the order's publish could have taken is perhaps its own.
		if backlog.Depth > 0 && !backlog.Oldest.After(accepted.Add(s.opts.Publish)) {
			continue
		}
		rec, err := s.queue.GetBatch(ctx, batch)
		if err != nil {
			continue
		}
		r, ok := rec.Of(h.ID)
		if ok && r.State == orderqueue.Rejected && !planted.On(planted.RejectedUnitsHeld) {
			// Rejected, its reservation still held: its writer's give-back did not reach Redis,
			// and no sweeper lists the queue's reservations. A second give-back returns nothing.
			s.admission.GiveBack(ctx, requestOf(r.Order).Lines, fmt.Errorf("order %s rejected: %w", h.ID, admission.ErrNotPlaced))
			continue
		}
		if !ok || r.State != orderqueue.Queued {
			continue
		}
		sent[batch] = time.Now()
		if dup, err := s.queue.Resend(ctx, rec.Batch); err == nil && !dup {
			s.log.Warn("queued batch sent again: the queue had lost its message", "batch", batch, "order", h.ID, "sku", sku)
		}
	}
	return nil
}
