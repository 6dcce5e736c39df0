package lock

import (
	"context"
	"sync"
	"time"
)

// Turns keeps an instance from taking back at once a lock it has just released. Locks without
// a queue of their own — a Redis key, a lock-table row — are won by whoever tries first, and
// under group commit the releaser tries first: its next batch is already queued, while the
// waiters of other instances are between polls or waiting for a release message. Left alone it
// would win again and again, and their orders would wait out several sections — the tail of the
// latency. So the releaser waits about as long as a waiter needs to notice, then tries.
type Turns struct {
	mu       sync.Mutex
	released map[string]time.Time // by key: when this instance last let it go
}

// NewTurns returns the turns of one instance.
func NewTurns() *Turns { return &Turns{released: map[string]time.Time{}} }

// Done records that this instance released key. Keys not locked again are forgotten once there
// are many: an entry only matters for a few milliseconds.
func (t *Turns) Done(key string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := time.Now()
	if len(t.released) >= 1024 {
		for k, at := range t.released {
			if now.Sub(at) > time.Second {
				delete(t.released, k)
			}
		}
	}
	t.released[key] = now
}

// Wait waits until pause has passed since this instance released key, if it did.
func (t *Turns) Wait(ctx context.Context, key string, pause time.Duration) {
	t.mu.Lock()
	at, ok := t.released[key]
	delete(t.released, key)
	t.mu.Unlock()
	if !ok || time.Since(at) >= pause {
		return
	}
	select {
	case <-time.After(pause - time.Since(at)):
	case <-ctx.Done():
	}
}
