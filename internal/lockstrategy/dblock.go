package lockstrategy

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/flashsale/seckill/internal/stock"
)

// DBLock is the lock-table lock of the classic comparison: a row in distributed_locks, taken by
// INSERT (the primary key lets one writer win), released by deleting the holder's own row,
// reclaimed atomically once expired. It needs nothing but the database — and it shows why that is
// slow: every waiter polls the database, and every acquisition is a write.
//
// The lock alone is not trusted: a holder paused past the TTL loses the lock to a reclaimer
// while still running (its watchdog is paused too). So the critical section is the
// version-guarded write, which fails harmlessly for a stale holder.
type DBLock struct {
	store   *stock.Store
	opts    DBLockOptions
	metrics *LockMetrics
	batch   *batcher
	turns   *turns
}

// maxPoll caps the interval at which a waiter reads the lock row.
const maxPoll = 4 * time.Millisecond

// DBLockOptions tune the lock-table lock.
type DBLockOptions struct {
	TTL      time.Duration // after this a stopped holder's lock may be reclaimed; extended while held
	Extend   time.Duration // watchdog period; default TTL/3
	Wait     time.Duration // how long a section polls for the lock before answering busy
	Attempts int           // version-guarded writes tried under the lock before answering busy
	Instance string        // names this instance in the holder column, for operators
	// Batch is how many queued orders of a SKU one section may place under one acquisition
	// (group commit); 1 or less: one order per section.
	Batch int
	Hooks Hooks
}

// NewDBLock returns the lock-table strategy.
func NewDBLock(store *stock.Store, opts DBLockOptions, metrics *LockMetrics) *DBLock {
	if opts.Extend <= 0 {
		opts.Extend = opts.TTL / 3
	}
	d := &DBLock{store: store, opts: opts, metrics: metrics, turns: newTurns()}
	d.batch = newBatcher(d.Name(), opts.Batch, opts.Wait, metrics, d.section)
	return d
}

// Name implements Strategy.
func (*DBLock) Name() string { return "dblock" }

// LockKey is the lock_name of sku's row in the lock table, which the service publishes
// (GET .../locks).
func (*DBLock) LockKey(sku string) string { return "products/" + sku }

// PlaceOrder implements Strategy.
func (d *DBLock) PlaceOrder(ctx context.Context, req stock.OrderRequest) (stock.Order, error) {
	return d.batch.place(ctx, req)
}

// section is the critical section: the orders it takes are placed under one acquisition of the
// lock-table lock, with one version-guarded write; a watchdog extends the lock's expiry while
// the section runs, so the expiry can be short and a stopped holder's lock is free soon.
func (d *DBLock) section(ctx context.Context, sku string, take func() []stock.OrderRequest) []stock.Placed {
	key := "products/" + sku
	// A holder id unique per acquisition: release deletes only this id's row, so an instance can
	// never release a lock that another of its own requests (or a successor) holds.
	holder := d.opts.Instance + "/" + ulid.Make().String()
	start := time.Now()
	// Waiters of other instances read the row up to every maxPoll (jittered to one and a half):
	// give them a whole interval.
	d.turns.wait(ctx, key, maxPoll+rand.N(maxPoll/2))
	if err := d.acquire(ctx, key, holder); err != nil {
		return failAll(len(take()), err)
	}
	locked := time.Now()
	d.metrics.waited(d.Name(), locked.Sub(start))
	section, stop := d.metrics.watchdog(ctx, d.Name(), key, d.opts.Extend, func(ctx context.Context) error {
		ok, err := d.store.ExtendLock(ctx, key, holder, d.opts.TTL)
		if err == nil && !ok {
			err = errors.New("the lock row expired or belongs to another holder")
		}
		return err
	})
	placed, _ := placeVersioned(section, d.store, take(), d.opts.Attempts, d.metrics, d.Name(), d.opts.Hooks, nil)
	stop()
	d.release(ctx, key, holder, locked)
	abandoned(section, key, placed)
	return placed
}

// acquire tries TryLock, then polls with capped, jittered exponential backoff until the wait
// budget runs out, reading the lock row (Store.LockTaken) and writing only when it looks free.
// Jitter keeps the waiters of all instances from polling in lockstep.
func (d *DBLock) acquire(ctx context.Context, key, holder string) error {
	waitCtx, cancel := context.WithTimeout(ctx, d.opts.Wait)
	defer cancel()
	backoff := time.Millisecond
	for first := true; ; first = false {
		ok, err := d.try(waitCtx, key, holder, first)
		if ok {
			return nil
		}
		if err != nil {
			// The INSERT may have committed even though its answer was lost: remove our row if
			// it is there, so an uncertain acquire does not block the SKU until the TTL.
			d.unlock(ctx, key, holder)
			// The wait budget ran out mid-statement. Drivers report that differently
			// (context.DeadlineExceeded, SQLite's "interrupted"), so ask the context.
			if ctx.Err() == nil && waitCtx.Err() != nil {
				return fmt.Errorf("lock %s: waited %s: %w", key, d.opts.Wait, stock.ErrBusy)
			}
			return err
		}
		select {
		case <-waitCtx.Done():
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return fmt.Errorf("lock %s: waited %s: %w", key, d.opts.Wait, stock.ErrBusy)
		case <-time.After(backoff/2 + rand.N(backoff)):
		}
		backoff = min(2*backoff, maxPoll)
	}
}

// try makes one attempt at the lock; after the first it reads before it writes.
func (d *DBLock) try(ctx context.Context, key, holder string, first bool) (bool, error) {
	if !first {
		if taken, err := d.store.LockTaken(ctx, key); err != nil || taken {
			return false, err
		}
	}
	return d.store.TryLock(ctx, key, holder, d.opts.TTL)
}

// release deletes the holder's row, even when the request was cancelled.
func (d *DBLock) release(ctx context.Context, key, holder string, locked time.Time) {
	d.metrics.held(d.Name(), key, time.Since(locked))
	if !d.unlock(ctx, key, holder) {
		d.metrics.lostAt(d.Name(), key)
	}
	d.turns.done(key)
}

// unlock reports whether the holder's row was there to delete. An error counts as released: the
// row then expires by its TTL.
func (d *DBLock) unlock(ctx context.Context, key, holder string) bool {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	defer cancel()
	released, err := d.store.Unlock(ctx, key, holder)
	if err != nil {
		d.metrics.log.Warn("unlock failed; the lock will expire by its TTL", "key", key, "err", err)
		return true
	}
	return released
}

// placeVersioned is the version-guarded write of hybrid and dblock: read the product, then place
// every order at that version in one transaction (stock.Store.PlaceAt), retrying the whole batch
// with a fresh read when another writer got there first — up to attempts times, then busy. It
// never writes blind: each attempt either matches the version it read or writes nothing. The
// InSection hook runs between the read and the write. A batch whose buyers admission vouched for
// skips the lookup of stored buyers on its first try (stock.Store.PlaceAdmitted).
//
// known, when not nil, is the product as the last writer left it (hybrid: handed over with the
// lock, releases.go), taken instead of the first read when every order of the batch fits in its
// stock: one query fewer inside the lock. It is only a hint — a stale one fails the version check
// like any stale read, and the batch reads again at no cost to its attempts — and it is never
// trusted to refuse an order on its own: a cancel gives units back without moving the version, so
// a batch that does not fit reads the row, and a batch that would write nothing (every order
// refused: a new round's limits, a window) checks no version, so it reads the row and decides
// again. It returns the answers and the product as this section left it (nil when it failed).
func placeVersioned(ctx context.Context, store *stock.Store, reqs []stock.OrderRequest, attempts int,
	metrics *LockMetrics, strategy string, hooks Hooks, known *stock.Product) ([]stock.Placed, *stock.Product) {
	if len(reqs) == 0 {
		return nil, nil
	}
	var asked int64
	for _, r := range reqs {
		asked += int64(r.Quantity)
	}
	for i := 1; ; {
		var (
			read     stock.Product
			err      error
			snapshot = known != nil && known.Stock >= asked
		)
		if snapshot {
			read = *known
		} else if read, err = store.Product(ctx, reqs[0].SKU); err != nil {
			return failAll(len(reqs), err), nil
		}
		known = nil
		hooks.inSection(ctx, reqs)
		place := store.PlaceAt
		if i == 1 && admitted(reqs) {
			place = store.PlaceAdmitted
		}
		placed, err := place(ctx, reqs, read)
		if err == nil {
			left := after(read, placed)
			if snapshot && left.Version == read.Version {
				continue // every order refused on the snapshot's word alone, no version checked: ask the row
			}
			return placed, left
		}
		if !errors.Is(err, stock.ErrVersionConflict) {
			return failAll(len(reqs), err), nil
		}
		if snapshot {
			continue // older than the row: read it, as without one
		}
		if i >= attempts {
			return failAll(len(reqs), fmt.Errorf("%d version conflicts on products/%s: %w", i, reqs[0].SKU, stock.ErrBusy)), nil
		}
		metrics.retried(strategy)
		i++
	}
}

// after is the product as a batch placed at read left it: a new version and fewer units when it
// sold any, else as read.
func after(read stock.Product, placed []stock.Placed) *stock.Product {
	var sold int64
	for _, p := range placed {
		if p.Err == nil {
			sold += int64(p.Order.Quantity)
		}
	}
	if sold > 0 {
		read.Version++
		read.Stock -= sold
	}
	return &read
}

// admitted says whether admission vouched for every buyer of reqs: each holds a reservation.
func admitted(reqs []stock.OrderRequest) bool {
	for _, r := range reqs {
		if r.Reservation.ID == "" {
			return false
		}
	}
	return true
}
