package orderqueue

import (
	"encoding/json"
	"fmt"
	"strings"
	"sync"

	"github.com/nats-io/nats.go"
)

// watch is the one subscription an instance's waits share: every write to the order records
// goes out on $KV.<bucket>.<order id>, and each is passed to the waits of that order. A
// subscription of a wait's own would cost a subscribe and an unsubscribe at the server for
// every wait, and nats.go gives each synchronous subscription a buffer of 64k messages — half a
// megabyte that a sale's followers allocated hundreds of times a second and the garbage
// collector then scanned (a third of a queued sale's service CPU in the profile, 2026-12-02).
type watch struct {
	prefix string
	sub    *nats.Subscription
	mu     sync.Mutex
	waits  map[string]map[chan struct{}]struct{}
}

// watchRecords subscribes to every write to the order records.
func (q *Queue) watchRecords() error {
	w := &watch{prefix: "$KV." + q.cfg.Bucket + ".", waits: map[string]map[chan struct{}]struct{}{}}
	sub, err := q.nc.Subscribe(w.prefix+">", w.said)
	if err != nil {
		return fmt.Errorf("watch order records %s: %w", q.cfg.Bucket, classify(err))
	}
	w.sub = sub
	q.watch = w
	return nil
}

// said passes a write to the order's waits when it says a final state. The subject alone is not
// the record: every conditional write is said there, the refused ones too — a second writer's
// "rejected" for an order the first one placed — so a wait only takes it as the cue to read the
// bucket.
func (w *watch) said(m *nats.Msg) {
	id := strings.TrimPrefix(m.Subject, w.prefix)
	w.mu.Lock()
	_, waited := w.waits[id]
	w.mu.Unlock()
	if !waited {
		return
	}
	var said Record
	if m.Header.Get("KV-Operation") != "" || json.Unmarshal(m.Data, &said) != nil || !said.State.Final() {
		return // a delete or purge (the TTL), or not an end
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for ch := range w.waits[id] {
		select {
		case ch <- struct{}{}:
		default: // told already, and not yet read
		}
	}
}

// listen tells ch of every final state said of the order, until the returned stop.
func (w *watch) listen(id string) (ch chan struct{}, stop func()) {
	ch = make(chan struct{}, 1)
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.waits[id] == nil {
		w.waits[id] = map[chan struct{}]struct{}{}
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
