package queued

import (
	"context"
	"fmt"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/flashsale/seckill/internal/admission"
	"github.com/flashsale/seckill/internal/orderqueue"
	"github.com/flashsale/seckill/internal/planted"
)

// resend puts back on the queue, every AckWait, the orders of this instance's recent products
// that hold a reservation and are still recorded queued two AckWaits after their 202 while the
// queue holds no message of their product old enough to be theirs: their message was lost — a
// stream leader killed as it took the message (TestQueuedClusterLosesANode saw one), a server
// that lost its last writes. Each order is sent again at most once per two AckWaits. The same
// look gives back the reservations of orders recorded rejected (TestQueuedRejectedUnitsReturn).
func (s *Queued) resend(ctx context.Context) {
	every := s.queue.AckWait()
	tick := time.NewTicker(every)
	defer tick.Stop()
	sent := map[string]time.Time{}
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
		for id, at := range sent {
			if time.Since(at) > 10*every {
				delete(sent, id)
			}
		}
	}
}

// resendLost sends again the lost messages of sku's orders older than after (see resend).
func (s *Queued) resendLost(ctx context.Context, sku string, after time.Duration, sent map[string]time.Time) error {
	reservations, err := s.admission.Reservations(ctx, sku)
	if err != nil {
		return err
	}
	var backlog *orderqueue.Backlog
	for _, h := range reservations {
		id, err := ulid.ParseStrict(h.ID)
		if err != nil {
			continue
		}
		accepted := ulid.Time(id.Time())
		if time.Since(accepted) < after || time.Since(sent[h.ID]) < after {
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
		rec, err := s.queue.Get(ctx, h.ID)
		if err == nil && rec.State == orderqueue.Rejected && !planted.On(planted.RejectedUnitsHeld) {
			// Rejected, its reservation still held: the give-back of its writer (or of its
			// publisher in doubt) did not reach Redis, and no sweeper lists the queue's
			// reservations. A second give-back returns nothing.
			s.admission.GiveBack(ctx, requests(rec.Order), fmt.Errorf("order %s rejected: %w", h.ID, admission.ErrNotPlaced))
			continue
		}
		if err != nil || rec.State != orderqueue.Queued {
			continue
		}
		sent[h.ID] = time.Now()
		if dup, err := s.queue.Resend(ctx, rec.Order); err == nil && !dup {
			s.log.Warn("queued order sent again: the queue had lost its message", "order", h.ID, "sku", sku)
		}
	}
	return nil
}
