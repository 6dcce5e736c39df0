package lockstrategy

import (
	"log/slog"
	"time"

	"github.com/go-redsync/redsync/v4"
	redsyncredis "github.com/go-redsync/redsync/v4/redis"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/go-zookeeper/zk"
	"github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/flashsale/seckill/internal/admission"
	"github.com/flashsale/seckill/internal/lock"
	"github.com/flashsale/seckill/internal/lock/etcdlock"
	"github.com/flashsale/seckill/internal/lock/redislock"
	"github.com/flashsale/seckill/internal/lock/tablelock"
	"github.com/flashsale/seckill/internal/lock/zklock"
	"github.com/flashsale/seckill/internal/stock"
)

// Backends are the clients the strategies lock on and write to.
type Backends struct {
	Store *stock.Store
	// Redis: locks are taken on every client (more than one: a Redlock quorum); the first also
	// carries the release messages.
	Redis     []redis.UniversalClient
	Etcd      *clientv3.Client // nil: no etcd strategies
	ZooKeeper *zk.Conn         // nil: no zookeeper strategies
}

// Settings are the locks' and the sections' settings (service.Config has them, from cmd/api).
type Settings struct {
	LockTTL     time.Duration // lock expiry: redsync, the etcd lease, the lock table
	LockWait    time.Duration // a section's wait for its lock
	LockExtend  time.Duration // a watchdog's period (Redis, lock table); 0: a third of LockTTL
	LockPoll    time.Duration // a Redis waiter's retry between release messages; 0: jittered 1-5 ms
	GroupCommit int           // orders one section may place
	RowLock     stock.RowWait // pessimistic: NOWAIT or wait in the row's queue
	NaivePause  time.Duration // naive: its race window
	Instance    string        // the lock table's holder name
	Hooks       Hooks
}

// Built is every strategy of one instance.
type Built struct {
	Hybrid *Hybrid    // among Safe too; the queued strategy (package queued) writes through its section
	Safe   []Strategy // offered
	Unsafe []Strategy // refused unless the unsafe strategies are allowed
}

// Build makes every strategy the backends allow. Each is a lock and a guard: the recipes below
// are the whole of each strategy's composition. Every lock service's lock is built twice, with
// its guard and unguarded (NoGuard): the unsafe twin is the same lock without the check.
func Build(s Settings, b Backends, ledger *admission.Ledger, metrics *LockMetrics, locks *lock.Metrics, log *slog.Logger) Built {
	opts := Options{Wait: s.LockWait, Batch: s.GroupCommit, Hooks: s.Hooks}
	extend := s.LockExtend
	if extend <= 0 {
		extend = s.LockTTL / 3 // three chances to extend before the lock runs out, as Redisson's watchdog
	}
	var out Built
	safe := func(st Strategy) { out.Safe = append(out.Safe, st) }
	unsafe := func(st Strategy) { out.Unsafe = append(out.Unsafe, st) }

	// hybrid: Redis admission, a redsync lock (one node or a Redlock quorum), the version guard.
	pools := make([]redsyncredis.Pool, len(b.Redis))
	for i, c := range b.Redis {
		pools[i] = goredis.NewPool(c)
	}
	redisLock := redislock.New(redsync.New(pools...), b.Redis[0], redislock.Options{
		TTL: s.LockTTL, Extend: extend, Poll: s.LockPoll,
	}, locks.For("hybrid"))
	out.Hybrid = NewHybrid(b.Store, ledger, redisLock, opts, metrics)
	safe(out.Hybrid)
	unsafe(New("unguarded-redis", b.Store, redisLock.Observed(locks.For("unguarded-redis")), NoGuard, opts, metrics))

	for _, g := range []struct {
		prefix string
		guard  Guard
		add    func(Strategy)
	}{{"", Fence, safe}, {"unguarded-", NoGuard, unsafe}} {
		if b.Etcd != nil {
			// etcd: a mutex on a session of its own (two mutexes on one session do not exclude
			// each other), its grant revision the fencing token.
			locker := etcdlock.NewLocker(b.Etcd, etcdlock.Options{TTL: s.LockTTL}, locks.For(g.prefix+"etcd"), log)
			g.add(New(g.prefix+"etcd", b.Store, locker, g.guard, opts, metrics))
		}
		if b.ZooKeeper != nil {
			// zookeeper: the sequential-node recipe on the instance's session, the node's zxid the
			// fencing token.
			locker := zklock.NewLocker(b.ZooKeeper, "", log)
			g.add(New(g.prefix+"zookeeper", b.Store, locker, g.guard, opts, metrics))
		}
	}
	// pessimistic: the row lock in the transaction that writes (pessimistic.go).
	safe(NewPessimistic(b.Store, s.RowLock, opts, metrics))
	// dblock: a row of the lock table, the version guard.
	tableLock := tablelock.New(b.Store, tablelock.Options{TTL: s.LockTTL, Extend: extend, Instance: s.Instance},
		locks.For("dblock"), log)
	safe(New("dblock", b.Store, tableLock, Version, opts, metrics))
	// naive: no lock, no guard.
	unsafe(NewNaive(b.Store, s.NaivePause, opts, metrics))
	return out
}
