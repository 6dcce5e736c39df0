package orderqueue

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Strays takes up to max of the orders the stream holds that the writers' consumer will never
// hand out: messages at or below its ack floor, which a work queue has deleted once acked. A
// server killed with writes not yet on disk can restart behind its consumer — the stream lost
// its last messages, the consumer's state kept them as delivered and acked — and give the lost
// sequences out again to new messages (a retried publish, whose duplicate id went with the lost
// one, or a new order): the consumer passes over them, and they would wait for ever. Only
// messages stored more than older ago are taken, past the moment between an ack and its
// message's deletion. The deliveries are answered like any: Ack deletes the message, Nak leaves
// it for the next look.
func (q *Queue) Strays(ctx context.Context, max int, older time.Duration) ([]Batch, error) {
	info, err := q.stream.Info(ctx)
	if err != nil {
		return nil, fmt.Errorf("strays: %w", classify(err))
	}
	c, err := q.consumer.Info(ctx)
	if err != nil {
		return nil, fmt.Errorf("strays: %w", classify(err))
	}
	var ds []*Delivery
	for seq := info.State.FirstSeq; len(ds) < max && seq <= c.AckFloor.Stream; {
		m, err := q.stream.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(q.cfg.Subjects+".*"))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			break
		}
		if err != nil {
			return byProduct(ds), fmt.Errorf("strays: %w", classify(err))
		}
		seq = m.Sequence + 1
		if m.Sequence > c.AckFloor.Stream || time.Since(m.Time) < older {
			continue
		}
		d := &Delivery{Deliveries: 1, Queued: m.Time, msg: stray{q: q, seq: m.Sequence}}
		if err := q.decode(d, m.Subject, m.Data); err != nil {
			q.log.Error("order queue: a stray message that is not an order, deleted", "subject", m.Subject, "err", err)
			_ = d.msg.Ack()
			continue
		}
		q.log.Warn("order queue: an order stored past the writers' consumer, taken up", "order", d.Order.OrderID, "seq", m.Sequence)
		ds = append(ds, d)
	}
	return byProduct(ds), nil
}

// stray answers a message taken by Strays: it was never handed out, so it is deleted once its
// order is decided, and left where it is otherwise.
type stray struct {
	q   *Queue
	seq uint64
}

func (s stray) Ack() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := s.q.stream.DeleteMsg(ctx, s.seq)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil
	}
	return err
}

func (stray) NakWithDelay(time.Duration) error { return nil }

func (stray) InProgress() error { return nil }
