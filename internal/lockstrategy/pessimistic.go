package lockstrategy

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/flashsale/seckill/internal/stock"
)

// Pessimistic serialises orders with the database's own row lock: one transaction takes the
// row with SELECT ... FOR UPDATE NOWAIT, decides, decrements and inserts. A held row fails at
// once, so no connections pile up behind the hot row; the section retries after a jittered
// pause, and answers busy after the wait. stock.WaitForRow waits in the row's queue instead.
type Pessimistic struct {
	rowLock stock.RowWait
	batched // its runner has no Locker: the row lock is taken by the write
}

// NewPessimistic returns the pessimistic strategy over store; rowLock says what a section does
// when the row is held (both try again within opts.Wait). The row lock is its own guard:
// nobody else can change the row while it is held.
func NewPessimistic(store *stock.Store, rowLock stock.RowWait, opts Options, metrics *LockMetrics) *Pessimistic {
	p := &Pessimistic{rowLock: rowLock, batched: batched{run: newRunner("pessimistic", store, nil, Version, opts, metrics)}}
	p.run.readFirst = true
	p.batch = newBatcher(p.run, p.section)
	return p
}

// section is the critical section: one transaction takes the rows of skus in SKU order
// (stock.Store.PlaceLocked), then the requests, so those that arrived while it tried come too.
func (p *Pessimistic) section(ctx context.Context, skus []string, take func() []stock.CheckoutRequest) []stock.Placed {
	if placed, ok := p.run.soldOut(ctx, skus, take); ok {
		return placed // sold out: no row lock taken, no NOWAIT refused
	}
	held := func() []stock.CheckoutRequest {
		reqs := take()
		p.run.inSection(ctx, reqs) // the rows are locked: a pause here holds them
		return reqs
	}
	var placed []stock.Placed
	err := p.untilHeld(ctx, skus, func() (err error) {
		placed, err = p.run.store.PlaceLocked(ctx, skus, p.rowLock, held)
		return err
	})
	if err != nil {
		return failAll(len(take()), err)
	}
	return placed
}

// untilHeld runs try while it is refused for a row another transaction held, with capped,
// jittered backoff, until the wait runs out: then busy.
func (p *Pessimistic) untilHeld(ctx context.Context, skus []string, try func() error) error {
	start := time.Now()
	deadline := start.Add(p.run.opts.Wait)
	backoff := time.Millisecond
	for {
		err := try()
		if !rowTaken(err) {
			if err == nil {
				p.run.metrics.waited(p.Name(), time.Since(start))
			}
			return err
		}
		pause := backoff/2 + rand.N(backoff)
		if time.Now().Add(pause).After(deadline) {
			return stock.Busy(stock.BusyLockWait, fmt.Errorf("the rows of products %s: waited %s", strings.Join(skus, ", "), p.run.opts.Wait))
		}
		select {
		case <-time.After(pause):
		case <-ctx.Done():
			return ctx.Err()
		}
		backoff = min(2*backoff, 16*time.Millisecond)
	}
}

// rowTaken reports an attempt that wrote nothing because another transaction had the row: its
// lock (ErrBusy), or a change between statements (ErrVersionConflict). A transaction the
// database ended is not one: it may have committed, so it is not retried; its buyer hears busy.
func rowTaken(err error) bool {
	if stock.CauseOfBusy(err) == stock.BusyTxEnded {
		return false
	}
	return errors.Is(err, stock.ErrBusy) || errors.Is(err, stock.ErrVersionConflict)
}
