package orderqueue

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"sync"

	"github.com/nats-io/nats.go"
)

// watch is the one subscription an instance's waits share: every order's end is said once on
// saidSubjects (say), heard here, and passed to the waits of that order. A subscription of a
// wait's own would cost a subscribe and an unsubscribe at the server for every wait, and nats.go
// gives each synchronous subscription a buffer of 64k messages — half a megabyte that a sale's
// followers would allocate hundreds of times a second, for the garbage collector to scan.
//
// Only ends are said, and not stored: a placed order is in the database, a rejected one in its
// record, and an end that goes unheard (a lost connection) only makes a wait read them when it
// passes. The watch keeps the ends it heard last (heard): an end never changes, so a follower
// who asks after it and a writer handed its order again find it there.
type watch struct {
	prefix string
	mu     sync.Mutex
	waits  map[string]map[chan Record]struct{}
	recent [2]map[string][]byte // the ends heard last, newest first
}

// heardKept bounds each of the two generations of ends the watch keeps: at a sale's rate, a few
// seconds of them — a follower asks within moments of its 202 — in a few megabytes.
const heardKept = 8192

// saidSubjects is where the orders' ends are said: <it>.<order id>.
func saidSubjects(bucket string) string { return "seckill.said." + bucket }

// watchRecords subscribes to every order's end.
func (q *Queue) watchRecords() error {
	w := &watch{prefix: saidSubjects(q.cfg.Bucket) + ".", waits: map[string]map[chan Record]struct{}{},
		recent: [2]map[string][]byte{{}, {}}}
	if _, err := q.nc.Subscribe(w.prefix+">", w.said); err != nil {
		return fmt.Errorf("watch order ends %s: %w", q.cfg.Bucket, classify(err))
	}
	q.watch.Store(w)
	return nil
}

// say tells every instance's waits that the order ended as r (placed or rejected). It is not
// stored: a wait that misses it reads the order when its time passes.
func (q *Queue) say(r Record) {
	data, err := json.Marshal(r)
	if err != nil {
		return
	}
	if err := q.nc.Publish(saidSubjects(q.cfg.Bucket)+"."+r.OrderID, data); err != nil {
		q.log.Debug("order queue: an order's end not said; its followers read it when their wait passes", "order", r.OrderID, "err", err)
	}
}

// said takes in one order's end: it is kept, and passed to the order's waits.
func (w *watch) said(m *nats.Msg) {
	id := strings.TrimPrefix(m.Subject, w.prefix)
	// Kept, the record alone: m.Data shares its buffer with the rest of the read.
	data := bytes.Clone(m.Data)
	w.mu.Lock()
	if !w.keep(id, data) || len(w.waits[id]) == 0 {
		w.mu.Unlock()
		return
	}
	waits := make([]chan Record, 0, len(w.waits[id]))
	for ch := range w.waits[id] {
		waits = append(waits, ch)
	}
	w.mu.Unlock()
	// Decoded outside the lock, which every wait's listen, stop and first look take. A wait
	// that stopped meanwhile is told into its buffer, which nobody reads again.
	var said Record
	if json.Unmarshal(data, &said) != nil || !said.State.Final() {
		return
	}
	for _, ch := range waits {
		select {
		case ch <- said:
		default: // told already, and not yet read; a record ends once
		}
	}
}

// keep records data as the order's end, unless one was heard already (the same end, said
// again by a writer handed the order twice). It reports whether data was new. The caller holds
// w.mu.
func (w *watch) keep(id string, data []byte) bool {
	for _, gen := range w.recent {
		if _, ok := gen[id]; ok {
			return false
		}
	}
	if len(w.recent[0]) >= heardKept {
		w.recent[1], w.recent[0] = w.recent[0], make(map[string][]byte, heardKept)
	}
	w.recent[0][id] = data
	return true
}

// latest is the order's end as heard; false when none was heard lately.
func (w *watch) latest(id string) (Record, bool) {
	w.mu.Lock()
	data := w.heard(id)
	w.mu.Unlock()
	return decodeEnd(data)
}

// heard is the order's end as kept, nil when none was heard lately. The caller holds w.mu.
func (w *watch) heard(id string) []byte {
	if data, ok := w.recent[0][id]; ok {
		return data
	}
	return w.recent[1][id]
}

func decodeEnd(data []byte) (Record, bool) {
	var r Record
	if data == nil || json.Unmarshal(data, &r) != nil || !r.State.Final() {
		return Record{}, false
	}
	return r, true
}

// listen tells ch of every end said of the order from now on, until the returned stop, and
// returns the end heard before, if any. One look under the lock that said takes: an end is
// either heard before (returned) or told to ch, never both, never neither.
func (w *watch) listen(id string) (ch chan Record, stop func(), before Record, heard bool) {
	ch = make(chan Record, 1)
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.waits[id] == nil {
		w.waits[id] = map[chan Record]struct{}{}
	}
	w.waits[id][ch] = struct{}{}
	before, heard = decodeEnd(w.heard(id))
	return ch, func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		delete(w.waits[id], ch)
		if len(w.waits[id]) == 0 {
			delete(w.waits, id)
		}
	}, before, heard
}
