package lab

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/go-redsync/redsync/v4"
	redsyncredis "github.com/go-redsync/redsync/v4/redis"
	"github.com/go-zookeeper/zk"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/flashsale/seckill/devserver/etcdserver"
	"github.com/flashsale/seckill/devserver/zkserver"
	"github.com/flashsale/seckill/internal/lock/etcdlock"
	"github.com/flashsale/seckill/internal/lock/zklock"
	"github.com/flashsale/seckill/internal/stock"
)

// A lockCycle is one client of a lock: it takes the lock on key, waiting for it at most about
// bound, and releases it at once. false is a wait that ran out — contention, counted — and an
// error is a lock that broke.
type lockCycle func(ctx context.Context, key string, bound time.Duration) (bool, error)

// lockFamily is one lock of the tables, opened for up to n clients.
type lockFamily struct {
	slug, name string
	// open makes n clients; each has its own session where the lock ties ownership to one
	// (etcd, ZooKeeper). close ends what open made.
	open func(ctx context.Context, n int) (clients []lockCycle, close func(), err error)
}

// pollEvery is how often a lock without a queue of its own (Redis SET NX, the lock table) tries
// again while another client holds it. redsync's default, a random 50-250 ms, would measure its
// sleep, not the lock; 2 ms keeps a freed lock from idling while the backend still answers.
const pollEvery = 2 * time.Millisecond

// throughputTTL is the expiry of the locks that have one: far longer than a cycle, so that no
// lock expires under its holder and every release is a real one.
const throughputTTL = 2 * time.Second

// redsyncFamily is redsync on pools: one pool is a single Redis, several are Redlock. A Mutex is
// made per acquisition (it is not safe to share).
func redsyncFamily(slug, name string, pools []redsyncredis.Pool) lockFamily {
	rs := redsync.New(pools...)
	cycle := func(ctx context.Context, key string, bound time.Duration) (bool, error) {
		// The wait is bounded by tries, not by a deadline: redsync releases a failed try with
		// the caller's context, and a deadline that fell during the try would leave the key set
		// on the nodes that granted it until it expired, stalling every client of the key.
		m := rs.NewMutex(key, redsync.WithExpiry(throughputTTL), redsync.WithTries(int(bound/pollEvery)+1),
			redsync.WithRetryDelay(pollEvery))
		err := m.LockContext(context.WithoutCancel(ctx))
		var taken *redsync.ErrTaken
		switch {
		case errors.Is(err, redsync.ErrFailed) || errors.As(err, &taken):
			return false, nil
		case err != nil:
			return false, err
		}
		ok, err := m.UnlockContext(context.WithoutCancel(ctx))
		if err == nil && !ok {
			err = fmt.Errorf("unlock %s: not held on a majority", key)
		}
		return true, err
	}
	return lockFamily{slug: slug, name: name, open: func(_ context.Context, n int) ([]lockCycle, func(), error) {
		return repeat(cycle, n), func() {}, nil
	}}
}

// lockTableFamily is the lock table: poll with a plain read while the lock is taken, try the
// INSERT when it looks free (LockTaken says why: failed INSERTs lock the row the holder's
// DELETE needs), delete the row to release.
func lockTableFamily(env *Env) lockFamily {
	return lockFamily{slug: "table", name: "DB lock table", open: func(_ context.Context, n int) ([]lockCycle, func(), error) {
		clients := make([]lockCycle, n)
		for i := range clients {
			holder := fmt.Sprintf("client-%d", i)
			clients[i] = func(ctx context.Context, key string, bound time.Duration) (bool, error) {
				// No deadline on the statements, as for redsync: an INSERT cut short by one may
				// still have taken the lock, which would then hold the key for its TTL.
				ctx = context.WithoutCancel(ctx)
				_, ok, err := waitFor(ctx, bound, pollEvery, func() (bool, error) {
					taken, err := env.Store.LockTaken(ctx, key)
					if err != nil || taken {
						return false, err
					}
					return env.Store.TryLock(ctx, key, holder, throughputTTL)
				})
				if errors.Is(err, stock.ErrBusy) { // a deadlock between pollers: the wait failed
					return false, nil
				}
				if err != nil || !ok {
					return false, err
				}
				released, err := env.Store.Unlock(ctx, key, holder)
				if err == nil && !released {
					err = fmt.Errorf("unlock %s: not held", key)
				}
				return true, err
			}
		}
		return clients, func() {}, nil
	}}
}

// rowLockFamily is SELECT ... FOR UPDATE and COMMIT on a product row, on the store's main pool.
// The key is the product's SKU: measureFamily's keys are the products runThroughput made.
func rowLockFamily(env *Env) lockFamily {
	cycle := func(ctx context.Context, sku string, bound time.Duration) (bool, error) {
		// A deadline is safe here: a query it cuts short closes its connection, and the server
		// rolls the transaction back, releasing the row.
		wctx, cancel := context.WithTimeout(ctx, bound)
		defer cancel()
		err := env.Store.LockRow(wctx, sku)
		if err != nil && (wctx.Err() != nil || errors.Is(err, stock.ErrBusy)) {
			return false, nil
		}
		return err == nil, err
	}
	return lockFamily{slug: "row", name: "SELECT ... FOR UPDATE", open: func(_ context.Context, n int) ([]lockCycle, func(), error) {
		return repeat(cycle, n), func() {}, nil
	}}
}

// etcdFamily is etcdlock.Mutex with a session per client: two mutexes on one session do not exclude
// each other, so a shared session would measure no lock at all.
func etcdFamily(m *etcdserver.Member) lockFamily {
	return lockFamily{slug: "etcd", name: "etcd (etcdlock.Mutex)", open: func(ctx context.Context, n int) ([]lockCycle, func(), error) {
		client, err := etcdlock.NewClient(etcdserver.Endpoints(m))
		if err != nil {
			return nil, nil, err
		}
		var sessions []*concurrency.Session
		closeAll := func() {
			for _, s := range sessions {
				_ = s.Close()
			}
			_ = client.Close()
		}
		clients := make([]lockCycle, n)
		for i := range clients {
			s, err := concurrency.NewSession(client, concurrency.WithTTL(10), concurrency.WithContext(ctx))
			if err != nil {
				closeAll()
				return nil, nil, fmt.Errorf("etcd session: %w", err)
			}
			sessions = append(sessions, s)
			clients[i] = func(ctx context.Context, key string, bound time.Duration) (bool, error) {
				// A deadline is safe: Lock removes its key when it gives up.
				wctx, cancel := context.WithTimeout(ctx, bound)
				defer cancel()
				m := etcdlock.New(s, "/seckill-lab/"+key)
				if err := m.Lock(wctx); err != nil {
					if wctx.Err() != nil {
						return false, nil
					}
					return false, err
				}
				return true, m.Unlock(context.WithoutCancel(ctx))
			}
		}
		return clients, closeAll, nil
	}}
}

// zkFamily is zklock.Mutex with a connection, so a session, per client, as that many processes would
// have — up to zkConns of them, which the clients beyond share. Sharing is safe (each handle has
// its own node, so two on one session still exclude each other), but not needed below 50.
func zkFamily(env *Env, servers []*zkserver.Server) lockFamily {
	return lockFamily{slug: "zk", name: "ZooKeeper (zklock.Mutex)", open: func(_ context.Context, n int) ([]lockCycle, func(), error) {
		var conns []*zk.Conn // the first min(n, zkConns); client i uses conns[i % zkConns]
		closeAll := func() {
			for _, c := range conns {
				c.Close()
			}
		}
		clients := make([]lockCycle, n)
		for i := range clients {
			if i < zkConns {
				conn, err := zklock.Dial(zkserver.Addrs(servers...), 4*time.Second, env.Log)
				if err != nil {
					closeAll()
					return nil, nil, err
				}
				conns = append(conns, conn)
			}
			conn := conns[i%zkConns]
			clients[i] = func(ctx context.Context, key string, bound time.Duration) (bool, error) {
				// A deadline is safe: a waiter that gives up deletes its node, or its orphan.
				wctx, cancel := context.WithTimeout(ctx, bound)
				defer cancel()
				m := zklock.New(conn, "/seckill-lab/"+strings.ReplaceAll(key, ":", "-"))
				if err := m.Lock(wctx); err != nil {
					if wctx.Err() != nil {
						return false, nil
					}
					return false, err
				}
				released, err := m.Unlock(context.WithoutCancel(ctx))
				if err == nil && !released {
					err = fmt.Errorf("unlock %s: its node was gone", key)
				}
				return true, err
			}
		}
		return clients, closeAll, nil
	}}
}

// zkConns is the most connections zkFamily opens: ZooKeeper refuses more than 60 from one
// address (maxClientCnxns), and the 64 clients' connections would be cut, not measured.
const zkConns = 50

// repeat is n clients of one cycle, for the locks whose clients share a connection pool.
func repeat(cycle lockCycle, n int) []lockCycle {
	clients := make([]lockCycle, n)
	for i := range clients {
		clients[i] = cycle
	}
	return clients
}
