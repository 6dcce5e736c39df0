package lockstrategy

import (
	"context"
	"time"

	"github.com/flashsale/seckill/internal/stock"
)

// A Locker takes the lock of a product in one lock service: a Redis key (redsync, one node or a
// Redlock quorum), an etcd mutex, a ZooKeeper lock node, a row of the lock table. It is one half
// of a strategy; the guard (guard.go) is the other.
type Locker interface {
	// Backend names the lock service: redis, etcd, zookeeper or database.
	Backend() string
	// Key names sku's lock in its backend: the Redis key, the etcd prefix of the mutex, the
	// ZooKeeper directory, the lock-table name.
	Key(sku string) string
	// Lock takes the lock named key, waiting at most until ctx ends (the section's wait budget).
	// A lock it cannot have in time answers ctx's error or a wrapped error of its own; a lock
	// service that cannot be reached at all, errLockUnreachable.
	Lock(ctx context.Context, key string) (Lock, error)
}

// A Lock is one acquisition, from Locker.Lock until Unlock. A lock is never trusted on its own:
// a holder paused past its expiry or its session still runs, and only the guard of its write
// (the version check, the fence) keeps a late write harmless.
type Lock interface {
	// Token is the fencing token of this acquisition, which a fenced write carries to the
	// database; the zero Token for a lock that has none.
	Token() stock.Token
	// Held reports whether the lock is still known to be this acquisition's. False means lost —
	// a session or lease gone, an extension refused; true is no promise, since the lock can run
	// out the moment after the answer.
	Held(ctx context.Context) bool
	// Unlock releases the lock; ctx is not cancelled with the request, and carries a short
	// timeout. It reports false when the lock turned out to be lost already (expired, taken over,
	// its session gone): the guard kept the write safe, and it is worth a warning.
	Unlock(ctx context.Context) bool
}

// expiring is a Lock with an expiry of its own (the Redis key's, the lock-table row's): the
// section runner's watchdog extends it every period while the section runs.
type expiring interface {
	Extend(ctx context.Context) error
	ExtendEvery() time.Duration
}

// fenceChecker is a Lock whose service can tell a genuine fence-out from a fence ahead of the
// service itself: one no holder can have been granted, because the cluster or ensemble was
// replaced and its sequence started again. Without that check every write would be fenced out
// forever — a silent stall; with it, the fence is reset (only if it is still that value) and the
// write tried once more.
type fenceChecker interface {
	Ahead(ctx context.Context, fenced *stock.FenceError) bool
}

// handingOver is a Lock whose holders pass the product on with the lock (Redis: in the release
// message, releases.go), which saves the next section its read.
type handingOver interface {
	// Known is the product as the last section known here left it, or nil.
	Known() *stock.Product
	// Leave hands left — the product as this section left it, nil when it cannot say — to the
	// next holder, with the release.
	Leave(left *stock.Product)
}

// labelled is a Locker with metrics of its own, labelled with the strategy that uses it.
type labelled interface {
	forStrategy(strategy string) Locker
}
