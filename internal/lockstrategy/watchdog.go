package lockstrategy

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/flashsale/seckill/internal/planted"
	"github.com/flashsale/seckill/internal/stock"
)

// errLockLost is the cause given to a critical section whose lock could not be extended.
var errLockLost = errors.New("lock lost")

// watchdog keeps a lock with an expiry alive while its section runs, as Redisson's watchdog
// does: extend is called every period. The expiry itself can then be short — a holder that
// stops (crash, GC pause, a frozen VM, SIGSTOP) stops extending, and the others get the lock
// once it runs out — while a live section holds the lock for as long as it needs. If an
// extension fails, the lock may already belong to someone else, so the section is cancelled: a
// section that has not written yet abandons its write, and one that is writing is stopped by the
// version guard if another holder has written since. stop must be called before the lock is
// used again.
func (m *LockMetrics) watchdog(ctx context.Context, strategy, key string, period time.Duration,
	extend func(context.Context) error) (section context.Context, stop func()) {
	section, cancel := context.WithCancelCause(ctx)
	if planted.On(planted.NoWatchdog) {
		return section, func() { cancel(nil) }
	}
	done, exited := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(exited)
		tick := time.NewTicker(period)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
				extendCtx, cancelExtend := context.WithTimeout(context.WithoutCancel(ctx), period)
				err := extend(extendCtx)
				cancelExtend()
				if err != nil {
					m.log.Warn("lock extension failed; abandoning the critical section", "strategy", strategy, "key", key, "err", err)
					cancel(fmt.Errorf("%w: extend: %w", errLockLost, err))
					return
				}
				m.extended(strategy)
			}
		}
	}()
	return section, func() {
		close(done)
		<-exited
		cancel(nil)
	}
}

// abandoned turns the failures of a section whose lock was lost mid-way into busy: nothing of
// them was written, and the client may retry. Orders it did write, and sold-out answers, stand.
func abandoned(section context.Context, key string, placed []stock.Placed) {
	if !errors.Is(context.Cause(section), errLockLost) {
		return
	}
	for i := range placed {
		if placed[i].Err != nil && !errors.Is(placed[i].Err, stock.ErrSoldOut) {
			placed[i].Err = fmt.Errorf("lock %s lost mid-section, section abandoned: %w", key, stock.ErrBusy)
		}
	}
}
