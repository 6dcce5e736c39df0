// Package orderqueue is the durable order queue of the queued strategy: a NATS JetStream work
// queue that accepted orders wait on, in batches, until a writer on any instance places them in
// the database, and a key-value bucket with a record of each batch, so that any instance can
// answer for an order that has no row yet. A batch is one message and one record, each one synced
// write for all its orders; an order's first record decides who resolves its units (Record).
package orderqueue

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/oklog/ulid/v2"
	"github.com/prometheus/client_golang/prometheus"
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
	batches  prometheus.Histogram
}

// Open connects to the queue (or starts the embedded server), and creates the stream, the
// writers' consumer and the batch records, or brings them to cfg if they exist — so every
// instance may call it at start, in any order. The queue's metrics go to reg: the orders
// accepted, placed, rejected and redelivered, the orders per batch, and each product's backlog
// (its depth and the age of its oldest message), read at every scrape.
func Open(ctx context.Context, cfg Config, log *slog.Logger, reg prometheus.Registerer) (*Queue, error) {
	if err := cfg.check(); err != nil {
		return nil, err
	}
	cfg.named()
	q := &Queue{cfg: cfg, log: log, orders: newOrders(), batches: newBatches()}
	if err := q.connect(); err != nil {
		return nil, err
	}
	if err := q.declare(ctx); err != nil {
		q.Close()
		return nil, err
	}
	if err := q.watchRecords(); err != nil {
		q.Close()
		return nil, err
	}
	q.register(reg)
	return q, nil
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

// AckWait is how long a writer may hold a message before it goes to another.
func (q *Queue) AckWait() time.Duration { return q.cfg.AckWait }

// Batch is the orders one message carries and one record keeps: those one instance accepted for
// a product while its last publish was in flight (group commit: one synced write for all of
// them). Its orders' ids begin with its id (NewID), so that any instance finds an order's record
// from the order's id alone (BatchOf). SKU is the subject it travels on: every order's product,
// or a checkout's first.
type Batch struct {
	ID     string  `json:"batch_id"`
	SKU    string  `json:"sku"`
	Orders []Order `json:"orders"`
}

// An order's id is a ULID whose first batchIDLen characters are its batch's id: the ULID's time
// and 40 random bits of the batch's, then 40 random bits of the order's own. Two batches share an
// id once in 2^40 within one millisecond, and one order's id tells another's of its batch no
// better than one guess in 2^40.
const batchIDLen = 18

// NewBatch is an empty batch of sku with a fresh id.
func NewBatch(sku string) Batch {
	return Batch{ID: ulid.MustNew(ulid.Now(), rand.Reader).String()[:batchIDLen], SKU: sku}
}

// NewID mints the id of an order (or a checkout) of b.
func (b Batch) NewID() string {
	return b.ID + ulid.MustNew(ulid.Now(), rand.Reader).String()[batchIDLen:]
}

// BatchOf is the id of the batch the order orderID was minted in (NewID); false when orderID is
// no such id.
func BatchOf(orderID string) (string, bool) {
	if len(orderID) != ulid.EncodedSize {
		return "", false
	}
	if _, err := ulid.ParseStrict(orderID); err != nil {
		return "", false
	}
	return orderID[:batchIDLen], true
}

// Order is an accepted request as it travels on the queue in its batch and stands in its record:
// an order, or a checkout (Checkout) — an order is a checkout of one line. OrderID is the
// request's id, Lines its lines in SKU order (an order's one line bears the order's own id), and
// SKU its first line's, the subject it travels on; every line's admission reservation bears the
// request's id.
type Order struct {
	OrderID        string    `json:"order_id"`
	Checkout       bool      `json:"checkout,omitempty"`
	SKU            string    `json:"sku"`
	UserID         string    `json:"user_id"`
	Strategy       string    `json:"strategy,omitempty"`
	IdempotencyKey string    `json:"idempotency_key,omitempty"`
	Reservation    string    `json:"reservation,omitempty"` // its admission reservation
	AcceptedAt     time.Time `json:"accepted_at"`
	Lines          []Line    `json:"lines"`
}

// Line is one product of a request: the order its row will be.
type Line struct {
	OrderID  string `json:"order_id"`
	SKU      string `json:"sku"`
	Quantity int    `json:"quantity"`
}
