package orderqueue

import (
	"fmt"
	"sync"

	"github.com/nats-io/nats.go"
	"github.com/segmentio/encoding/json"
)

// watch is the one subscription an instance's waits share: the orders' ends are said on
// saidSubjects (say), a writer's batch in one message, heard here, and passed to the waits of
// each order. A subscription of a wait's own would cost a subscribe and an unsubscribe at the
// server for every wait, and nats.go gives each synchronous subscription a buffer of 64k
// messages — half a megabyte that a sale's followers would allocate hundreds of times a second,
// for the garbage collector to scan.
//
// Only ends are said, and not stored: a placed order is in the database, a rejected one in its
// record, and an end that goes unheard (a lost connection) only makes a wait read them when it
// passes. The watch keeps the ends it heard last (heard): an end never changes, so a follower
// who asks after it and a writer handed its order again find it there.
type watch struct {
	subject string
	mu      sync.Mutex
	waits   map[string]map[chan Record]struct{}
	recent  [2]map[string]Record // the ends heard last, newest first
	// The orders this instance recorded queued lately, newest first: a wait on one of them
	// need not read its record first — it is queued until its end is said.
	mine [2]map[string]struct{}
}

// heardKept bounds each of the two generations of ends the watch keeps: at a sale's rate, a few
// seconds of them — a follower asks within moments of its 202 — in a few megabytes.
const heardKept = 8192

// saidSubject is where the orders' ends are said.
func saidSubject(bucket string) string { return "seckill.said." + bucket }

// watchRecords subscribes to the orders' ends.
func (q *Queue) watchRecords() error {
	w := &watch{subject: saidSubject(q.cfg.Bucket), waits: map[string]map[chan Record]struct{}{},
		recent: [2]map[string]Record{{}, {}}, mine: [2]map[string]struct{}{{}, {}}}
	if _, err := q.nc.Subscribe(w.subject, w.said); err != nil {
		return fmt.Errorf("watch order ends %s: %w", q.cfg.Bucket, classify(err))
	}
	q.watch.Store(w)
	return nil
}

// say tells every instance's waits that the orders ended as rs (placed or rejected), in one
// message: a writer's batch costs the server and every instance one message, not one per order.
// It is not stored: a wait that misses it reads the order when its time passes.
func (q *Queue) say(rs ...Record) {
	data, err := json.Marshal(rs)
	if err != nil {
		return
	}
	if err := q.nc.Publish(saidSubject(q.cfg.Bucket), data); err != nil {
		q.log.Debug("order queue: orders' ends not said; their followers read them when their wait passes", "orders", len(rs), "err", err)
	}
}

// said takes in the ends of a batch: each is kept, and passed to its order's waits.
func (w *watch) said(m *nats.Msg) {
	var ends []Record
	if json.Unmarshal(m.Data, &ends) != nil {
		return
	}
	for _, r := range ends {
		if !r.State.Final() {
			continue
		}
		w.mu.Lock()
		if !w.keep(r) || len(w.waits[r.OrderID]) == 0 {
			w.mu.Unlock()
			continue
		}
		waits := make([]chan Record, 0, len(w.waits[r.OrderID]))
		for ch := range w.waits[r.OrderID] {
			waits = append(waits, ch)
		}
		w.mu.Unlock()
		// A wait that stopped meanwhile is told into its buffer, which nobody reads again.
		for _, ch := range waits {
			select {
			case ch <- r:
			default: // told already, and not yet read; a record ends once
			}
		}
	}
}

// keep records r as its order's end, unless one was heard already (the same end, said again by
// a writer handed the order twice). It reports whether r was new. The caller holds w.mu.
func (w *watch) keep(r Record) bool {
	for _, gen := range w.recent {
		if _, ok := gen[r.OrderID]; ok {
			return false
		}
	}
	if len(w.recent[0]) >= heardKept {
		w.recent[1], w.recent[0] = w.recent[0], make(map[string]Record, heardKept)
	}
	w.recent[0][r.OrderID] = r
	return true
}

// recorded notes that this instance recorded the order queued.
func (w *watch) recorded(id string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.mine[0]) >= heardKept {
		w.mine[1], w.mine[0] = w.mine[0], make(map[string]struct{}, heardKept)
	}
	w.mine[0][id] = struct{}{}
}

// latest is the order's end as heard; false when none was heard lately.
func (w *watch) latest(id string) (Record, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.heard(id)
}

// heard is the order's end as kept; false when none was heard lately. The caller holds w.mu.
func (w *watch) heard(id string) (Record, bool) {
	if r, ok := w.recent[0][id]; ok {
		return r, true
	}
	r, ok := w.recent[1][id]
	return r, ok
}

// listen tells ch of every end said of the order from now on, until the returned stop, and
// returns the end heard before, if any, or whether this instance recorded it queued. One look
// under the lock that said takes: an end is either heard before (returned) or told to ch, never
// both, never neither.
func (w *watch) listen(id string) (ch chan Record, stop func(), before Record, heard, queued bool) {
	ch = make(chan Record, 1)
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.waits[id] == nil {
		w.waits[id] = map[chan Record]struct{}{}
	}
	w.waits[id][ch] = struct{}{}
	before, heard = w.heard(id)
	_, queued = w.mine[0][id]
	if _, older := w.mine[1][id]; older {
		queued = true
	}
	return ch, func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		delete(w.waits[id], ch)
		if len(w.waits[id]) == 0 {
			delete(w.waits, id)
		}
	}, before, heard, queued
}
