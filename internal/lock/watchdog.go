package lock

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/flashsale/seckill/internal/planted"
)

// A Watchdog keeps a lock with an expiry of its own (a Redis key, a lock-table row) alive while
// it is held, as Redisson's does: it extends the lock every period. The expiry can then be short
// — a holder that stops (crash, GC pause, a frozen VM, SIGSTOP) stops extending, and the others
// get the lock once it runs out — while a live section holds the lock as long as it needs. When
// an extension fails, the lock may already belong to someone else: Lost closes.
type Watchdog struct {
	lost   chan struct{}
	done   chan struct{}
	exited chan struct{}
	stop   sync.Once
}

// Watch starts the watchdog of the lock named key, which extend pushes out by another expiry,
// every period. ctx carries the values of the acquisition; its end does not stop the watchdog.
func Watch(ctx context.Context, key string, period time.Duration, extend func(context.Context) error, obs Observer) *Watchdog {
	w := &Watchdog{lost: make(chan struct{}), done: make(chan struct{}), exited: make(chan struct{})}
	if planted.On(planted.NoWatchdog) {
		close(w.exited)
		return w
	}
	go func() {
		defer close(w.exited)
		tick := time.NewTicker(period)
		defer tick.Stop()
		for {
			select {
			case <-w.done:
				return
			case <-tick.C:
				extendCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), period)
				err := extend(extendCtx)
				cancel()
				if err != nil {
					obs.Refused(key, fmt.Errorf("extend: %w", err))
					close(w.lost)
					return
				}
				obs.Extended()
			}
		}
	}()
	return w
}

// Lost is closed when an extension failed.
func (w *Watchdog) Lost() <-chan struct{} { return w.lost }

// Stop ends the watchdog and waits for an extension under way; call it before the release.
func (w *Watchdog) Stop() {
	w.stop.Do(func() { close(w.done) })
	<-w.exited
}
