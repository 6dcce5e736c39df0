package orderqueue

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/segmentio/encoding/json"
)

// State is where an accepted order is, or a batch.
type State string

// The states of an order: queued until a writer placed it (its row is in the database) or it
// was rejected (it never will be; its units are back on sale). Placed and rejected are final.
// A record is queued or rejected: placed is said (watch), never stored — the row says it. A
// batch is queued, or rejected whole: given up before any writer took it.
const (
	Queued   State = "queued"
	Placed   State = "placed"
	Rejected State = "rejected"
)

// Final reports whether the state is an order's last.
func (s State) Final() bool { return s == Placed || s == Rejected }

// Record is what the queue knows of one order (from its batch's record, BatchRecord.Of): the
// order, its state and, when rejected, why (an error code of the HTTP contract, e.g. sold_out). A
// placed order's end also says its row as the writer wrote it, so that its followers need not
// read it.
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

// BatchRecord is what the queue keeps of a batch, under its id, until its orders' rows say the
// rest: its orders, queued unless said otherwise, and the ends that no row says. A batch given up
// before any writer took it (State rejected, Reason why) was never accepted: none of its orders
// is written. A placed order's end is its row, never written here.
type BatchRecord struct {
	Batch
	State    State             `json:"state"`
	Reason   string            `json:"reason,omitempty"`
	Rejected map[string]string `json:"rejected,omitempty"` // orders of it a writer rejected: order id -> why
}

// Of is the record of the order orderID as r has it; false when r has no order of that id.
func (r BatchRecord) Of(orderID string) (Record, bool) {
	for _, o := range r.Orders {
		if o.OrderID != orderID {
			continue
		}
		switch why, rejected := r.Rejected[orderID]; {
		case rejected:
			return Record{Order: o, State: Rejected, Reason: why}, true
		case r.State == Rejected:
			return Record{Order: o, State: Rejected, Reason: r.Reason}, true
		}
		return Record{Order: o, State: Queued}, true
	}
	return Record{}, false
}

// ends are the records of r's orders that it ends (rejected), among ids (all of them when nil).
func (r BatchRecord) ends(ids map[string]string) []Record {
	var out []Record
	for _, o := range r.Orders {
		if rec, _ := r.Of(o.OrderID); rec.State.Final() && (ids == nil || ids[o.OrderID] != "") {
			out = append(out, rec)
		}
	}
	return out
}

// Record writes r as its batch's first record, unless the batch has one: it returns the record
// that stands — r, or the one written before. A write not answered is tried again while ctx
// allows, as a publish is: one that landed is then the record that stands.
//
// Whoever writes first decides who resolves the units of the batch's orders. Neither the
// database (no row yet) nor the stream (not searchable by order) can tell a batch whose message
// went out from one whose message never will; the first record can:
//
//   - the admitting instance publishes the batch, then records it queued, then answers its 202s;
//   - a writer records it queued (if nobody has) before it places its orders, and drops a message
//     whose record says given up;
//   - a sweeper that finds a lapsed reservation with no order row records its batch given up
//     (rejected) and returns its units only if that record stands. A queued record means the
//     message went out: a writer settles or gives back the reservation, and returning it too
//     would sell the unit twice.
//
// So each crash point has one ending (docs/strategies.md, queued in detail).
func (q *Queue) Record(ctx context.Context, r BatchRecord) (BatchRecord, error) {
	got, _, err := q.record(ctx, r)
	return got, err
}

// record is Record, with the revision of the record that stands.
func (q *Queue) record(ctx context.Context, r BatchRecord) (BatchRecord, uint64, error) {
	data, err := json.Marshal(r)
	if err != nil {
		return BatchRecord{}, 0, err
	}
	var rev uint64
	err = q.untilAnswered(ctx, "record", r.ID, func(ctx context.Context) error {
		rev, err = q.records.Create(ctx, r.ID, data)
		return err
	})
	switch {
	case err == nil:
		if ends := r.ends(nil); len(ends) > 0 {
			q.say(ends...)
		}
		w := q.watch.Load()
		for _, o := range r.Orders {
			if rec, _ := r.Of(o.OrderID); !rec.State.Final() {
				w.recorded(o.OrderID)
			}
		}
		return r, rev, nil
	case errors.Is(err, jetstream.ErrKeyExists):
		return q.getBatch(ctx, r.ID)
	default:
		return BatchRecord{}, 0, fmt.Errorf("record batch %s: %w", r.ID, err)
	}
}

// Claimed is the record of a batch a writer holds, as it stood when the writer took it.
type Claimed struct {
	BatchRecord
	rev uint64
}

// Unread is the claim of a writer that need not read the record of b (its publisher's queued one
// stood): b queued, with no end yet. Reject reads the record when it must.
func Unread(b Batch) Claimed {
	return Claimed{BatchRecord: BatchRecord{Batch: b, State: Queued}}
}

// Claim is a writer's first step on a batch it was handed: the record that stands — the
// publisher's queued one, read (one request), or, when the batch has none (its publisher died
// before writing it), written queued now unless a sweeper's rejection came first. Decide its
// orders from there.
func (q *Queue) Claim(ctx context.Context, b Batch) (Claimed, error) {
	r, rev, err := q.getBatch(ctx, b.ID)
	if errors.Is(err, ErrNotFound) {
		r, rev, err = q.record(ctx, BatchRecord{Batch: b, State: Queued})
	}
	return Claimed{BatchRecord: r, rev: rev}, err
}

// Reject ends orders of a claimed batch rejected, each for its reason in why (order id -> an
// error code of the HTTP contract), in one write of the batch's record, and says so to their
// followers (watch). An order already ended in the record keeps the end that stands. It returns
// the record that stands. From a claim the record as it stood then is replaced in one request,
// unless it changed since; a batch given up (never accepted) stands as it is.
//
// A writer places an order only once it claimed its batch queued, and rejects one only once the
// database said it does not have it: so an order is never both rejected in its record and placed
// in its row.
func (q *Queue) Reject(ctx context.Context, from Claimed, why map[string]string) (BatchRecord, error) {
	got, rev := from.BatchRecord, from.rev
	var err error
	if rev == 0 {
		got, rev, err = q.getBatch(ctx, from.ID)
	}
	for {
		var next BatchRecord
		switch {
		case errors.Is(err, ErrNotFound):
			next = BatchRecord{Batch: from.Batch, State: Queued}
		case err != nil:
			return BatchRecord{}, err
		case got.State == Rejected:
			return got, nil
		default:
			next = got
		}
		added := map[string]string{}
		next.Rejected = maps.Clone(next.Rejected)
		for id, reason := range why {
			if _, ended := next.Rejected[id]; !ended {
				if next.Rejected == nil {
					next.Rejected = map[string]string{}
				}
				next.Rejected[id], added[id] = reason, reason
			}
		}
		if len(added) == 0 {
			return next, nil
		}
		data, merr := json.Marshal(next)
		if merr != nil {
			return BatchRecord{}, merr
		}
		if errors.Is(err, ErrNotFound) {
			_, err = q.records.Create(ctx, from.ID, data)
		} else {
			_, err = q.records.Update(ctx, from.ID, data, rev)
		}
		if err == nil {
			ends := next.ends(added)
			q.say(ends...)
			q.orders.WithLabelValues(string(Rejected)).Add(float64(len(ends)))
			return next, nil
		}
		if !errors.Is(err, jetstream.ErrKeyExists) && !errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
			return BatchRecord{}, fmt.Errorf("reject orders of batch %s: %w", from.ID, classify(err))
		}
		// Another writer or a sweeper wrote in between: read what stands now.
		got, rev, err = q.getBatch(ctx, from.ID)
	}
}

// Placed ends orders that a writer placed: their rows are their records, and their ends are said
// to their followers together.
func (q *Queue) Placed(rs ...Record) {
	if len(rs) == 0 {
		return
	}
	q.say(rs...)
	q.orders.WithLabelValues(string(Placed)).Add(float64(len(rs)))
}

// Get reads the record of an order, from its batch's; ErrNotFound when it has none.
func (q *Queue) Get(ctx context.Context, orderID string) (Record, error) {
	id, ok := BatchOf(orderID)
	if !ok {
		return Record{}, fmt.Errorf("order %s: %w", orderID, ErrNotFound)
	}
	b, _, err := q.getBatch(ctx, id)
	if err != nil {
		return Record{}, fmt.Errorf("order %s: %w", orderID, err)
	}
	r, ok := b.Of(orderID)
	if !ok {
		return Record{}, fmt.Errorf("order %s not in batch %s: %w", orderID, id, ErrNotFound)
	}
	return r, nil
}

// GetBatch reads the record of the batch id; ErrNotFound when it has none.
func (q *Queue) GetBatch(ctx context.Context, id string) (BatchRecord, error) {
	r, _, err := q.getBatch(ctx, id)
	return r, err
}

// readAttempt bounds one read of a record: a bucket that does not answer at once is asked again
// by a writer (its delivery comes back), and a buyer's read falls back to the database.
const readAttempt = time.Second

func (q *Queue) getBatch(ctx context.Context, id string) (BatchRecord, uint64, error) {
	ctx, cancel := context.WithTimeout(ctx, readAttempt)
	defer cancel()
	e, err := q.records.Get(ctx, id)
	if errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrInvalidKey) {
		return BatchRecord{}, 0, fmt.Errorf("batch %s: %w", id, ErrNotFound)
	}
	if err != nil {
		return BatchRecord{}, 0, fmt.Errorf("batch %s: %w", id, classify(err))
	}
	var r BatchRecord
	if err := json.Unmarshal(e.Value(), &r); err != nil {
		return BatchRecord{}, 0, fmt.Errorf("batch record %s: %w", e.Key(), err)
	}
	return r, e.Revision(), nil
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
