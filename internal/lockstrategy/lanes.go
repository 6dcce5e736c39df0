package lockstrategy

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/flashsale/seckill/internal/stock"
)

// lanes serialises work per key inside one process: at most one goroutine per key holds its
// lane, the others wait (bounded by their context). In front of a distributed lock it means one
// waiter per instance and SKU instead of one per request — the rest queue in memory, where
// waiting is free, rather than polling Redis or etcd.
type lanes struct {
	mu sync.Mutex
	m  map[string]*lane
}

type lane struct {
	slot chan struct{}
	refs int // goroutines holding or waiting for the lane; it is dropped at zero
}

func newLanes() *lanes { return &lanes{m: map[string]*lane{}} }

// acquire waits for key's lane. The returned release must be called exactly once.
func (l *lanes) acquire(ctx context.Context, key string) (release func(), err error) {
	l.mu.Lock()
	ln := l.m[key]
	if ln == nil {
		ln = &lane{slot: make(chan struct{}, 1)}
		l.m[key] = ln
	}
	ln.refs++
	l.mu.Unlock()
	select {
	case ln.slot <- struct{}{}:
		return func() { <-ln.slot; l.leave(key, ln) }, nil
	case <-ctx.Done():
		l.leave(key, ln)
		return nil, ctx.Err()
	}
}

func (l *lanes) leave(key string, ln *lane) {
	l.mu.Lock()
	if ln.refs--; ln.refs == 0 {
		delete(l.m, key)
	}
	l.mu.Unlock()
}

// waitFailed maps a wait for a lane or a lock that ran out of budget to busy, unless the request
// itself is gone (then its own error is returned: nobody is waiting for a busy answer).
func waitFailed(ctx context.Context, key string, budget time.Duration, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return fmt.Errorf("lock %s: waited %s: %w: %w", key, budget, stock.ErrBusy, err)
}
