// Package orderqueue is the durable order queue of the queued strategy: a NATS JetStream stream
// that accepted orders wait on until a writer — on any instance — places them in the database,
// and a key-value bucket of order records that every instance reads, so that a buyer can follow
// an order that has no row yet.
//
// # What it holds
//
// The stream (SECKILL_ORDERS) takes one message per accepted order on the subject
// seckill.orders.<sku>, the order id as its message id. It is a work queue — a message leaves it
// when a writer acks it — bounded in messages and bytes with DiscardNew, so that a full queue
// refuses the next order (ErrFull, which the caller answers as busy) instead of dropping an old
// one: an order already answered 202 is never the one lost. Its de-duplication window drops a
// message whose id was published already (a retry after a lost answer), and says so. File
// storage and, on a cluster, up to three replicas let it survive a server restart or the loss of
// one node. One durable pull consumer is shared by every instance's writers: each message goes
// to one writer at a time, and back to the queue when that writer neither acks it within AckWait
// (it was killed, or froze) nor naks it.
//
// The order records (bucket SECKILL_ORDER_RECORDS) say where each accepted order is: queued,
// placed or rejected with a reason, with the order itself, so that any instance answers
// GET /orders/{id} before the row exists and a ?wait= can watch the record change.
//
// # The record decides who resolves a unit
//
// An accepted order's units are reserved in Redis admission under a lease of the instance that
// admitted them (internal/admission): when that instance stops beating, any sweeper returns the
// units of its reservations whose orders the database does not have. Two of those reservations
// must not be returned: one whose message went out, because a writer may still place it (the
// unit would then be sold twice in Redis — queued orders plus active orders above the initial
// stock — and one of the two buyers told no after a 202); and one whose message is certainly
// not coming must be, or the unit is stranded. The database cannot tell them apart (neither has
// a row), nor can the stream (it is not searchable by order id). The record can, because its
// first version is written atomically by whoever comes first (Record: a create that fails when
// the key exists):
//
//   - the admitting instance publishes, then records the order queued, then answers 202;
//   - a writer records it queued (if nobody has) before it places a message, and drops a message
//     whose record says rejected;
//   - a sweeper that finds a lapsed reservation with no order row records the order rejected
//     (if nobody has) and returns its units only when its record stands as rejected; a queued
//     record means the message went out, and its writer — whichever takes it — settles or gives
//     back the reservation.
//
// So each crash point has one ending. Killed before the publish: no message, no record; the
// sweeper records rejected and the unit returns. Killed after the publish, before the record:
// the message waits; either a writer records queued first (the sweeper then leaves the unit to
// it) or the sweeper records rejected first (the writer then drops the message): placed or
// returned, never both. Killed after the record, before the 202: the order is queued and
// placed — the buyer who saw no answer finds it by id or by Idempotency-Key. Frozen past the
// heartbeat before the publish and woken later: the sweeper's rejected record stands, so the
// late publish is answered as not accepted and its message, if it went out, is dropped by the
// writer. A writer killed after its commit, before its ack: the message comes back, the
// database already has the order id (unique), so it is acked with no second row and its
// reservation settled once (settle is by reservation id). Order of writes for a writer: commit,
// then the placed record, then the ack — each step repeatable, so a crash between any two only
// repeats the later ones.
//
// A record ends once: Finish moves queued to placed or rejected, and the first final record
// wins over any later attempt, so a buyer never sees an order change its final answer.
package orderqueue

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/flashsale/seckill/internal/planted"
)

// The names the contract gives (docs/lifecycle.md, queued orders) and the defaults beside them.
const (
	DefaultStream   = "SECKILL_ORDERS"
	DefaultBucket   = "SECKILL_ORDER_RECORDS"
	DefaultConsumer = "seckill-writers"
	// DefaultSubjects is the subjects' prefix: an order for sku travels on
	// seckill.orders.<sku> (Subject).
	DefaultSubjects = "seckill.orders"
)

// ErrFull marks an order the queue refused because it holds its maximum of messages or bytes: it
// was not queued (answer busy, with Retry-After).
var ErrFull = errors.New("order queue full")

// ErrUnavailable marks a queue that could not be reached: whether a publish landed is unknown
// (its retry with the same message id tells).
var ErrUnavailable = errors.New("order queue unavailable")

// ErrNotFound marks an order with no record.
var ErrNotFound = errors.New("order not recorded")

// Config says where the queue is and how it is bounded. The zero value of every field but URLs
// and DataDir is a default that suits a sale of the service's size.
type Config struct {
	// URLs are NATS servers (a JetStream cluster: any of its members); empty starts an embedded
	// server with JetStream, in-process, its store under DataDir — or connects to the one
	// another instance on the same DataDir runs (embed).
	URLs    []string
	DataDir string
	// Stream, Bucket and Consumer name the stream, the order records and the writers' durable
	// consumer, and Subjects the prefix of the stream's subjects (tests give unique ones: two
	// streams on one server may not share a subject).
	Stream, Bucket, Consumer, Subjects string
	// MaxMsgs and MaxBytes bound the queue (default 100,000 orders, 64 MiB): past them a publish
	// is refused with ErrFull.
	MaxMsgs  int64
	MaxBytes int64
	// Duplicates is the de-duplication window (default 10 minutes): a message whose id was
	// published within it is dropped. It must outlast any retry of a publish.
	Duplicates time.Duration
	// AckWait is how long a writer may hold a message without acking it (default 5 s; a writer
	// that is still working says so with InProgress): past it the message goes to another writer.
	// It bounds how long a killed writer delays its orders.
	AckWait time.Duration
	// MaxAckPending bounds the messages handed to writers and not yet acked (default 10,000).
	MaxAckPending int
	// RecordTTL is how long an order record is kept (default 24 h): long after any order has
	// left the queue.
	RecordTTL time.Duration
	// Replicas is how many servers keep the stream and the records; 0 is the cluster's size,
	// up to 3.
	Replicas int
	// Name names the connection, as the servers' monitoring shows it.
	Name string
}

func (c *Config) defaults() {
	def := func(s *string, v string) {
		if *s == "" {
			*s = v
		}
	}
	def(&c.Stream, DefaultStream)
	def(&c.Bucket, DefaultBucket)
	def(&c.Consumer, DefaultConsumer)
	def(&c.Subjects, DefaultSubjects)
	def(&c.Name, "seckill")
	if c.MaxMsgs == 0 {
		c.MaxMsgs = 100_000
	}
	if c.MaxBytes == 0 {
		c.MaxBytes = 64 << 20
	}
	if c.Duplicates == 0 {
		c.Duplicates = 10 * time.Minute
	}
	if c.AckWait == 0 {
		c.AckWait = 5 * time.Second
		if planted.On(planted.LongAckWait) {
			c.AckWait = 20 * time.Second
		}
	}
	if c.MaxAckPending == 0 {
		c.MaxAckPending = 10_000
	}
	if c.RecordTTL == 0 {
		c.RecordTTL = 24 * time.Hour
	}
}

// Queue is a connection to the order queue: publish, fetch batches, keep the order records.
// It is safe for concurrent use.
type Queue struct {
	cfg      Config
	log      *slog.Logger
	embedded *server.Server // nil with Config.URLs, or when another instance on the data dir runs it
	lock     *os.File       // held while this instance runs the data dir's embedded server
	nc       *nats.Conn
	js       jetstream.JetStream
	stream   jetstream.Stream
	consumer jetstream.Consumer
	records  jetstream.KeyValue
	watch    atomic.Pointer[watch] // set once Open has declared the bucket; read by the connection's handlers
	orders   *prometheus.CounterVec
}

// Open connects to the queue (or starts the embedded server), and creates the stream, the
// writers' consumer and the order records, or brings them to cfg if they exist — so every
// instance may call it at start, in any order. The queue's metrics go to reg: the orders
// accepted, placed, rejected and redelivered, and each product's backlog (its depth and the age
// of its oldest order), read at every scrape.
func Open(ctx context.Context, cfg Config, log *slog.Logger, reg prometheus.Registerer) (*Queue, error) {
	cfg.defaults()
	q := &Queue{cfg: cfg, log: log, orders: newOrders()}
	if err := q.connect(); err != nil {
		return nil, err
	}
	republished, err := q.declare(ctx)
	if err != nil {
		q.Close()
		return nil, err
	}
	if err := q.watchRecords(republished); err != nil {
		q.Close()
		return nil, err
	}
	q.register(reg)
	return q, nil
}

// connect dials cfg.URLs, or the data dir's embedded server (embed): in-process when this
// instance runs it.
func (q *Queue) connect() error {
	opts := []nats.Option{
		nats.Name(q.cfg.Name),
		// Reconnect for ever, quickly: a restarted server or a lost node must not end the
		// instance's writers, and publishes in between fail fast (ErrUnavailable) instead of
		// queueing in the client.
		nats.MaxReconnects(-1),
		nats.ReconnectWait(250 * time.Millisecond),
		nats.ReconnectBufSize(-1),
		nats.Timeout(2 * time.Second),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil {
				q.log.Warn("order queue: disconnected; reconnecting", "err", err)
			}
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) {
			if w := q.watch.Load(); w != nil {
				w.forget()
			}
			q.log.Info("order queue: reconnected", "server", nc.ConnectedUrl())
		}),
		nats.ErrorHandler(func(_ *nats.Conn, sub *nats.Subscription, err error) {
			if w := q.watch.Load(); w != nil && sub == w.sub {
				w.forget() // a slow consumer: writes were dropped unheard
			}
			q.log.Warn("order queue: asynchronous error", "err", err)
		}),
	}
	url := strings.Join(q.cfg.URLs, ",")
	if len(q.cfg.URLs) == 0 {
		var err error
		if url, err = q.embed(); err != nil {
			return err
		}
		if q.embedded != nil {
			opts = append(opts, nats.InProcessServer(q.embedded))
		}
	}
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		q.Close()
		return fmt.Errorf("connect to NATS %s: %w: %w", url, ErrUnavailable, err)
	}
	q.nc = nc
	if q.js, err = jetstream.New(nc); err != nil {
		q.Close()
		return err
	}
	return nil
}

// replicas is cfg.Replicas, or the size of the cluster the connection sees (the servers it was
// given and those the cluster announced), up to 3: a replica per node keeps the queue through
// the loss of one, and more than three only slows every write.
func (q *Queue) replicas() int {
	if q.cfg.Replicas > 0 {
		return q.cfg.Replicas
	}
	return min(3, max(1, len(q.nc.Servers())))
}

// declare creates the stream, the consumer and the records bucket, or brings them to the config,
// and reports whether the bucket republishes its stored writes (watch).
func (q *Queue) declare(ctx context.Context) (bool, error) {
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
		return false, fmt.Errorf("stream %s: %w", q.cfg.Stream, err)
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
		return false, fmt.Errorf("consumer %s: %w", q.cfg.Consumer, err)
	}
	kv := jetstream.KeyValueConfig{
		Bucket:      q.cfg.Bucket,
		Description: "seckill: queued orders, placed or rejected",
		History:     1,
		TTL:         q.cfg.RecordTTL,
		MaxBytes:    4 * q.cfg.MaxBytes,
		Storage:     jetstream.FileStorage,
		Replicas:    replicas,
		RePublish:   recordsRePublish(q.cfg.Bucket),
	}
	q.records, err = q.js.CreateOrUpdateKeyValue(ctx, kv)
	if err != nil {
		// A server before 2.10 cannot change the RePublish of a bucket that exists (err_code
		// 10052): one an older version declared keeps its own, and is watched without it. The
		// bucket is the stream KV_<bucket>.
		if old, lookErr := q.js.Stream(ctx, "KV_"+q.cfg.Bucket); lookErr == nil {
			kv.RePublish = old.CachedInfo().Config.RePublish
			q.records, err = q.js.CreateOrUpdateKeyValue(ctx, kv)
		}
	}
	if err != nil {
		return false, fmt.Errorf("order records %s: %w", q.cfg.Bucket, err)
	}
	republished := kv.RePublish != nil && *kv.RePublish == *recordsRePublish(q.cfg.Bucket)
	if !republished {
		q.log.Warn("order records: the bucket does not republish its writes (declared by an older version on a server before 2.10); every wait reads the bucket",
			"bucket", q.cfg.Bucket)
	}
	return republished, nil
}

// Close ends the connection, and stops the embedded server.
func (q *Queue) Close() {
	if q.nc != nil {
		q.nc.Close()
	}
	if q.embedded != nil {
		q.embedded.Shutdown()
		q.embedded.WaitForShutdown()
	}
	if q.lock != nil {
		_ = q.lock.Close() // releases the store's lock
	}
}

// Ping reports whether the queue answers (for /readyz).
func (q *Queue) Ping(ctx context.Context) error {
	if _, err := q.stream.Info(ctx); err != nil {
		return fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	return nil
}

// Order is an accepted order as it travels on the queue and stands in its record.
type Order struct {
	OrderID        string    `json:"order_id"`
	SKU            string    `json:"sku"`
	UserID         string    `json:"user_id"`
	Quantity       int       `json:"quantity"`
	Strategy       string    `json:"strategy,omitempty"`
	IdempotencyKey string    `json:"idempotency_key,omitempty"`
	Reservation    string    `json:"reservation,omitempty"` // its admission reservation
	AcceptedAt     time.Time `json:"accepted_at"`
}

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
		q.log.Debug("order queue: "+what+" not answered; trying again", "order", id, "err", err)
		select {
		case <-ctx.Done():
			return err
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// Publish puts o on the queue, its id the message id. It reports duplicate when the queue had
// that id already (an earlier attempt landed): o is queued once either way. A publish whose
// answer is lost is tried again, with the same id, while ctx allows. Errors: ErrFull (not
// queued), ErrUnavailable (unknown whether queued), or another wrapped error.
func (q *Queue) Publish(ctx context.Context, o Order) (duplicate bool, err error) {
	return q.publish(ctx, o, o.OrderID, "accepted")
}

// Resend puts o on the queue again: an order recorded queued whose message the queue no longer
// holds (a server that lost its last writes, a cluster that lost a stream leader). Its message
// id is the order's with ".resent": the queue may still know the first id as a duplicate while
// the message itself is gone. A second message for an order that is still queued somewhere is
// harmless — the writer that takes the later one finds the order decided — but costs a write:
// call it only for an order whose message the queue does not hold. It reports whether the queue
// had the resent message already.
func (q *Queue) Resend(ctx context.Context, o Order) (duplicate bool, err error) {
	return q.publish(ctx, o, o.OrderID+".resent", "resent")
}

// AckWait is how long a writer may hold a message before it goes to another.
func (q *Queue) AckWait() time.Duration { return q.cfg.AckWait }

// publish puts o on the queue under the message id id, and counts it under event unless it was a
// duplicate.
func (q *Queue) publish(ctx context.Context, o Order, id, event string) (duplicate bool, err error) {
	data, err := json.Marshal(o)
	if err != nil {
		return false, err
	}
	msg := &nats.Msg{Subject: q.Subject(o.SKU), Data: data, Header: nats.Header{}}
	var ack *jetstream.PubAck
	err = q.untilAnswered(ctx, "publish (with the same id)", o.OrderID, func(ctx context.Context) error {
		var err error
		ack, err = q.js.PublishMsg(ctx, msg, jetstream.WithMsgID(id), jetstream.WithExpectStream(q.cfg.Stream))
		return err
	})
	if err != nil {
		return false, fmt.Errorf("publish order %s: %w", o.OrderID, err)
	}
	if !ack.Duplicate {
		q.orders.WithLabelValues(event).Inc()
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
