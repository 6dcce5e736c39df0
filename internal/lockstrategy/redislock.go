package lockstrategy

import (
	"context"
	crand "crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-redsync/redsync/v4"
	"github.com/redis/go-redis/v9"

	"github.com/flashsale/seckill/internal/stock"
)

// RedisLock is the Redis lock of hybrid and unguarded-redis: a redsync mutex per SKU, over one
// Redis (a single pool) or several independent ones (Redlock: a quorum of them), with a short
// expiry that the section runner's watchdog extends while a section runs. Its holders wake each
// other with a release message (releases.go) and take turns with the other instances
// (turns.go). It has no fencing token: the version check is its guard.
type RedisLock struct {
	rs       *redsync.Redsync
	opts     RedisLockOptions
	metrics  *LockMetrics
	strategy string // labels its metrics; set per strategy by forStrategy
	releases *releases
	turns    *turns
	close    *sync.Once
}

// RedisLockOptions tune the Redis lock.
type RedisLockOptions struct {
	TTL    time.Duration // redsync lock expiry: short, since the watchdog extends it while held
	Extend time.Duration // watchdog period; default TTL/3
	// Poll is how often a waiter tries a taken lock when no release message wakes it first;
	// default: every 1 to 5 ms, jittered.
	Poll time.Duration
}

// NewRedisLock returns the Redis lock: locks by rs, release messages on rdb. Close it to stop
// listening for releases.
func NewRedisLock(rs *redsync.Redsync, rdb redis.UniversalClient, opts RedisLockOptions, metrics *LockMetrics) *RedisLock {
	if opts.Extend <= 0 {
		opts.Extend = opts.TTL / 3
	}
	return &RedisLock{rs: rs, opts: opts, metrics: metrics, releases: newReleases(rdb), turns: newTurns(), close: &sync.Once{}}
}

// forStrategy implements labelled: the same lock — its releases and turns, one subscription per
// instance, not one per strategy — with strategy's name on its metrics.
func (r *RedisLock) forStrategy(strategy string) Locker {
	c := *r
	c.strategy = strategy
	return &c
}

// Close stops listening for lock releases.
func (r *RedisLock) Close() error {
	var err error
	r.close.Do(func() { err = r.releases.Close() })
	return err
}

// Backend implements Locker.
func (*RedisLock) Backend() string { return "redis" }

// Key implements Locker: the redsync key of sku, in the same Redis Cluster slot as its
// admission keys.
func (*RedisLock) Key(sku string) string { return "seckill:{" + sku + "}:lock" }

// errLockUnreachable means a lock attempt found no holder, only Redis errors: no quorum of
// nodes can be reached.
var errLockUnreachable = errors.New("no quorum of lock nodes reachable")

// Lock implements Locker, trying until ctx ends. It loops itself (one redsync try per call) so
// that each failure can be told apart: held by someone (wait and retry) or unreachable (give up
// at once: errLockUnreachable). A Mutex is made per acquisition: redsync's Mutex holds the lock's
// random value and is not safe to share between goroutines.
func (r *RedisLock) Lock(ctx context.Context, key string) (Lock, error) {
	// A woken waiter needs a fraction of a millisecond to hear the release message and try.
	r.turns.wait(ctx, key, 500*time.Microsecond+rand.N(500*time.Microsecond))
	var value string // the value of the latest try, to clean up after a try cut off mid-flight
	m := r.rs.NewMutex(key,
		redsync.WithExpiry(r.opts.TTL),
		redsync.WithTries(1),
		redsync.WithGenValueFunc(func() (string, error) { value = lockValue(); return value, nil }),
	)
	for waiting := false; ; waiting = true {
		released := r.releases.next(key)
		err := m.LockContext(ctx)
		if err == nil {
			return &redisHold{lock: r, m: m, key: key}, nil
		}
		if unreachable(err) {
			return nil, fmt.Errorf("lock %s: %w: %w", key, errLockUnreachable, err)
		}
		if !waiting {
			r.metrics.lockWaiting(r.strategy, 1)
			defer r.metrics.lockWaiting(r.strategy, -1)
		}
		select {
		case <-ctx.Done():
			// The last try may have been cut off by the deadline after a node had set our
			// value, and redsync's own release then ran with the expired context. Left there,
			// the value would block the key for a whole TTL — with one Redlock node down, for
			// everyone. Release it with a fresh context: the script deletes only our value.
			cleanupCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), unlockTimeout)
			_, _ = r.rs.NewMutex(key, redsync.WithValue(value)).UnlockContext(cleanupCtx)
			cancel()
			return nil, err
		case <-released:
			r.metrics.wokenByRelease(r.strategy)
		case <-time.After(r.poll()):
		}
	}
}

func (r *RedisLock) poll() time.Duration {
	if r.opts.Poll > 0 {
		return r.opts.Poll
	}
	return time.Millisecond + rand.N(4*time.Millisecond)
}

// redisHold is one acquisition of the Redis lock.
type redisHold struct {
	lock *RedisLock
	m    *redsync.Mutex
	key  string
	lost atomic.Bool // an extension was refused
	left *stock.Product
}

// Token implements Lock: a Redis lock has none.
func (*redisHold) Token() stock.Token { return stock.Token{} }

// Held implements Lock: false once an extension was refused.
func (h *redisHold) Held(context.Context) bool { return !h.lost.Load() }

// Extend pushes the expiry out by another TTL; after expiry it fails (redsync).
func (h *redisHold) Extend(ctx context.Context) error {
	if ok, err := h.m.ExtendContext(ctx); !ok {
		h.lost.Store(true)
		return fmt.Errorf("redsync extend: %v", err)
	}
	return nil
}

// ExtendEvery is the watchdog's period.
func (h *redisHold) ExtendEvery() time.Duration { return h.lock.opts.Extend }

// Known implements handingOver: the product as the release message of the last holder left it.
func (h *redisHold) Known() *stock.Product { return h.lock.releases.product(h.key) }

// Leave implements handingOver: left goes out with the release message.
func (h *redisHold) Leave(left *stock.Product) { h.left = left }

// Unlock implements Lock. A lock that had expired or been taken over is not released, and its
// holder hands nothing over; a released one tells every instance, with the product as left.
func (h *redisHold) Unlock(ctx context.Context) bool {
	defer h.lock.turns.done(h.key)
	if ok, _ := h.m.UnlockContext(ctx); !ok {
		return false
	}
	h.lock.releases.released(ctx, h.key, h.left)
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
