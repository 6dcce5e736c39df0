// Package tablelock is the lock-table lock of the classic comparison: a row in distributed_locks
// per product, taken by INSERT, kept alive by its own watchdog, released by deleting the holder's
// row. It needs nothing but the database.
package tablelock

import (
	"context"
	"errors"
	"log/slog"
	"math/rand/v2"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/flashsale/seckill/internal/lock"
	"github.com/flashsale/seckill/internal/stock"
)

// Locker is the lock-table lock of the classic comparison, the lock of the dblock strategy
// (with Version): a row in distributed_locks, taken by INSERT (the primary key lets one writer
// win), released by deleting the holder's own row, reclaimed atomically once expired. It needs
// nothing but the database — and it shows why that is slow: every waiter polls the database, and
// every acquisition is a write.
//
// The lock alone is not trusted: a holder paused past the TTL loses the lock to a reclaimer
// while still running (its watchdog is paused too). So its guard is the version check, which
// fails harmlessly for a stale holder.
type Locker struct {
	store *stock.Store
	opts  Options
	obs   lock.Observer
	turns *lock.Turns
	log   *slog.Logger
}

// maxPoll caps the interval at which a waiter reads the lock row.
const maxPoll = 4 * time.Millisecond

// Options tune the lock-table lock.
type Options struct {
	TTL      time.Duration // after this a stopped holder's lock may be reclaimed; extended while held
	Extend   time.Duration // watchdog period, below TTL (lockstrategy.Build: a third of it unless set)
	Instance string        // names this instance in the holder column, for operators
}

// New returns the lock-table lock over store, its metrics on obs; failed releases are logged on
// log.
func New(store *stock.Store, opts Options, obs lock.Observer, log *slog.Logger) *Locker {
	return &Locker{store: store, opts: opts, obs: obs, turns: lock.NewTurns(), log: log}
}

// Backend implements lock.Locker.
func (*Locker) Backend() string { return "database" }

// Key implements lock.Locker: the lock's name in the table.
func (*Locker) Key(sku string) string { return "products/" + sku }

// Close implements lock.Locker: the table lock keeps nothing open.
func (*Locker) Close() error { return nil }

// Lock implements lock.Locker. It tries at once, then polls with capped, jittered exponential backoff
// until ctx ends, reading the lock row (Store.LockTaken) and writing only when it looks free.
// Jitter keeps the waiters of all instances from polling in lockstep. A holder id unique per
// acquisition: release deletes only this id's row, so an instance can never release a lock that
// another of its own requests (or a successor) holds.
func (t *Locker) Lock(ctx context.Context, key string) (lock.Lock, error) {
	h := &hold{locker: t, key: key, holder: t.opts.Instance + "/" + ulid.Make().String()}
	// Waiters of other instances read the row up to every maxPoll (jittered to one and a half):
	// give them a whole interval.
	t.turns.Wait(ctx, key, maxPoll+rand.N(maxPoll/2))
	backoff := time.Millisecond
	for first := true; ; first = false {
		ok, err := t.try(ctx, key, h.holder, first)
		if ok {
			h.watchdog = lock.Watch(ctx, key, t.opts.Extend, h.extend, t.obs)
			return h, nil
		}
		if err != nil {
			// The INSERT may have committed even though its answer was lost: remove our row if
			// it is there, so an uncertain acquire does not block the SKU until the TTL.
			cleanupCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), lock.UnlockTimeout)
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
func (t *Locker) try(ctx context.Context, key, holder string, first bool) (bool, error) {
	if !first {
		if taken, err := t.store.LockTaken(ctx, key); err != nil || taken {
			return false, err
		}
	}
	return t.store.TryLock(ctx, key, holder, t.opts.TTL)
}

// hold is one acquisition of the lock-table lock.
type hold struct {
	locker   *Locker
	key      string
	holder   string
	watchdog *lock.Watchdog
}

// Token implements lock.Lock: the lock table has none.
func (*hold) Token(context.Context) (stock.Token, error) { return stock.Token{}, nil }

// Lost implements lock.Lock: closed once the watchdog is refused an extension.
func (h *hold) Lost() <-chan struct{} { return h.watchdog.Lost() }

// Known implements lock.Lock: the lock table hands nothing over.
func (*hold) Known() *stock.Product { return nil }

// Ahead implements lock.Lock: with no token, no fence can be ahead.
func (*hold) Ahead(context.Context, *stock.FenceError) bool { return false }

// extend pushes the row's expiry out by another TTL, if the row is still the holder's.
func (h *hold) extend(ctx context.Context) error {
	ok, err := h.locker.store.ExtendLock(ctx, h.key, h.holder, h.locker.opts.TTL)
	if err == nil && !ok {
		err = errors.New("the lock row expired or belongs to another holder")
	}
	return err
}

// Unlock implements lock.Lock: it deletes the holder's row.
func (h *hold) Unlock(ctx context.Context, _ *stock.Product) bool {
	h.watchdog.Stop()
	defer h.locker.turns.Done(h.key)
	return h.release(ctx)
}

// release reports whether the holder's row was there to delete. An error counts as released: the
// row then expires by its TTL.
func (h *hold) release(ctx context.Context) bool {
	released, err := h.locker.store.Unlock(ctx, h.key, h.holder)
	if err != nil {
		h.locker.log.Warn("unlock failed; the lock will expire by its TTL", "key", h.key, "err", err)
		return true
	}
	return released
}
