package zklock

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/flashsale/seckill/internal/lock"
	"github.com/flashsale/seckill/internal/stock"
)

// Locker is the coordination-service lock of the lock write-up, on a real ZooKeeper, the
// lock of the zookeeper strategy (with the fence) and of unguarded-zookeeper (with no guard): the
// recipe of ephemeral sequential nodes (Mutex) per SKU, on the instance's session, with
// the lock node's creation zxid as the fencing token that the database checks
// (stock.ZooKeeperFence, a fence of its own: zxids and etcd revisions are different sequences).
//
// Order of events for one batch:
//  1. The batcher runs one section per SKU in this instance, so at most one of its waiters
//     queues in ZooKeeper per SKU.
//  2. Mutex.Lock: a node under /seckill/locks/<sku>, a watch on the predecessor only, within
//     the wait budget (then busy).
//  3. Still held? (Token: the session that made the node is the current one, and the node is there) —
//     else the section is abandoned before it writes; a lost session is replaced by the client,
//     and the next section makes its node on the new one.
//  4. The fenced write: UPDATE ... SET zk_fence = zxid WHERE version = ? AND zk_fence <= zxid.
//  5. Delete the node.
//
// Unlike etcd's, one session can serve several strategies: exclusion is by the order of the
// nodes, and every acquisition makes its own.
type Locker struct {
	conn   *zk.Conn
	prefix string
	log    *slog.Logger
}

// NewLocker returns the ZooKeeper lock on conn, this instance's session, with the lock
// directories under prefix (default /seckill/locks).
func NewLocker(conn *zk.Conn, prefix string, log *slog.Logger) *Locker {
	if prefix == "" {
		prefix = "/seckill/locks"
	}
	return &Locker{conn: conn, prefix: prefix, log: log}
}

// Backend implements lock.Locker.
func (*Locker) Backend() string { return "zookeeper" }

// Key implements lock.Locker: the directory of sku's lock nodes.
func (z *Locker) Key(sku string) string { return z.prefix + "/" + sku }

// Close implements lock.Locker: the session is the instance's, closed by its owner.
func (*Locker) Close() error { return nil }

// Lock implements lock.Locker.
func (z *Locker) Lock(ctx context.Context, dir string) (lock.Lock, error) {
	m := New(z.conn, dir)
	if err := m.Lock(ctx); err != nil {
		return nil, err
	}
	return &hold{locker: z, m: m, dir: dir}, nil
}

// hold is one acquisition of the ZooKeeper lock.
type hold struct {
	locker *Locker
	m      *Mutex
	dir    string
}

// Token implements lock.Lock: the creation zxid of the lock node, while the node's session is
// the current one and the node is there.
func (h *hold) Token(ctx context.Context) (stock.Token, error) {
	if !h.m.Held(ctx) {
		return stock.Token{}, fmt.Errorf("zookeeper lock node under %s: %w", h.dir, lock.ErrLost)
	}
	return stock.Token{Fence: stock.ZooKeeperFence, Value: h.m.Token()}, nil
}

// Lost implements lock.Lock: nil, since the fence, not the section's end, stops a holder whose
// session ends (see lock.Lock).
func (*hold) Lost() <-chan struct{} { return nil }

// Known implements lock.Lock: ZooKeeper hands nothing over.
func (*hold) Known() *stock.Product { return nil }

// Ahead implements lock.Lock. Every node created under the lock's directory moves the
// directory's Pzxid, so no holder of this ensemble can have been granted a zxid above it (read
// after a sync, so that the server answering is up to date): a fence above it was written under
// another ensemble — replaced, or restored from an old snapshot — whose zxids started again.
// Without an answer within a second, the fence stands (busy: the client retries).
func (h *hold) Ahead(ctx context.Context, fenced *stock.FenceError) bool {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	conn := h.locker.conn
	if _, err := Call(ctx, func() (string, error) { return conn.Sync(h.dir) }); err != nil {
		return false
	}
	_, stat, err := Call2(ctx, func() (bool, *zk.Stat, error) { return conn.Exists(h.dir) })
	if err != nil || stat == nil || fenced.Fence <= stat.Pzxid {
		return false
	}
	h.locker.log.Warn("fence ahead of the ZooKeeper ensemble's zxid: the ensemble was replaced; resetting the fence",
		"sku", fenced.SKU, "fence", fenced.Fence, "zxid", stat.Pzxid)
	return true
}

// Unlock implements lock.Lock: it deletes the lock node. A node already gone means the session
// that held it expired.
func (h *hold) Unlock(ctx context.Context, _ *stock.Product) bool {
	ok, err := h.m.Unlock(ctx)
	switch {
	case errors.Is(err, zk.ErrSessionExpired):
		return false // the node went with the session
	case err != nil:
		h.locker.log.Warn("zookeeper unlock failed; the lock ends with the session", "dir", h.dir, "err", err)
		return true
	}
	return ok
}
