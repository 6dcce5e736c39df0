package orderqueue

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// State is where an accepted order is.
type State string

// The states of an order: queued until a writer placed it (its row is in the database) or it
// was rejected (it never will be; its units are back on sale). Placed and rejected are final.
// A record is queued or rejected: placed is said (watch), never stored — the row says it.
const (
	Queued   State = "queued"
	Placed   State = "placed"
	Rejected State = "rejected"
)

// Final reports whether the state is an order's last.
func (s State) Final() bool { return s == Placed || s == Rejected }

// Record is what the queue knows of an order: the order, its state and, when rejected, why (an
// error code of the HTTP contract, e.g. sold_out). A placed order's end also says its row as
// the writer wrote it, so that its followers need not read it.
type Record struct {
	Order
	State  State  `json:"state"`
	Reason string `json:"reason,omitempty"`
	Row    *Row   `json:"row,omitempty"`
}

// Row is a placed order's row as its writer wrote it: its status then (pending or confirmed),
// its payment deadline while pending, and when it was written.
type Row struct {
	Status    string    `json:"status"`
	ExpiresAt time.Time `json:"expires_at,omitzero"`
	CreatedAt time.Time `json:"created_at"`
}

// Record writes r as the order's first record, unless the order has one: it returns the record
// that stands — r, or the one written before. A write not answered is tried again while ctx
// allows, as a publish is: one that landed is then the record that stands.
//
// Whoever writes first decides who resolves the order's units. Neither the database (no row
// yet) nor the stream (not searchable by order id) can tell an order whose message went out from
// one whose message never will; the first record can:
//
//   - the admitting instance publishes, then records the order queued, then answers 202;
//   - a writer records it queued (if nobody has) before it places it, and drops a message whose
//     record says rejected;
//   - a sweeper that finds a lapsed reservation with no order row records the order rejected
//     and returns its units only if that record stands. A queued record means the message went
//     out: a writer settles or gives back the reservation, and returning it too would sell the
//     unit twice.
//
// So each crash point has one ending (docs/strategies.md, queued in detail).
func (q *Queue) Record(ctx context.Context, r Record) (Record, error) {
	got, _, err := q.record(ctx, r)
	return got, err
}

// record is Record, with the revision of the record that stands.
func (q *Queue) record(ctx context.Context, r Record) (Record, uint64, error) {
	data, err := json.Marshal(r)
	if err != nil {
		return Record{}, 0, err
	}
	var rev uint64
	err = q.untilAnswered(ctx, "record", r.OrderID, func(ctx context.Context) error {
		rev, err = q.records.Create(ctx, r.OrderID, data)
		return err
	})
	switch {
	case err == nil:
		if r.State.Final() {
			q.say(r)
		} else {
			q.watch.Load().recorded(r.OrderID)
		}
		return r, rev, nil
	case errors.Is(err, jetstream.ErrKeyExists):
		return q.get(ctx, r.OrderID)
	default:
		return Record{}, 0, fmt.Errorf("record order %s: %w", r.OrderID, err)
	}
}

// Claimed is the record of an order a writer holds, as it stood when the writer took it.
type Claimed struct {
	Record
	rev uint64
}

// Claim is a writer's first step on an order it was handed: the record that stands — the
// publisher's queued one, read (one request), or, when the order has none (its publisher died
// before writing it), written queued now unless a sweeper's rejection came first. Finish it from
// there.
func (q *Queue) Claim(ctx context.Context, o Order) (Claimed, error) {
	if r, ok := q.watch.Load().latest(o.OrderID); ok {
		// An end never changes: as heard, it stands.
		return Claimed{Record: r}, nil
	}
	r, rev, err := q.get(ctx, o.OrderID)
	if errors.Is(err, ErrNotFound) {
		r, rev, err = q.record(ctx, Record{Order: o, State: Queued})
	}
	return Claimed{Record: r, rev: rev}, err
}

// Finish ends the order as r, and says so to its followers (watch). A placed order's row is its
// record from then on: placed is said, not written, and the row is read for it. A rejection
// moves the order's record to rejected from queued, or writes it if there is none; a record
// that is rejected already stands. It returns the record that stands. From a claim the record as
// it stood then is replaced in one request, unless it changed since.
//
// A writer places an order only once it claimed it queued, and rejects one only once the
// database said it does not have it: so an order is never both rejected in its record and
// placed in its row.
func (q *Queue) Finish(ctx context.Context, from Claimed, r Record) (Record, error) {
	switch r.State {
	case Placed:
		q.Placed(r)
		return r, nil
	case Rejected:
	default:
		return Record{}, fmt.Errorf("finish order %s as %q: not a final state", r.OrderID, r.State)
	}
	data, err := json.Marshal(r)
	if err != nil {
		return Record{}, err
	}
	got, rev := from.Record, from.rev
	if rev == 0 {
		got, rev, err = q.get(ctx, r.OrderID)
	}
	for {
		switch {
		case errors.Is(err, ErrNotFound):
			_, err = q.records.Create(ctx, r.OrderID, data)
		case err != nil:
			return Record{}, err
		case got.State.Final():
			return got, nil
		default:
			_, err = q.records.Update(ctx, r.OrderID, data, rev)
		}
		if err == nil {
			q.say(r)
			q.orders.WithLabelValues(string(r.State)).Inc()
			return r, nil
		}
		if !errors.Is(err, jetstream.ErrKeyExists) && !errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
			return Record{}, fmt.Errorf("finish order %s: %w", r.OrderID, classify(err))
		}
		// Another writer or a sweeper wrote in between: read what stands now.
		got, rev, err = q.get(ctx, r.OrderID)
	}
}

// Placed ends orders that a writer placed, as Finish does one: their rows are their records, and
// their ends are said to their followers together.
func (q *Queue) Placed(rs ...Record) {
	if len(rs) == 0 {
		return
	}
	q.say(rs...)
	q.orders.WithLabelValues(string(Placed)).Add(float64(len(rs)))
}

// Get reads the order's record; ErrNotFound when it has none.
func (q *Queue) Get(ctx context.Context, orderID string) (Record, error) {
	r, _, err := q.get(ctx, orderID)
	return r, err
}

// readAttempt bounds one read of a record: a bucket that does not answer at once is asked again
// by a writer (its delivery comes back), and a buyer's read falls back to the database.
const readAttempt = time.Second

func (q *Queue) get(ctx context.Context, orderID string) (Record, uint64, error) {
	ctx, cancel := context.WithTimeout(ctx, readAttempt)
	defer cancel()
	e, err := q.records.Get(ctx, orderID)
	if errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrInvalidKey) {
		return Record{}, 0, fmt.Errorf("order %s: %w", orderID, ErrNotFound)
	}
	if err != nil {
		return Record{}, 0, fmt.Errorf("order %s: %w", orderID, classify(err))
	}
	r, err := decode(e)
	return r, e.Revision(), err
}

func decode(e jetstream.KeyValueEntry) (Record, error) {
	var r Record
	if err := json.Unmarshal(e.Value(), &r); err != nil {
		return Record{}, fmt.Errorf("order record %s: %w", e.Key(), err)
	}
	return r, nil
}

// Wait returns the order's end once it is said, or its record as it stands when wait passes
// (queued: placed is not stored, and the caller reads the row); ErrNotFound when the order has
// no record by then. It listens on the instance's one watch of the orders' ends (watch), so that
// any instance's writer ends the wait at once. An end the watch heard before answers the first
// look without a read; a placed one comes without its row then (Row nil), which may have moved on
// since (paid, cancelled). An order this instance recorded queued is not read first either: it
// is queued until its end is said (a buyer follows its 202 where it was answered). A JetStream watch would create a consumer for every wait, whose cost
// grows with the records the bucket holds.
func (q *Queue) Wait(ctx context.Context, orderID string, wait time.Duration) (Record, error) {
	return q.wait(ctx, orderID, wait, false)
}

// WaitRecorded is Wait for an order that has a record: ErrNotFound at once when it has none.
func (q *Queue) WaitRecorded(ctx context.Context, orderID string, wait time.Duration) (Record, error) {
	return q.wait(ctx, orderID, wait, true)
}

func (q *Queue) wait(ctx context.Context, orderID string, wait time.Duration, recorded bool) (Record, error) {
	if !validKey(orderID) {
		return Record{}, fmt.Errorf("order %s: %w", orderID, ErrNotFound)
	}
	parent := ctx
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	w := q.watch.Load()
	said, stop, r, heard, queued := w.listen(orderID)
	defer stop()
	var err error
	switch {
	case heard:
		r.Row = nil
	case !queued:
		r, err = q.Get(ctx, orderID)
	}
	switch {
	case err == nil && r.State.Final():
		return r, nil
	case errors.Is(err, ErrNotFound) && recorded:
		return Record{}, err
	case err != nil && !errors.Is(err, ErrNotFound) && ctx.Err() == nil:
		return Record{}, err
	}
	for ctx.Err() == nil {
		select {
		case <-ctx.Done():
			continue // the wait passed
		case r := <-said:
			return r, nil // final, as said
		}
	}
	if parent.Err() != nil {
		return Record{}, fmt.Errorf("watch order %s: %w", orderID, classify(parent.Err()))
	}
	return q.now(parent, orderID)
}

// now reads the order's record once, within two seconds of ctx.
func (q *Queue) now(ctx context.Context, orderID string) (Record, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	return q.Get(ctx, orderID)
}

// validKey reports whether id can be one record's key: no wildcard, which would watch many.
func validKey(id string) bool {
	if id == "" || strings.HasPrefix(id, ".") || strings.HasSuffix(id, ".") {
		return false
	}
	for _, c := range id {
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', strings.ContainsRune("-/_=.", c):
		default:
			return false
		}
	}
	return true
}
