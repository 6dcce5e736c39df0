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
// product row with SELECT ... FOR UPDATE NOWAIT, decides, decrements and inserts. It needs no
// extra component, and it cannot pile up connections behind the hot row: a row another
// transaction holds fails at once and gives its connection back, the section tries again after a
// jittered pause, and a row it could not have within the wait answers busy (429 with
// Retry-After). With stock.WaitForRow it waits in the row's lock queue instead — at most
// one section per product and instance (the batcher), for at most the lock wait, on a small pool
// of its own.
type Pessimistic struct {
	rowLock stock.RowWait
	run     *runner // its store, name, options, metrics and hook; the row lock is not a Locker
	batch   *batcher
}

// NewPessimistic returns the pessimistic strategy over store. rowLock is what a section does
// when another transaction holds the row: stock.NoWait (the zero value) fails at once and tries
// again, stock.WaitForRow waits in the row's lock queue (stock.Options.LockWait) and then tries
// again; opts.Wait bounds the whole wait for the row. On SQLite, which has no row locks, both
// take the database's write lock without waiting.
//
// The row lock does not fit the Locker shape: it is taken by the transaction that writes and ends
// with it, so there is no acquisition apart from the write, and it is its own guard — nobody else
// can change the row while it is held.
func NewPessimistic(store *stock.Store, rowLock stock.RowWait, opts Options, metrics *LockMetrics) *Pessimistic {
	p := &Pessimistic{rowLock: rowLock, run: newRunner("pessimistic", store, nil, Version, opts, metrics)}
	p.run.readFirst = true
	p.batch = p.run.batcher(p.section)
	return p
}

// Name implements Strategy.
func (*Pessimistic) Name() string { return "pessimistic" }

// Place implements Strategy.
func (p *Pessimistic) Place(ctx context.Context, req stock.CheckoutRequest) (stock.Checkout, error) {
	return p.batch.place(ctx, req)
}

// section is the critical section: one transaction takes the rows of skus in SKU order
// (stock.Store.PlaceLocked); the requests are taken once the rows are held, inside the
// transaction, so the requests that arrived while it tried for the rows come too.
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
	err := p.untilHeld(ctx, "the rows of products "+strings.Join(skus, ", "), func() (err error) {
		placed, err = p.run.store.PlaceLocked(ctx, skus, p.rowLock, held)
		return err
	})
	if err != nil {
		return failAll(len(take()), err)
	}
	return placed
}

// untilHeld runs try until it is not refused for a row another transaction held, with capped,
// jittered backoff, until the wait runs out: then busy.
func (p *Pessimistic) untilHeld(ctx context.Context, what string, try func() error) error {
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
			return stock.Busy(stock.BusyLockWait, fmt.Errorf("%s: waited %s", what, p.run.opts.Wait))
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
// lock (ErrBusy), or — under the row lock nobody else can change the row, so a conditional update
// that matched nothing means the row changed between statements (a reset) — ErrVersionConflict.
// A transaction the database ended (tx_ended) is not one: it may have committed, and its buyer
// hears busy and asks again, with its Idempotency-Key if it has one.
func rowTaken(err error) bool {
	if stock.CauseOfBusy(err) == stock.BusyTxEnded {
		return false
	}
	return errors.Is(err, stock.ErrBusy) || errors.Is(err, stock.ErrVersionConflict)
}
