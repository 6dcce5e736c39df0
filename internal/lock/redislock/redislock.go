// Package redislock is the Redis lock: a redsync mutex per product over one Redis or a Redlock
// quorum, kept alive by its own watchdog, its holders woken by release messages that also hand the
// product over to the next holder.
package redislock

import (
	"context"
	crand "crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"sync"
	"time"

	"github.com/go-redsync/redsync/v4"
	"github.com/redis/go-redis/v9"

	"github.com/flashsale/seckill/internal/lock"
	"github.com/flashsale/seckill/internal/stock"
)

// Locker is the Redis lock of hybrid and unguarded-redis: a redsync mutex per SKU, over one
// Redis (a single pool) or several independent ones (Redlock: a quorum of them), with a short
// expiry that its watchdog extends while the lock is held. Its holders wake each other with a
// release message (releases.go) and take turns with the other instances (lock.Turns). It has no
// fencing token: the version check is its guard.
type Locker struct {
	rs       *redsync.Redsync
	opts     Options
	obs      lock.Observer
	releases *releases
	turns    *lock.Turns
	close    *sync.Once
}

// Options tune the Redis lock.
type Options struct {
	TTL    time.Duration // redsync lock expiry: short, since the watchdog extends it while held
	Extend time.Duration // watchdog period, below TTL (lockstrategy.Build: a third of it unless set)
	// Poll is how often a waiter tries a taken lock when no release message wakes it first;
	// 0: every 1 to 5 ms, jittered.
	Poll time.Duration
}

// New returns the Redis lock: locks by rs, release messages on rdb, metrics on obs. Close it to
// stop listening for releases.
func New(rs *redsync.Redsync, rdb redis.UniversalClient, opts Options, obs lock.Observer) *Locker {
	return &Locker{rs: rs, opts: opts, obs: obs, releases: newReleases(rdb), turns: lock.NewTurns(), close: &sync.Once{}}
}

// Observed returns the same lock — its release messages and turns, one subscription per
// instance, not one per strategy — with its metrics on obs: another strategy's.
func (l *Locker) Observed(obs lock.Observer) *Locker {
	c := *l
	c.obs = obs
	return &c
}

// Close stops listening for lock releases.
func (l *Locker) Close() error {
	var err error
	l.close.Do(func() { err = l.releases.Close() })
	return err
}

// Backend implements lock.Locker.
func (*Locker) Backend() string { return "redis" }

// Key implements lock.Locker: the redsync key of sku, in the same Redis Cluster slot as its
// admission keys.
func (*Locker) Key(sku string) string { return "seckill:{" + sku + "}:lock" }

// Lock implements lock.Locker, trying until ctx ends. It loops itself (one redsync try per call)
// so that each failure can be told apart: held by someone (wait and retry) or unreachable (give
// up at once: lock.ErrUnreachable). A Mutex is made per acquisition: redsync's Mutex holds the
// lock's random value and is not safe to share between goroutines.
func (l *Locker) Lock(ctx context.Context, key string) (lock.Lock, error) {
	// A woken waiter needs a fraction of a millisecond to hear the release message and try.
	l.turns.Wait(ctx, key, 500*time.Microsecond+rand.N(500*time.Microsecond))
	var value string // the value of the latest try, to clean up after a try cut off mid-flight
	m := l.rs.NewMutex(key,
		redsync.WithExpiry(l.opts.TTL),
		redsync.WithTries(1),
		redsync.WithGenValueFunc(func() (string, error) { value = lockValue(); return value, nil }),
	)
	for waiting := false; ; waiting = true {
		released := l.releases.next(key)
		err := m.LockContext(ctx)
		if err == nil {
			h := &hold{locker: l, m: m, key: key}
			h.watchdog = lock.Watch(ctx, key, l.opts.Extend, h.extend, l.obs)
			return h, nil
		}
		if unreachable(err) {
			return nil, fmt.Errorf("lock %s: %w: %w", key, lock.ErrUnreachable, err)
		}
		if !waiting {
			l.obs.Waiting(1)
			defer l.obs.Waiting(-1)
		}
		select {
		case <-ctx.Done():
			// The last try may have been cut off by the deadline after a node had set our
			// value, and redsync's own release then ran with the expired context. Left there,
			// the value would block the key for a whole TTL — with one Redlock node down, for
			// everyone. Release it with a fresh context: the script deletes only our value.
			cleanupCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), lock.UnlockTimeout)
			_, _ = l.rs.NewMutex(key, redsync.WithValue(value)).UnlockContext(cleanupCtx)
			cancel()
			return nil, err
		case <-released:
			l.obs.Woken()
		case <-time.After(l.poll()):
		}
	}
}

func (l *Locker) poll() time.Duration {
	if l.opts.Poll > 0 {
		return l.opts.Poll
	}
	return time.Millisecond + rand.N(4*time.Millisecond)
}

// hold is one acquisition of the Redis lock.
type hold struct {
	locker   *Locker
	m        *redsync.Mutex
	key      string
	watchdog *lock.Watchdog
}

// Token implements lock.Lock: a Redis lock has none.
func (*hold) Token(context.Context) (stock.Token, error) { return stock.Token{}, nil }

// Lost implements lock.Lock: closed once the watchdog is refused an extension.
func (h *hold) Lost() <-chan struct{} { return h.watchdog.Lost() }

// extend pushes the expiry out by another TTL; after expiry it fails (redsync).
func (h *hold) extend(ctx context.Context) error {
	if ok, err := h.m.ExtendContext(ctx); !ok {
		return fmt.Errorf("redsync extend: %v", err)
	}
	return nil
}

// Known implements lock.Lock: the product as the release message of the last holder left it.
func (h *hold) Known() *stock.Product { return h.locker.releases.product(h.key) }

// Ahead implements lock.Lock: with no token, no fence can be ahead.
func (*hold) Ahead(context.Context, *stock.FenceError) bool { return false }

// Unlock implements lock.Lock. A lock that had expired or been taken over is not released, and
// its holder hands nothing over; a released one tells every instance, with the product as left.
func (h *hold) Unlock(ctx context.Context, left *stock.Product) bool {
	h.watchdog.Stop()
	defer h.locker.turns.Done(h.key)
	if ok, _ := h.m.UnlockContext(ctx); !ok {
		return false
	}
	h.locker.releases.released(ctx, h.key, left)
	return true
}

// unreachable reports whether a failed try met only connection failures: no node said the lock
// was taken, and none merely answered too slowly. A timeout is not proof that Redis is down —
// under load the per-try timeout (a twentieth of the TTL) is easy to miss — and falling back on
// it would let an order past a lock that someone holds.
func unreachable(err error) bool {
	var (
		taken     *redsync.ErrTaken
		nodeTaken *redsync.ErrNodeTaken
	)
	if errors.As(err, &taken) || errors.As(err, &nodeTaken) {
		return false
	}
	var failures []error
	collect(err, &failures)
	for _, e := range failures {
		var netErr net.Error
		if errors.Is(e, context.DeadlineExceeded) || errors.Is(e, context.Canceled) || (errors.As(e, &netErr) && netErr.Timeout()) {
			return false
		}
	}
	return len(failures) > 0
}

// collect gathers the per-node Redis errors of a (possibly joined) redsync error.
func collect(err error, out *[]error) {
	var redisErr *redsync.RedisError
	if joined, ok := err.(interface{ Unwrap() []error }); ok {
		for _, e := range joined.Unwrap() {
			collect(e, out)
		}
	} else if errors.As(err, &redisErr) {
		*out = append(*out, redisErr.Err)
	}
}

// lockValue is a random lock value: only the holder knows it, so only the holder can release.
func lockValue() string {
	b := make([]byte, 16)
	_, _ = crand.Read(b) // crypto/rand.Read never returns an error on supported platforms
	return base64.StdEncoding.EncodeToString(b)
}
