package orderqueue

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/segmentio/encoding/json"
)

// Subject is the subject an order for sku travels on: the subjects' prefix, a dot and the SKU,
// with each "." of the SKU written %2E — a SKU may hold dots, which NATS reads as token
// separators, and one token per SKU keeps "seckill.orders.*" matching every product and one
// product's subject naming only it.
func (q *Queue) Subject(sku string) string {
	return q.cfg.Subjects + "." + strings.ReplaceAll(sku, ".", "%2E")
}

// skuOf is the SKU a subject names (Subject's inverse).
func (q *Queue) skuOf(subject string) string {
	return strings.ReplaceAll(strings.TrimPrefix(subject, q.cfg.Subjects+"."), "%2E", ".")
}

// publishAttempt bounds one attempt of a write to the queue (a publish, a record).
const publishAttempt = time.Second

// untilAnswered runs attempt, each try bounded by publishAttempt, and again every 100 ms while
// the queue does not answer (ErrUnavailable) and ctx allows: a stream or a bucket electing a new
// leader answers nothing, and the retry is what reaches the new one. It returns the last error,
// classified; what and id name the write in the log.
func (q *Queue) untilAnswered(ctx context.Context, what, id string, attempt func(ctx context.Context) error) error {
	for {
		actx, cancel := context.WithTimeout(ctx, publishAttempt)
		err := attempt(actx)
		cancel()
		if err == nil {
			return nil
		}
		err = classify(err)
		if !errors.Is(err, ErrUnavailable) || ctx.Err() != nil {
			return err
		}
		q.log.Debug("order queue: "+what+" not answered; trying again", "batch", id, "err", err)
		select {
		case <-ctx.Done():
			return err
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// Publish puts batch b on the queue, one message, its id the message id. It reports duplicate
// when the queue had that id already (an earlier attempt landed): b is queued once either way. A
// publish whose answer is lost is tried again, with the same id, while ctx allows. Errors:
// ErrFull (not queued), ErrUnavailable (unknown whether queued), or another wrapped error.
func (q *Queue) Publish(ctx context.Context, b Batch) (duplicate bool, err error) {
	return q.publish(ctx, b, b.ID, "accepted")
}

// Resend puts batch b on the queue again: a batch recorded queued whose message the queue no
// longer holds (a server that lost its last writes, a cluster that lost a stream leader). Its
// message id is the batch's with ".resent": the queue may still know the first id as a duplicate
// while the message itself is gone. A second message for a batch that is still queued somewhere
// is harmless — the writer that takes the later one finds its orders decided — but costs a
// write: call it only for a batch whose message the queue does not hold. It reports whether the
// queue had the resent message already.
func (q *Queue) Resend(ctx context.Context, b Batch) (duplicate bool, err error) {
	return q.publish(ctx, b, b.ID+resent, "resent")
}

// resent ends the message id of a batch sent again (Resend).
const resent = ".resent"

// publish puts b on the queue under the message id id, and counts its orders under event unless
// it was a duplicate.
func (q *Queue) publish(ctx context.Context, b Batch, id, event string) (duplicate bool, err error) {
	if len(b.Orders) == 0 {
		return false, fmt.Errorf("publish batch %s: no orders", b.ID)
	}
	data, err := json.Marshal(b)
	if err != nil {
		return false, err
	}
	msg := &nats.Msg{Subject: q.Subject(b.SKU), Data: data, Header: nats.Header{}}
	var ack *jetstream.PubAck
	err = q.untilAnswered(ctx, "publish (with the same id)", b.ID, func(ctx context.Context) error {
		var err error
		ack, err = q.js.PublishMsg(ctx, msg, jetstream.WithMsgID(id), jetstream.WithExpectStream(q.cfg.Stream))
		return err
	})
	if err != nil {
		return false, fmt.Errorf("publish batch %s: %w", b.ID, err)
	}
	if !ack.Duplicate {
		q.orders.WithLabelValues(event).Add(float64(len(b.Orders)))
		if event == "accepted" {
			q.batches.Observe(float64(len(b.Orders)))
		}
	}
	return ack.Duplicate, nil
}

// classify maps a NATS error to ErrFull or ErrUnavailable where it is one.
func classify(err error) error {
	var api *jetstream.APIError
	if errors.As(err, &api) && api.ErrorCode == 10077 && strings.Contains(api.Description, "maximum") {
		// JSStreamStoreFailedF: with DiscardNew, "maximum messages/bytes exceeded".
		return fmt.Errorf("%w: %w", ErrFull, err)
	}
	for _, e := range []error{nats.ErrTimeout, nats.ErrNoResponders, nats.ErrConnectionClosed, nats.ErrConnectionReconnecting,
		nats.ErrDisconnected, nats.ErrReconnectBufExceeded, context.DeadlineExceeded, jetstream.ErrNoStreamResponse} {
		if errors.Is(err, e) {
			return fmt.Errorf("%w: %w", ErrUnavailable, err)
		}
	}
	if errors.As(err, &api) && api.Code == 503 {
		// No quorum for the stream (a cluster that lost its leader), JetStream not ready yet.
		return fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	return err
}
