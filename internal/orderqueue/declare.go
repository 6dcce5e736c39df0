package orderqueue

import (
	"context"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"
)

// replicas is cfg.Replicas, or the size of the cluster the connection sees (the servers it was
// given and those the cluster announced), up to 3: a replica per node keeps the queue through
// the loss of one, and more than three only slows every write.
func (q *Queue) replicas() int {
	if q.cfg.Replicas > 0 {
		return q.cfg.Replicas
	}
	return min(3, max(1, len(q.nc.Servers())))
}

// declare creates the stream, the consumer and the records bucket, or brings them to the config.
//
// The stream is a work queue: a message leaves it when a writer acks it. It is bounded with
// DiscardNew, so a full queue refuses the next order (ErrFull) rather than drop one already
// answered 202. Its de-duplication window drops a retried publish. File storage and replicas
// keep it through a server restart or the loss of a node. One durable consumer serves every
// instance's writers: a message neither acked nor naked within AckWait goes to another writer.
func (q *Queue) declare(ctx context.Context) error {
	replicas := q.replicas()
	var err error
	q.stream, err = q.js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
		Name:        q.cfg.Stream,
		Description: "seckill: accepted orders waiting for a writer",
		Subjects:    []string{q.cfg.Subjects + ".*"},
		Retention:   jetstream.WorkQueuePolicy,
		Discard:     jetstream.DiscardNew,
		MaxMsgs:     q.cfg.MaxMsgs,
		MaxBytes:    q.cfg.MaxBytes,
		Duplicates:  q.cfg.Duplicates,
		Storage:     jetstream.FileStorage,
		Replicas:    replicas,
	})
	if err != nil {
		return fmt.Errorf("stream %s: %w", q.cfg.Stream, err)
	}
	q.consumer, err = q.stream.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{
		Durable:       q.cfg.Consumer,
		Description:   "seckill: the writers of every instance",
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       q.cfg.AckWait,
		MaxAckPending: q.cfg.MaxAckPending,
		// No MaxDeliver: a message delivered that often stays in a work queue undelivered — an
		// order answered 202 that never ends. A writer that cannot place an order naks it, with
		// a delay, until the database answers; refusals are answered as rejected and acked.
		MaxDeliver: -1,
		Replicas:   replicas,
	})
	if err != nil {
		return fmt.Errorf("consumer %s: %w", q.cfg.Consumer, err)
	}
	kv := jetstream.KeyValueConfig{
		Bucket:      q.cfg.Bucket,
		Description: "seckill: queued orders, placed or rejected",
		History:     1,
		TTL:         q.cfg.RecordTTL,
		MaxBytes:    4 * q.cfg.MaxBytes,
		Storage:     jetstream.FileStorage,
		Replicas:    replicas,
	}
	if q.records, err = q.js.CreateOrUpdateKeyValue(ctx, kv); err != nil {
		return fmt.Errorf("order records %s: %w", q.cfg.Bucket, err)
	}
	return nil
}
