package orderqueue

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"sync"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// watch is the one subscription an instance's waits share: every write to the order records is
// heard once, and passed to the waits of that order. A subscription of a wait's own would cost a
// subscribe and an unsubscribe at the server for every wait, and nats.go gives each synchronous
// subscription a buffer of 64k messages — half a megabyte that a sale's followers would allocate
// hundreds of times a second, for the garbage collector to scan.
//
// The records bucket republishes every write it stored (RePublish, to saidSubjects): each message
// is the record itself at its revision (Nats-Sequence), so a wait ends on it without reading the
// bucket, and the watch keeps the records it heard last (heard) — a follower's first read and a
// writer's Claim find them there.
type watch struct {
	prefix string
	sub    *nats.Subscription
	mu     sync.Mutex
	waits  map[string]map[chan Record]struct{}
	recent [2]map[string]heard // the records heard last, newest first
}

// heard is a stored record the watch heard, at its revision.
type heard struct {
	data []byte
	rev  uint64
}

// heardKept bounds each of the two generations of records the watch keeps: at a sale's rate of
// two writes an order, a few seconds of them — a follower asks within moments of its 202, a
// writer within its order's time in the queue — in a few megabytes.
const heardKept = 8192

// saidSubjects is where the records bucket republishes its stored writes: <it>.<order id>.
func saidSubjects(bucket string) string { return "seckill.records." + bucket }

// recordsRePublish is the RePublish of the records bucket.
func recordsRePublish(bucket string) *jetstream.RePublish {
	return &jetstream.RePublish{Source: "$KV." + bucket + ".>", Destination: saidSubjects(bucket) + ".>"}
}

// watchRecords subscribes to every stored write to the order records, which the bucket
// republishes to saidSubjects.
func (q *Queue) watchRecords() error {
	w := &watch{prefix: saidSubjects(q.cfg.Bucket) + ".", waits: map[string]map[chan Record]struct{}{},
		recent: [2]map[string]heard{{}, {}}}
	sub, err := q.nc.Subscribe(w.prefix+">", w.said)
	if err != nil {
		return fmt.Errorf("watch order records %s: %w", q.cfg.Bucket, classify(err))
	}
	w.sub = sub
	q.watch.Store(w)
	return nil
}

// said takes in one stored write: it is kept as the order's latest record, and a final one is
// passed to the order's waits.
func (w *watch) said(m *nats.Msg) {
	id := strings.TrimPrefix(m.Subject, w.prefix)
	deleted := m.Header.Get("KV-Operation") != "" // a delete or purge (the TTL)
	rev, err := strconv.ParseUint(m.Header.Get(jetstream.SequenceHeader), 10, 64)
	if err != nil {
		return
	}
	// Kept, the record alone: m.Data shares its buffer with the message's headers, which are as
	// long again.
	h := heard{data: bytes.Clone(m.Data), rev: rev}
	w.mu.Lock()
	if !w.keep(id, h, deleted) || deleted || len(w.waits[id]) == 0 {
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
	if json.Unmarshal(h.data, &said) != nil || !said.State.Final() {
		return
	}
	for _, ch := range waits {
		select {
		case ch <- said:
		default: // told already, and not yet read; a record ends once
		}
	}
}

// keep records h as the order's latest, unless a later revision was heard first; a delete
// forgets the order. It reports whether h is the latest. The caller holds w.mu.
func (w *watch) keep(id string, h heard, deleted bool) bool {
	for _, gen := range w.recent {
		if was, ok := gen[id]; ok && was.rev >= h.rev {
			return false
		}
	}
	delete(w.recent[1], id)
	if deleted {
		delete(w.recent[0], id)
		return true
	}
	if len(w.recent[0]) >= heardKept {
		w.recent[1], w.recent[0] = w.recent[0], make(map[string]heard, heardKept)
	}
	w.recent[0][id] = h
	return true
}

// latest is the order's record as last heard, with its revision; false when none was heard
// lately.
func (w *watch) latest(id string) (Record, uint64, bool) {
	w.mu.Lock()
	h, ok := w.recent[0][id]
	if !ok {
		h, ok = w.recent[1][id]
	}
	w.mu.Unlock()
	var r Record
	if !ok || json.Unmarshal(h.data, &r) != nil {
		return Record{}, 0, false
	}
	return r, h.rev, true
}

// forget drops every record heard: the connection was lost, and the writes made meanwhile were
// not heard, so a record kept may no longer be the latest.
func (w *watch) forget() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.recent = [2]map[string]heard{{}, {}}
}

// listen tells ch of every final state said of the order, until the returned stop.
func (w *watch) listen(id string) (ch chan Record, stop func()) {
	ch = make(chan Record, 1)
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.waits[id] == nil {
		w.waits[id] = map[chan Record]struct{}{}
	}
	w.waits[id][ch] = struct{}{}
	return ch, func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		delete(w.waits[id], ch)
		if len(w.waits[id]) == 0 {
			delete(w.waits, id)
		}
	}
}
