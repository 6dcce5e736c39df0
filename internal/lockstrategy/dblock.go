package lockstrategy

import (
	"context"
	"errors"
	"log/slog"
	"math/rand/v2"
	"sync/atomic"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/flashsale/seckill/internal/stock"
)

// TableLock is the lock-table lock of the classic comparison, the lock of the dblock strategy
// (with Version): a row in distributed_locks, taken by INSERT (the primary key lets one writer
// win), released by deleting the holder's own row, reclaimed atomically once expired. It needs
// nothing but the database — and it shows why that is slow: every waiter polls the database, and
// every acquisition is a write.
//
// The lock alone is not trusted: a holder paused past the TTL loses the lock to a reclaimer
// while still running (its watchdog is paused too). So its guard is the version check, which
// fails harmlessly for a stale holder.
type TableLock struct {
	store *stock.Store
	opts  TableLockOptions
	turns *turns
	log   *slog.Logger
}

// maxPoll caps the interval at which a waiter reads the lock row.
const maxPoll = 4 * time.Millisecond

// TableLockOptions tune the lock-table lock.
type TableLockOptions struct {
	TTL      time.Duration // after this a stopped holder's lock may be reclaimed; extended while held
	Extend   time.Duration // watchdog period; default TTL/3
	Instance string        // names this instance in the holder column, for operators
}

// NewTableLock returns the lock-table lock over store.
func NewTableLock(store *stock.Store, opts TableLockOptions, metrics *LockMetrics) *TableLock {
	if opts.Extend <= 0 {
		opts.Extend = opts.TTL / 3
	}
	return &TableLock{store: store, opts: opts, turns: newTurns(), log: metrics.log}
}

// Backend implements Locker.
func (*TableLock) Backend() string { return "database" }

// Key implements Locker: the lock's name in the table.
func (*TableLock) Key(sku string) string { return "products/" + sku }

// Lock implements Locker. It tries at once, then polls with capped, jittered exponential backoff
// until ctx ends, reading the lock row (Store.LockTaken) and writing only when it looks free.
// Jitter keeps the waiters of all instances from polling in lockstep. A holder id unique per
// acquisition: release deletes only this id's row, so an instance can never release a lock that
// another of its own requests (or a successor) holds.
func (t *TableLock) Lock(ctx context.Context, key string) (Lock, error) {
	h := &tableHold{lock: t, key: key, holder: t.opts.Instance + "/" + ulid.Make().String()}
	// Waiters of other instances read the row up to every maxPoll (jittered to one and a half):
	// give them a whole interval.
	t.turns.wait(ctx, key, maxPoll+rand.N(maxPoll/2))
	backoff := time.Millisecond
	for first := true; ; first = false {
		ok, err := t.try(ctx, key, h.holder, first)
		if ok {
			return h, nil
		}
		if err != nil {
			// The INSERT may have committed even though its answer was lost: remove our row if
			// it is there, so an uncertain acquire does not block the SKU until the TTL.
			cleanupCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), unlockTimeout)
			h.release(cleanupCtx)
			cancel()
			return nil, err
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(backoff/2 + rand.N(backoff)):
		}
		backoff = min(2*backoff, maxPoll)
	}
}

// try makes one attempt at the lock; after the first it reads before it writes.
func (t *TableLock) try(ctx context.Context, key, holder string, first bool) (bool, error) {
	if !first {
		if taken, err := t.store.LockTaken(ctx, key); err != nil || taken {
			return false, err
		}
	}
	return t.store.TryLock(ctx, key, holder, t.opts.TTL)
}

// tableHold is one acquisition of the lock-table lock.
type tableHold struct {
	lock   *TableLock
	key    string
	holder string
	lost   atomic.Bool // an extension found the row expired or someone else's
}

// Token implements Lock: the lock table has none.
func (*tableHold) Token() stock.Token { return stock.Token{} }

// Held implements Lock: false once an extension was refused.
func (h *tableHold) Held(context.Context) bool { return !h.lost.Load() }

// Extend pushes the row's expiry out by another TTL, if the row is still the holder's.
func (h *tableHold) Extend(ctx context.Context) error {
	ok, err := h.lock.store.ExtendLock(ctx, h.key, h.holder, h.lock.opts.TTL)
	if err == nil && !ok {
		h.lost.Store(true)
		err = errors.New("the lock row expired or belongs to another holder")
	}
	return err
}

// ExtendEvery is the watchdog's period.
func (h *tableHold) ExtendEvery() time.Duration { return h.lock.opts.Extend }

// Unlock implements Lock: it deletes the holder's row.
func (h *tableHold) Unlock(ctx context.Context) bool {
	defer h.lock.turns.done(h.key)
	return h.release(ctx)
}

// release reports whether the holder's row was there to delete. An error counts as released: the
// row then expires by its TTL.
func (h *tableHold) release(ctx context.Context) bool {
	released, err := h.lock.store.Unlock(ctx, h.key, h.holder)
	if err != nil {
		h.lock.log.Warn("unlock failed; the lock will expire by its TTL", "key", h.key, "err", err)
		return true
	}
	return released
}
