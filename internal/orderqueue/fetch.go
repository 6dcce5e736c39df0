package orderqueue

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/segmentio/encoding/json"
)

// Delivery is one message handed to this writer: a batch of orders to decide, then ack, nak or
// term.
type Delivery struct {
	Batch Batch
	// Deliveries counts the times the message was handed to a writer, this one included: more
	// than one means an earlier writer neither acked nor naked it (it was killed, froze or gave
	// up), and may have decided some of its orders.
	Deliveries uint64
	// Resent marks a batch sent again (Queue.Resend): its first delivery may follow an earlier
	// message's, whose writer may have decided some of its orders.
	Resent bool
	// Queued is when the queue stored the message.
	Queued time.Time
	msg    jetstream.Msg
	done   atomic.Bool // acked or naked: no longer reported in progress
}

// Ack removes the message from the queue: call it only once every order of its batch is decided,
// in the database or its record. A lost ack costs a redelivery, which finds the orders decided.
func (d *Delivery) Ack() error {
	d.done.Store(true)
	return d.msg.Ack()
}

// Nak hands the message back for another delivery after delay: an order of it could not be
// decided now (the database did not answer).
func (d *Delivery) Nak(delay time.Duration) error {
	d.done.Store(true)
	return d.msg.NakWithDelay(delay)
}

func (d *Delivery) answered() bool { return d.done.Load() }

// InProgress tells the queue this writer is still at work on the message, restarting its
// AckWait: a slow commit must not hand the batch to a second writer meanwhile.
func (d *Delivery) InProgress() error { return d.msg.InProgress() }

// Taken is the deliveries of one product a writer took, in the order the queue stored them.
type Taken struct {
	SKU        string
	Deliveries []*Delivery
}

// Fetch takes up to max messages for this writer: those waiting now, or, when none is, the
// first to come within wait and those behind it — so a busy queue is taken in large batches and
// an idle one answers its first order at once. It returns them grouped by product, in the order
// each product's messages were queued; none when wait passes idle. A message that is not a batch
// (it did not decode) is terminated: no writer could ever place it.
func (q *Queue) Fetch(ctx context.Context, max int, wait time.Duration) ([]Taken, error) {
	msgs, err := q.take(ctx, max, 0)
	if err == nil && len(msgs) == 0 {
		if msgs, err = q.take(ctx, 1, wait); err == nil && len(msgs) == 1 {
			var more []jetstream.Msg
			more, err = q.take(ctx, max-1, 0)
			msgs = append(msgs, more...)
		}
	}
	if err != nil && len(msgs) == 0 {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, fmt.Errorf("fetch: %w", classify(err))
	}
	var ds []*Delivery
	for _, m := range msgs {
		d, err := q.delivery(m)
		if err != nil {
			q.log.Error("order queue: a message that is not a batch of orders, terminated", "subject", m.Subject(), "err", err)
			_ = m.Term()
			continue
		}
		ds = append(ds, d)
	}
	return byProduct(ds), nil
}

// byProduct groups deliveries by product, in the order each product's came.
func byProduct(ds []*Delivery) []Taken {
	var taken []Taken
	index := map[string]int{}
	for _, d := range ds {
		i, ok := index[d.Batch.SKU]
		if !ok {
			i = len(taken)
			index[d.Batch.SKU] = i
			taken = append(taken, Taken{SKU: d.Batch.SKU})
		}
		taken[i].Deliveries = append(taken[i].Deliveries, d)
	}
	return taken
}

// take pulls up to n messages: those waiting now (wait 0), or as many as arrive within wait; a
// wait ends early when ctx does (a writer stopping does not wait out its idle pull).
func (q *Queue) take(ctx context.Context, n int, wait time.Duration) ([]jetstream.Msg, error) {
	if n <= 0 {
		return nil, nil
	}
	var (
		b   jetstream.MessageBatch
		err error
	)
	if wait == 0 {
		b, err = q.consumer.FetchNoWait(n)
	} else {
		wctx, cancel := context.WithTimeout(ctx, wait)
		defer cancel()
		b, err = q.consumer.Fetch(n, jetstream.FetchContext(wctx))
	}
	if err != nil {
		return nil, err
	}
	var msgs []jetstream.Msg
	for m := range b.Messages() {
		msgs = append(msgs, m)
	}
	err = b.Error()
	switch {
	case err == nil, errors.Is(err, jetstream.ErrNoMessages):
		return msgs, nil
	case errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil: // the wait passed: none came
		return msgs, nil
	}
	return msgs, err
}

func (q *Queue) delivery(m jetstream.Msg) (*Delivery, error) {
	meta, err := m.Metadata()
	if err != nil {
		return nil, err
	}
	d := &Delivery{Deliveries: meta.NumDelivered, Queued: meta.Timestamp, msg: m,
		Resent: strings.HasSuffix(m.Headers().Get(jetstream.MsgIDHeader), resent)}
	return d, q.decode(d, m.Subject(), m.Data())
}

// decode reads the batch of a message on subject into d: one of orders of that subject's product,
// each minted in it.
func (q *Queue) decode(d *Delivery, subject string, data []byte) error {
	if err := json.Unmarshal(data, &d.Batch); err != nil {
		return err
	}
	b := d.Batch
	if b.ID == "" || b.SKU != q.skuOf(subject) || len(b.Orders) == 0 {
		return fmt.Errorf("batch %q for %q of %d orders on subject %s", b.ID, b.SKU, len(b.Orders), subject)
	}
	for _, o := range b.Orders {
		if id, ok := BatchOf(o.OrderID); !ok || id != b.ID || o.SKU != b.SKU {
			return fmt.Errorf("order %q for %q in batch %s of %s", o.OrderID, o.SKU, b.ID, b.SKU)
		}
	}
	return nil
}

// Backlog is one product's batches waiting in the queue, as the metrics and the resend read it.
type Backlog struct {
	SKU    string
	Depth  uint64    // messages (batches) not yet acked: queued, or with a writer
	Oldest time.Time // when the oldest of them was queued
}

// Backlogs reads every product's backlog (the oldest message of each is one request: a product
// whose backlog is gone by then is left out).
func (q *Queue) Backlogs(ctx context.Context) ([]Backlog, error) {
	return q.backlogs(ctx, q.cfg.Subjects+".*")
}

// BacklogOf reads sku's backlog; the zero Backlog when it has none.
func (q *Queue) BacklogOf(ctx context.Context, sku string) (Backlog, error) {
	b, err := q.backlogs(ctx, q.Subject(sku))
	if err != nil || len(b) == 0 {
		return Backlog{SKU: sku}, err
	}
	return b[0], nil
}

func (q *Queue) backlogs(ctx context.Context, filter string) ([]Backlog, error) {
	info, err := q.stream.Info(ctx, jetstream.WithSubjectFilter(filter))
	if err != nil {
		return nil, fmt.Errorf("queue backlog: %w", classify(err))
	}
	var out []Backlog
	for subject, n := range info.State.Subjects {
		first, err := q.stream.GetMsg(ctx, info.State.FirstSeq, jetstream.WithGetMsgSubject(subject))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("queue backlog of %s: %w", subject, classify(err))
		}
		out = append(out, Backlog{SKU: q.skuOf(subject), Depth: n, Oldest: first.Time})
	}
	return out, nil
}
