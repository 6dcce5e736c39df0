package lockstrategy

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/flashsale/seckill/internal/lock/zklock"
	"github.com/flashsale/seckill/internal/stock"
)

// ZooKeeper is the coordination-service lock of the seeds, on a real ZooKeeper: the recipe of
// ephemeral sequential nodes (zklock.Mutex) per SKU, on one session per instance, with the lock
// node's creation zxid as the fencing token that the database checks (stock.ZooKeeperFence, a
// fence of its own: zxids and etcd revisions are different sequences).
//
// Order of events for one batch:
//  1. The batcher runs one section per SKU in this instance, so at most one of its waiters
//     queues in ZooKeeper per SKU.
//  2. zklock.Mutex.Lock: a node under /seckill/locks/<sku>, a watch on the predecessor only, within
//     the wait budget (then busy).
//  3. Still held? (the session that made the node is the current one, and the node is there) —
//     else the section is abandoned before it writes; a lost session is replaced by the client,
//     and the next section makes its node on the new one.
//  4. The fenced write: UPDATE ... SET zk_fence = zxid WHERE version = ? AND zk_fence <= zxid.
//  5. Delete the node.
type ZooKeeper struct {
	name    string
	conn    *zk.Conn
	store   *stock.Store
	opts    ZooKeeperOptions
	batch   *batcher
	metrics *LockMetrics
	log     *slog.Logger
}

// ZooKeeperOptions tune the ZooKeeper strategy.
type ZooKeeperOptions struct {
	Wait   time.Duration // how long a section waits for the lock before answering busy
	Prefix string        // the directory of the lock directories; default /seckill/locks
	// Batch is how many queued orders of a SKU one section may place (group commit); 1 or less:
	// one order per section.
	Batch int
	// Hooks.InSection runs after the lock was last checked and the product read, right before the
	// fenced write.
	Hooks Hooks
	// Unguarded makes this the unguarded-zookeeper strategy: the same lock, and a write with no
	// fence (unguarded.go). Unsafe on purpose.
	Unguarded bool
}

// NewZooKeeper returns the ZooKeeper strategy on conn, this instance's session.
func NewZooKeeper(conn *zk.Conn, store *stock.Store, opts ZooKeeperOptions, metrics *LockMetrics, log *slog.Logger) *ZooKeeper {
	if opts.Prefix == "" {
		opts.Prefix = "/seckill/locks"
	}
	z := &ZooKeeper{name: "zookeeper", conn: conn, store: store, opts: opts, metrics: metrics, log: log}
	if opts.Unguarded {
		z.name = "unguarded-zookeeper"
	}
	z.batch = newBatcher(z.Name(), opts.Batch, opts.Wait, metrics, z.section)
	return z
}

// Name implements Strategy.
func (z *ZooKeeper) Name() string { return z.name }

// LockKey is the directory of sku's lock, which the service publishes (GET .../locks): each waiter
// creates a sequential node in it, and the lowest holds the lock.
func (z *ZooKeeper) LockKey(sku string) string { return z.opts.Prefix + "/" + sku }

// PlaceOrder implements Strategy.
func (z *ZooKeeper) PlaceOrder(ctx context.Context, req stock.OrderRequest) (stock.Order, error) {
	return z.batch.place(ctx, req)
}

// section is the critical section: one lock acquisition, one fenced write for the orders it
// takes.
func (z *ZooKeeper) section(ctx context.Context, sku string, take func() []stock.OrderRequest) []stock.Placed {
	dir := z.opts.Prefix + "/" + sku
	waitCtx, cancel := context.WithTimeout(ctx, z.opts.Wait)
	defer cancel()
	start := time.Now()
	m := zklock.New(z.conn, dir)
	if err := m.Lock(waitCtx); err != nil {
		return failAll(len(take()), waitFailed(ctx, dir, z.opts.Wait, err))
	}
	reqs := take()
	locked := time.Now()
	z.metrics.waited(z.Name(), locked.Sub(start))
	defer z.unlock(ctx, m, dir, locked)

	if z.opts.Unguarded {
		return lockedWrite(ctx, z.store, reqs, z.opts.Hooks)
	}
	token := stock.Token{Fence: stock.ZooKeeperFence, Value: m.Token()}
	return fencedWrite(ctx, z.store, reqs, token, dir, z.Name(), z.metrics, z.opts.Hooks, m.Held,
		func(ctx context.Context, fenced *stock.FenceError) bool { return z.recover(ctx, dir, fenced) })
}

// recover handles a fence that is ahead of the ensemble itself. Every node created under the
// lock's directory moves the directory's Pzxid, so no holder of this ensemble can have been
// granted a zxid above it (read after a sync, so that the server answering is up to date): a
// fence above it was written under another ensemble — replaced, or restored from an old
// snapshot — whose zxids started again. The fence is reset (only if it is still that value) and
// the caller retries once. A fence at or below it means a newer holder really wrote. Without an
// answer within a second, the fence stands (busy: the client retries).
func (z *ZooKeeper) recover(ctx context.Context, dir string, fenced *stock.FenceError) bool {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	if _, err := zklock.Call(ctx, func() (string, error) { return z.conn.Sync(dir) }); err != nil {
		return false
	}
	_, stat, err := zklock.Call2(ctx, func() (bool, *zk.Stat, error) { return z.conn.Exists(dir) })
	if err != nil || stat == nil || fenced.Fence <= stat.Pzxid {
		return false
	}
	z.log.Warn("fence ahead of the ZooKeeper ensemble's zxid: the ensemble was replaced; resetting the fence",
		"sku", fenced.SKU, "fence", fenced.Fence, "zxid", stat.Pzxid)
	return z.store.ResetFence(ctx, fenced.SKU, stock.ZooKeeperFence, fenced.Fence) == nil
}

// unlock deletes the lock node even when the request was cancelled. A node already gone means
// the session that held it expired: the fence kept the write safe, but it is worth a warning.
func (z *ZooKeeper) unlock(ctx context.Context, m *zklock.Mutex, dir string, locked time.Time) {
	z.metrics.held(z.Name(), dir, time.Since(locked))
	unlockCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
	defer cancel()
	ok, err := m.Unlock(unlockCtx)
	switch {
	case errors.Is(err, zk.ErrSessionExpired):
		z.metrics.lostAt(z.Name(), dir) // the node went with the session
	case err != nil:
		z.log.Warn("zookeeper unlock failed; the lock ends with the session", "dir", dir, "err", err)
	case !ok:
		z.metrics.lostAt(z.Name(), dir)
	}
}
