// Package keyqueue coalesces work by key: items of a key that arrive while a round of that key
// runs wait, and the next round takes up to n of them. Admission uses it for its Redis calls,
// the strategies' batcher for its critical sections: one call or one section serves many.
package keyqueue

import (
	"context"
	"slices"
	"sync"
)

// Queue holds, per key, the items waiting for that key's next round. The first item of an idle
// key starts its drainer, which runs rounds until no item is left: a round forms only where
// items pile up, and no item waits for more than the round before its own.
type Queue[T comparable] struct {
	most  int
	round func(key string, take func() []T)

	mu      sync.Mutex
	waiting map[string][]T // a key is present while a drainer runs for it
}

// New returns a queue whose rounds take at most most items (at least one). round runs on the
// drainer's goroutine, not on any waiter's context: the item that happened to start the drainer
// must not cut off everyone else's round. round calls take once, when it is ready for its
// items (at once, or once it holds a lock: those that arrived meanwhile ride along), and
// answers every item take returned. take may return none: they gave up since the drainer looked.
func New[T comparable](most int, round func(key string, take func() []T)) *Queue[T] {
	return &Queue[T]{most: max(1, most), round: round, waiting: map[string][]T{}}
}

// Await queues t under key, starting key's drainer if none runs, and waits until t's round has
// answered it (done closed). When ctx ends first, a t still waiting is taken out and never
// handed to a round (ctx's error); a t a round took is waited for, so that what its round did
// is never left behind.
func (q *Queue[T]) Await(ctx context.Context, key string, t T, done <-chan struct{}) error {
	return q.await(ctx, key, t, done, false)
}

// AwaitOverlapping is Await with a drainer of t's own, whether or not one runs for key: rounds
// of one key overlap, as requests with nothing in front of them would.
func (q *Queue[T]) AwaitOverlapping(ctx context.Context, key string, t T, done <-chan struct{}) error {
	return q.await(ctx, key, t, done, true)
}

func (q *Queue[T]) await(ctx context.Context, key string, t T, done <-chan struct{}, overlap bool) error {
	if q.add(key, t) || overlap {
		go q.drain(key)
	}
	select {
	case <-done:
		return nil
	case <-ctx.Done():
	}
	if q.remove(key, t) {
		return ctx.Err()
	}
	<-done
	return nil
}

// drain runs rounds over key until no item waits.
func (q *Queue[T]) drain(key string) {
	for q.busy(key) {
		q.round(key, func() []T { return q.take(key) })
	}
}

// add queues t under key, and reports whether the caller must start key's drainer.
func (q *Queue[T]) add(key string, t T) (start bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	w, running := q.waiting[key]
	q.waiting[key] = append(w, t)
	return !running
}

// busy reports whether items of key wait; when none does, the drainer ends and key is idle.
func (q *Queue[T]) busy(key string) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.waiting[key]) == 0 {
		delete(q.waiting, key)
		return false
	}
	return true
}

// take hands a round the first items of key, at most q.most.
func (q *Queue[T]) take(key string) []T {
	q.mu.Lock()
	defer q.mu.Unlock()
	w := q.waiting[key]
	n := min(len(w), q.most)
	if n == 0 {
		return nil
	}
	q.waiting[key] = w[n:]
	return w[:n:n]
}

// remove takes t out of key's queue, and reports whether it was still there (no round took it).
func (q *Queue[T]) remove(key string, t T) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	w := q.waiting[key]
	i := slices.Index(w, t)
	if i < 0 {
		return false
	}
	q.waiting[key] = slices.Delete(w, i, i+1)
	return true
}
