// Package lock is the contract every lock service's lock keeps for the strategies: a Locker takes
// a product's lock, a Lock is one acquisition with its fencing token, a channel that says it was
// lost, and its release. The packages under it hold one backend each: redislock, etcdlock,
// zklock, tablelock.
package lock

import (
	"context"
	"errors"
	"time"

	"github.com/flashsale/seckill/internal/stock"
)

// A Locker takes the lock of a product in one lock service: a Redis key (redsync, one node or a
// Redlock quorum), an etcd mutex, a ZooKeeper lock node, a row of the lock table.
type Locker interface {
	// Backend names the lock service: redis, etcd, zookeeper or database.
	Backend() string
	// Key names sku's lock in its backend: the Redis key, the etcd prefix of the mutex, the
	// ZooKeeper directory, the lock-table name.
	Key(sku string) string
	// Lock takes the lock named key, waiting at most until ctx ends (the section's wait budget).
	// A lock it cannot have in time answers ctx's error or a wrapped error of its own; a lock
	// service that cannot be reached at all, ErrUnreachable.
	Lock(ctx context.Context, key string) (Lock, error)
	// Close releases what the Locker keeps open: an etcd session, a Redis subscription.
	Close() error
}

// A Lock is one acquisition, from Locker.Lock until Unlock. A lock is never trusted on its own:
// a holder paused past its expiry or its session still runs, and only the guard of its write
// (the version check, the fence) keeps a late write harmless.
type Lock interface {
	// Token is the fencing token a fenced write carries, asked right before each such write. It
	// answers ErrLost when the lock is known gone already (its session ended, its node deleted),
	// so the section gives up before it writes. A lock with no token answers the zero Token.
	Token(ctx context.Context) (stock.Token, error)
	// Lost is closed when the lock's watchdog is refused an extension: the lock may belong to
	// another holder now, and the section that holds it must stop. A lock kept by a session
	// (etcd, ZooKeeper) answers nil: its session ends under a paused holder while the holder is
	// paused, so only the fence can stop its late write (Token, Ahead).
	Lost() <-chan struct{}
	// Known is the product as the last holder left it, handed over with the lock, which saves
	// the next section its read; nil when the lock hands nothing over (all but Redis).
	Known() *stock.Product
	// Ahead reports whether fenced's fence is ahead of the lock service itself: no holder can
	// have been granted it, because the cluster or ensemble was replaced and its sequence
	// started again. The fence may then be reset and the write tried once more; without that
	// check every write would be fenced out forever. A lock with no token answers false.
	Ahead(ctx context.Context, fenced *stock.FenceError) bool
	// Unlock releases the lock and hands left — the product as the section left it, nil when it
	// cannot say — to the next holder, if the lock hands over. ctx is not cancelled with the
	// request, and carries a short timeout (UnlockTimeout). It reports false when the lock
	// turned out to be lost already: the guard kept the write safe, and it is worth a warning.
	Unlock(ctx context.Context, left *stock.Product) bool
}

// ErrUnreachable means a lock attempt found no holder, only failures to reach the lock service:
// no quorum of its nodes answered.
var ErrUnreachable = errors.New("no quorum of lock nodes reachable")

// ErrLost is the cause of a section's end when its lock was lost while it held it.
var ErrLost = errors.New("lock lost")

// UnlockTimeout bounds a release, which runs even when the request was cancelled.
const UnlockTimeout = time.Second
