package lab

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/go-redsync/redsync/v4"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/flashsale/seckill/devserver/etcdserver"
	"github.com/flashsale/seckill/devserver/zkserver"
	"github.com/flashsale/seckill/internal/lock/etcdlock"
	"github.com/flashsale/seckill/internal/lock/zklock"
)

// reentrancy is a holder that, holding a lock, asks for it again — a locked function calling
// another that takes the same lock. A lock that knows only "taken" makes it wait for itself
// until its wait ends. Redisson's RLock counts holds per owner in a hash, so the owner passes
// and the lock is free only after as many releases as acquisitions. Beside the two forms, the
// project's other locks are asked the same question, since each answers it differently.
func reentrancy() Experiment {
	return Experiment{
		Name:  "reentrancy",
		Seed:  "«Choosing a lock», a distributed lock's requirements (可重入性, reentrancy); «Locks in practice», Curator's InterProcessMutex example; «Which lock», the lock table is not reentrant",
		Claim: "A holder that asks again for a lock it holds blocks itself on a non-reentrant lock; a lock with a hold count per owner lets it through at once and frees only after as many releases.",
		Fix:   `if redis.call("EXISTS", KEYS[1]) == 0 or redis.call("HEXISTS", KEYS[1], ARGV[1]) == 1 then redis.call("HINCRBY", KEYS[1], ARGV[1], 1) ...`,
		Run:   runReentrancy,
	}
}

// reentrantAcquire takes the lock for owner ARGV[1], or takes it once more if owner already
// holds it: the hash KEYS[1] maps each owner to its hold count (only one owner at a time ever
// has a field). Every acquisition renews the TTL (ARGV[2], ms), as Redisson's does. One script,
// so that no other owner can take the key between the check and the increment.
var reentrantAcquire = redis.NewScript(`
if redis.call("EXISTS", KEYS[1]) == 0 or redis.call("HEXISTS", KEYS[1], ARGV[1]) == 1 then
  redis.call("HINCRBY", KEYS[1], ARGV[1], 1)
  redis.call("PEXPIRE", KEYS[1], ARGV[2])
  return 1
end
return 0`)

// reentrantRelease gives back one hold of owner ARGV[1] and returns the holds left; at zero the
// key goes and the lock is free. -1: owner holds nothing (its lock expired and may be another's:
// it must not touch it). A release that leaves holds renews the TTL, since the owner is still
// inside its outer section.
var reentrantRelease = redis.NewScript(`
if redis.call("HEXISTS", KEYS[1], ARGV[1]) == 0 then return -1 end
local left = redis.call("HINCRBY", KEYS[1], ARGV[1], -1)
if left > 0 then
  redis.call("PEXPIRE", KEYS[1], ARGV[2])
  return left
end
redis.call("DEL", KEYS[1])
return 0`)

// reentrantLock is the Redis lock with a hold count per owner. The owner is an id of the
// holder's own — Redisson's is the client's UUID and the thread's id — not a value per
// acquisition as redsync's, since being the same owner is the whole point.
type reentrantLock struct {
	rdb *redis.Client
	key string
	ttl time.Duration
}

// lock tries every 10 ms until owner has the lock or bound has passed.
func (l reentrantLock) lock(ctx context.Context, owner string, bound time.Duration) (time.Duration, bool, error) {
	return waitFor(ctx, bound, 10*time.Millisecond, func() (bool, error) {
		return reentrantAcquire.Run(ctx, l.rdb, []string{l.key}, owner, l.ttl.Milliseconds()).Bool()
	})
}

// unlock gives back one hold and returns the holds left (-1: owner held none).
func (l reentrantLock) unlock(ctx context.Context, owner string) (int64, error) {
	return reentrantRelease.Run(ctx, l.rdb, []string{l.key}, owner, l.ttl.Milliseconds()).Int64()
}

// reentryTest is what one lock did when its holder asked again.
type reentryTest struct {
	label  string
	took   time.Duration
	passed bool
	said   string // what happened, in words
}

func runReentrancy(ctx context.Context, env *Env) (Result, error) {
	if err := env.needRedis(); err != nil {
		return Result{}, err
	}
	bound := pick(env.Size, 300*time.Millisecond, time.Second)
	dir, err := os.MkdirTemp("", "seckill-reentrancy-")
	if err != nil {
		return Result{}, err
	}
	defer os.RemoveAll(dir)
	// etcd and ZooKeeper start while the Redis forms run: ZooKeeper's JVM takes seconds.
	// Waited for once, by the measurement or by the cleanup, so that a form that fails early
	// still stops what was started.
	started := startServices(dir)
	defer started.stop()

	failing, err := reenterRedsync(ctx, env, bound)
	if err != nil {
		return Result{}, err
	}
	fixed, err := reenterCounted(ctx, env, bound)
	if err != nil {
		return Result{}, err
	}
	tests := []reentryTest{failing.reentryTest, fixed.reentryTest}
	var others []string // what the project's other locks did
	var notRun []Part
	if env.Store == nil {
		notRun = append(notRun, Part{Name: "lock table", Why: env.StoreErr.Error()})
	} else {
		table, err := reenterLockTable(ctx, env)
		if err != nil {
			return Result{}, err
		}
		tests = append(tests, table)
		others = append(others, table.said)
	}

	e := started.etcd()
	if e.err != nil {
		return Result{}, fmt.Errorf("embedded etcd: %w", e.err)
	}
	etcd, err := reenterEtcd(ctx, e.member, env.key("reentrancy", "etcd"), bound)
	if err != nil {
		return Result{}, err
	}
	tests = append(tests, etcd)
	others = append(others, etcd.said)

	zkServers, zkNotRun := started.zooKeeper()
	if zkNotRun != nil {
		notRun = append(notRun, *zkNotRun)
	} else {
		zt, err := reenterZK(ctx, env, zkserver.Addrs(zkServers...), bound)
		if err != nil {
			return Result{}, err
		}
		tests = append(tests, zt)
		others = append(others, zt.said)
	}

	chart := Chart{Title: fmt.Sprintf("The holder's second acquisition of a lock it holds (wait bound %s)", bound), Unit: "ms"}
	for _, t := range tests {
		chart.Bars = append(chart.Bars, Bar{Label: t.label, Value: float64(t.took.Microseconds()) / 1000, Failed: !t.passed})
	}
	failing.Happened += ". The project's other locks: " + strings.Join(others, "; ")
	return Result{Failing: failing.Outcome, Fixed: fixed.Outcome, Chart: chart, NotRun: notRun}, nil
}

// reentryForm is one form's Outcome with its bar.
type reentryForm struct {
	Outcome
	reentryTest
}

// reenterRedsync: a redsync mutex, then a second one of the same name by the same holder — the
// project makes a Mutex per acquisition, and a value per acquisition is all redsync knows of a
// holder. The second SET NX fails like anyone else's, and the holder waits for itself.
func reenterRedsync(ctx context.Context, env *Env, bound time.Duration) (reentryForm, error) {
	rs := redsync.New(goredis.NewPool(env.Redis))
	name := env.key("reentrancy", "redsync")
	first := rs.NewMutex(name, redsync.WithExpiry(10*time.Second))
	if err := first.LockContext(ctx); err != nil {
		return reentryForm{}, fmt.Errorf("first lock %s: %w", name, err)
	}
	defer first.UnlockContext(context.WithoutCancel(ctx))
	waitCtx, cancel := context.WithTimeout(ctx, bound)
	defer cancel()
	second := rs.NewMutex(name, redsync.WithExpiry(10*time.Second), redsync.WithTries(1000), redsync.WithRetryDelay(10*time.Millisecond))
	start := time.Now()
	err := second.LockContext(waitCtx)
	took := time.Since(start)
	if err == nil {
		_, _ = second.UnlockContext(context.WithoutCancel(ctx))
		return reentryForm{Outcome{Form: "redsync mutex (not reentrant)", Happened: fmt.Sprintf("the second acquisition passed in %s", took.Round(time.Millisecond))},
			reentryTest{"redsync: passed", took, true, ""}}, nil
	}
	if !errors.Is(err, redsync.ErrFailed) {
		return reentryForm{}, fmt.Errorf("second lock %s: %w", name, err)
	}
	return reentryForm{
		Outcome{Form: "redsync mutex (not reentrant)", Failed: true,
			Happened: fmt.Sprintf("the holder's second acquisition waited for its own lock until the %s bound and failed (%v)", bound, err)},
		reentryTest{"redsync: blocked by its own lock", took, false, ""}}, nil
}

// reenterCounted: the counted lock, by the same owner twice, with another owner trying after
// the first release (the outer section still holds: refused) and after the second (free).
func reenterCounted(ctx context.Context, env *Env, bound time.Duration) (reentryForm, error) {
	l := reentrantLock{rdb: env.Redis, key: env.key("reentrancy", "counted"), ttl: 10 * time.Second}
	owner, other := "owner-"+rand.Text(), "other-"+rand.Text()
	defer env.Redis.Del(context.WithoutCancel(ctx), l.key)
	if _, ok, err := l.lock(ctx, owner, bound); err != nil || !ok {
		return reentryForm{}, fmt.Errorf("first lock %s: %v, %w", l.key, ok, err)
	}
	took, again, err := l.lock(ctx, owner, bound)
	if err != nil {
		return reentryForm{}, err
	}
	var steps []bool // did the other owner get it: after one release, after two
	for range 2 {
		if _, err := l.unlock(ctx, owner); err != nil {
			return reentryForm{}, err
		}
		got, err := reentrantAcquire.Run(ctx, env.Redis, []string{l.key}, other, l.ttl.Milliseconds()).Bool()
		if err != nil {
			return reentryForm{}, err
		}
		steps = append(steps, got)
	}
	held := again && !steps[0] && steps[1]
	said := fmt.Sprintf("the second acquisition passed in %s; after one release another owner was refused (%t), after the second it got the lock (%t)",
		took.Round(100*time.Microsecond), !steps[0], steps[1])
	label := "hash with hold count: passed"
	if !again {
		said = fmt.Sprintf("the second acquisition waited until the %s bound and failed", bound)
		label = "hash with hold count: blocked by its own lock"
	}
	return reentryForm{
		Outcome{Form: "hold count per owner (Redis hash, HINCRBY in Lua)", Happened: said, Failed: !held},
		reentryTest{label, took, again, ""}}, nil
}

// reenterLockTable: stock.Store.TryLock by the holder of the row. Its INSERT hits the row's
// unique key, and its reclaim UPDATE takes only expired rows: the same holder is refused at once,
// as anyone would be — no wait (TryLock does not wait), but no entry either.
func reenterLockTable(ctx context.Context, env *Env) (reentryTest, error) {
	name := env.key("reentrancy", "table")
	ok, err := env.Store.TryLock(ctx, name, "holder", 10*time.Second)
	if err != nil || !ok {
		return reentryTest{}, fmt.Errorf("first lock %s: %v, %w", name, ok, err)
	}
	defer env.Store.Unlock(context.WithoutCancel(ctx), name, "holder")
	start := time.Now()
	again, err := env.Store.TryLock(ctx, name, "holder", 10*time.Second)
	took := time.Since(start)
	if err != nil {
		return reentryTest{}, err
	}
	if again {
		return reentryTest{"lock table TryLock, same holder: passed", took, true,
			fmt.Sprintf("the lock table's TryLock by the same holder passed in %s", took.Round(time.Millisecond))}, nil
	}
	return reentryTest{"lock table TryLock, same holder: refused", took, false,
		fmt.Sprintf("the lock table's TryLock by the same holder returned false in %s (refused at once: the row's holder is not asked)", took.Round(time.Millisecond))}, nil
}

// reenterEtcd: two etcdlock.Mutex on one session. The key is prefix + lease, the same for both, so the
// second finds its key already there and the oldest: it "holds" at once. Reentrant by accident —
// without a count: the first Unlock deletes the one key, and the outer holder, still inside its
// section, holds nothing. Another session's Lock shows it.
func reenterEtcd(ctx context.Context, m *etcdserver.Member, pfx string, bound time.Duration) (reentryTest, error) {
	client, err := etcdlock.NewClient(etcdserver.Endpoints(m))
	if err != nil {
		return reentryTest{}, err
	}
	defer client.Close()
	sessions := make([]*concurrency.Session, 2)
	for i := range sessions {
		if sessions[i], err = concurrency.NewSession(client, concurrency.WithTTL(10), concurrency.WithContext(ctx)); err != nil {
			return reentryTest{}, fmt.Errorf("etcd session: %w", err)
		}
		defer sessions[i].Close()
	}
	outer := etcdlock.New(sessions[0], pfx)
	if err := outer.Lock(ctx); err != nil {
		return reentryTest{}, fmt.Errorf("etcd lock %s: %w", pfx, err)
	}
	waitCtx, cancel := context.WithTimeout(ctx, bound)
	defer cancel()
	inner := etcdlock.New(sessions[0], pfx)
	start := time.Now()
	err = inner.Lock(waitCtx)
	took := time.Since(start)
	if err != nil {
		if waitCtx.Err() == nil {
			return reentryTest{}, fmt.Errorf("etcd second lock %s: %w", pfx, err)
		}
		return reentryTest{"EtcdMutex, same session: blocked", took, false,
			fmt.Sprintf("EtcdMutex on the same session waited until the %s bound", bound)}, outer.Unlock(ctx)
	}
	if err := inner.Unlock(ctx); err != nil {
		return reentryTest{}, err
	}
	// The outer holder has not released; a lock with a count would still be its own.
	otherCtx, cancel := context.WithTimeout(ctx, bound)
	defer cancel()
	other := etcdlock.New(sessions[1], pfx)
	otherStart := time.Now()
	otherErr := other.Lock(otherCtx)
	otherTook := time.Since(otherStart)
	if otherErr == nil {
		defer other.Unlock(context.WithoutCancel(ctx))
	}
	if err := outer.Unlock(ctx); err != nil {
		return reentryTest{}, err
	}
	freed := "the outer hold survived the inner release: another session waited out the bound"
	if otherErr == nil {
		freed = fmt.Sprintf("the inner Unlock freed the outer hold too: another session took the lock in %s while the outer holder was still inside", otherTook.Round(time.Millisecond))
	}
	return reentryTest{"EtcdMutex, same session: passed (no count)", took, true,
		fmt.Sprintf("EtcdMutex on the same session returned at once (%s), reentrant by accident — two mutexes on one session share one key; %s", took.Round(time.Millisecond), freed)}, nil
}

// reenterZK: two zklock.Mutex handles on one connection (one session). Each makes its own sequential
// node, so the second is a waiter behind the first: the holder waits for itself. Curator's
// InterProcessMutex is reentrant only because it counts holds per thread in the process, in
// front of the nodes.
func reenterZK(ctx context.Context, env *Env, addrs []string, bound time.Duration) (reentryTest, error) {
	conn, err := zklock.Dial(addrs, 2*time.Second, env.Log)
	if err != nil {
		return reentryTest{}, err
	}
	defer conn.Close()
	dir := "/seckill-lab/" + strings.ReplaceAll(env.key("reentrancy", "zk"), ":", "-")
	outer := zklock.New(conn, dir)
	if err := outer.Lock(ctx); err != nil {
		return reentryTest{}, fmt.Errorf("zookeeper lock %s: %w", dir, err)
	}
	defer outer.Unlock(context.WithoutCancel(ctx))
	waitCtx, cancel := context.WithTimeout(ctx, bound)
	defer cancel()
	start := time.Now()
	err = zklock.New(conn, dir).Lock(waitCtx)
	took := time.Since(start)
	if err == nil {
		return reentryTest{"ZKMutex, same session: passed", took, true,
			fmt.Sprintf("a second zklock.Mutex on the same session passed in %s", took.Round(time.Millisecond))}, nil
	}
	if waitCtx.Err() == nil {
		return reentryTest{}, fmt.Errorf("zookeeper second lock %s: %w", dir, err)
	}
	return reentryTest{"ZKMutex, same session: blocked", took, false,
		fmt.Sprintf("a second zklock.Mutex on the same session queued behind the holder's own node and waited until the %s bound", bound)}, nil
}
