package lab

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"os"
	"path"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-zookeeper/zk"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/flashsale/seckill/devserver/etcdserver"
	"github.com/flashsale/seckill/devserver/zkserver"
	"github.com/flashsale/seckill/internal/lock/etcdlock"
	"github.com/flashsale/seckill/internal/lock/zklock"
	"github.com/flashsale/seckill/quantile"
)

// herd is the herd effect of a queue lock. Waiters that watch the lock itself — the prefix in
// etcd, the directory's children in ZooKeeper — are all woken by every release; all but one look
// at the queue, find they are not next, and go back to sleep. N waiters and N hand-offs cost about
// N²/2 wake-ups, each a read on the lock service, and the one waiter that matters queues its read
// behind everyone else's. Watching only the key or node just below one's own wakes one waiter per
// release: the recipe of all three sources (docs/sources.md), and what etcdlock.Mutex and zklock.Mutex do.
func herd() Experiment {
	return Experiment{
		Name:  "herd",
		Seed:  "«Choosing a lock», «Locks in practice» and «Which lock»: watch only the next-lower node, not the lock (the herd effect)",
		Claim: "Waiters that watch the whole lock are all woken by every release, so a hand-off costs a wake-up per waiter; a waiter that watches only its predecessor is woken once, when its turn comes.",
		Fix:   "conn.ExistsW(path.Join(dir, predecessor)) // zklock.Mutex; etcdlock.Mutex: client.Watch(ctx, predecessorKey, clientv3.WithFilterPut())",
		Run:   runHerd,
	}
}

// herdHold is how long each holder keeps the lock: long enough for each release to reach the
// waiters on its own, as releases of a working lock do.
const herdHold = 5 * time.Millisecond

// herdLockEtcd is the herd in etcd, the wrong form on purpose. The waiter puts its key under the
// lock's prefix, as concurrency.Mutex does, but then watches the whole prefix and, at every
// delete under it, asks again whether its key is now the oldest. Every release wakes every
// waiter. etcdlock.Mutex watches the one key created just before its own instead. A waiter that fails
// leaves its key to its session, whose end deletes it.
func herdLockEtcd(ctx context.Context, s *concurrency.Session, pfx string) (func(context.Context) error, error) {
	client := s.Client()
	key := fmt.Sprintf("%s/%x", pfx, s.Lease())
	put, err := client.Put(ctx, key, "", clientv3.WithLease(s.Lease()))
	if err != nil {
		return nil, err
	}
	release := func(ctx context.Context) error { _, err := client.Delete(ctx, key); return err }
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// Watch first, then look: a release between the two is seen by the look.
	watch := client.Watch(clientv3.WithRequireLeader(wctx), pfx+"/", clientv3.WithPrefix(), clientv3.WithFilterPut(), clientv3.WithCreatedNotify())
	for wr := range watch {
		if err := wr.Err(); err != nil {
			return nil, err
		}
		oldest, err := client.Get(ctx, pfx+"/", clientv3.WithFirstCreate()...)
		if err != nil {
			return nil, err
		}
		if len(oldest.Kvs) > 0 && oldest.Kvs[0].CreateRevision == put.Header.Revision {
			return release, nil
		}
	}
	return nil, errors.Join(ctx.Err(), errors.New("etcd watch ended before the lock was had"))
}

// herdLockZK is the herd in ZooKeeper, the wrong form on purpose: the waiter makes its
// sequential node, then sets a children watch on the lock's directory and lists it again
// whenever the watch fires — which every release (and every arrival) does for every waiter, and
// for the holder too, whose last watch is still set when it releases. zklock.Mutex watches only the
// node just below its own (ExistsW). A waiter that fails leaves its ephemeral node to its
// session, whose end deletes it.
func herdLockZK(ctx context.Context, conn *zk.Conn, dir string) (func(context.Context) error, error) {
	node, err := conn.Create(dir+"/lock-", nil, zk.FlagEphemeralSequential, zk.WorldACL(zk.PermAll))
	if err != nil {
		return nil, err
	}
	for {
		children, _, changed, err := conn.ChildrenW(dir)
		if err != nil {
			return nil, err
		}
		// Every name is "lock-" and ten digits: they sort as their numbers do.
		if slices.Min(children) == path.Base(node) {
			return func(context.Context) error { return conn.Delete(node, -1) }, nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// herdForm is one way of waiting for the lock, on each lock service.
type herdForm struct {
	etcdName, zkName string
	herds            bool // the wrong form
	etcd             func(ctx context.Context, s *concurrency.Session, pfx string) (func(context.Context) error, error)
	zk               func(ctx context.Context, conn *zk.Conn, dir string) (func(context.Context) error, error)
}

func runHerd(ctx context.Context, env *Env) (Result, error) {
	n := pick(env.Size, 8, 32)
	forms := []herdForm{
		{"etcd, Watch(prefix)", "ZooKeeper, ChildrenW(dir)", true, herdLockEtcd, herdLockZK},
		{"etcd, Watch(predecessor): EtcdMutex", "ZooKeeper, ExistsW(predecessor): ZKMutex", false,
			func(ctx context.Context, s *concurrency.Session, pfx string) (func(context.Context) error, error) {
				m := etcdlock.New(s, pfx)
				if err := m.Lock(ctx); err != nil {
					return nil, err
				}
				return m.Unlock, nil
			},
			func(ctx context.Context, conn *zk.Conn, dir string) (func(context.Context) error, error) {
				m := zklock.New(conn, dir)
				if err := m.Lock(ctx); err != nil {
					return nil, err
				}
				return func(ctx context.Context) error {
					held, err := m.Unlock(ctx)
					if err == nil && !held {
						err = errors.New("its node was gone before the release: the session expired")
					}
					return err
				}, nil
			}},
	}
	dir, err := os.MkdirTemp("", "seckill-lab-herd-")
	if err != nil {
		return Result{}, err
	}
	defer os.RemoveAll(dir)
	// ZooKeeper's JVM takes seconds to start: it starts while etcd does, and is waited for once
	// etcd's part is done.
	started := startServices(dir)
	defer started.stop()
	e := started.etcd()
	if e.err != nil {
		return Result{}, fmt.Errorf("embedded etcd: %w", e.err)
	}

	var runs [2][]herdRun // by form: etcd, then ZooKeeper
	for i, f := range forms {
		r, err := herdEtcd(ctx, etcdserver.Endpoints(e.member), env.key("herd", fmt.Sprint(i)), n, f.etcd)
		if err != nil {
			return Result{}, fmt.Errorf("%s: %w", f.etcdName, err)
		}
		r.label = f.etcdName
		runs[i] = append(runs[i], r)
	}
	zkServers, zkNotRun := started.zooKeeper()
	if zkNotRun == nil {
		for i, f := range forms {
			r, err := herdZK(ctx, zkserver.Addrs(zkServers...), "/"+env.key("herd", fmt.Sprint(i)), n, f.zk)
			if err != nil {
				return Result{}, fmt.Errorf("%s: %w", f.zkName, err)
			}
			r.label = f.zkName
			runs[i] = append(runs[i], r)
		}
	}

	// A herd's release wakes a share of the queue, growing with it; the fix's wakes the successor.
	herded := func(f herdForm, r herdRun) bool {
		if f.herds {
			return r.wakesPerHandoff() > float64(n)/4
		}
		return r.wakesPerHandoff() > 1.5
	}
	chart := Chart{Title: fmt.Sprintf("Waiters woken per hand-off, %d waiters", n), Unit: "wake-ups"}
	var out [2]Outcome
	for i, f := range forms {
		var said []string
		everywhere, anywhere := true, false
		for _, r := range runs[i] {
			h := herded(f, r)
			everywhere, anywhere = everywhere && h, anywhere || h
			said = append(said, r.said())
			chart.Bars = append(chart.Bars, Bar{Label: r.label, Value: r.wakesPerHandoff(), Failed: h})
		}
		// The wrong form fails if it herds on every lock service; the fix, if it does on any.
		failed := anywhere
		if f.herds {
			failed = everywhere
		}
		form := f.etcdName
		if zkNotRun == nil {
			form += "; " + f.zkName
		}
		out[i] = Outcome{Form: form, Happened: strings.Join(said, "; "), Failed: failed}
	}
	out[0].Form = "every waiter watches the lock: " + out[0].Form
	out[1].Form = "every waiter watches only its predecessor: " + out[1].Form
	res := Result{Failing: out[0], Fixed: out[1], Chart: chart}
	if zkNotRun != nil {
		res.NotRun = []Part{*zkNotRun}
	}
	return res, nil
}

// herdEtcd runs n hand-offs of the lock at pfx among n+1 sessions of one client, each waiter's
// lock taken by lock, and counts what the client's watches delivered to them.
func herdEtcd(ctx context.Context, endpoints []string, pfx string, n int,
	lock func(context.Context, *concurrency.Session, string) (func(context.Context) error, error)) (herdRun, error) {
	client, err := etcdlock.NewClient(endpoints)
	if err != nil {
		return herdRun{}, err
	}
	defer client.Close()
	var seen watchCount
	client.Watcher = countedWatcher{Watcher: client.Watcher, seen: &seen}
	acquires := make([]acquire, n+1)
	for i := range acquires {
		// A session each: the key is the lease's, and two lockers on one session would share it.
		s, err := concurrency.NewSession(client, concurrency.WithTTL(10))
		if err != nil {
			return herdRun{}, err
		}
		defer s.Close()
		acquires[i] = func(ctx context.Context) (func(context.Context) error, error) { return lock(ctx, s, pfx) }
	}
	queued := func(ctx context.Context) (int, error) {
		resp, err := client.Get(ctx, pfx+"/", clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err != nil {
			return 0, err
		}
		return int(resp.Count), nil
	}
	return handOff(ctx, acquires, queued, &seen)
}

// herdZK runs n hand-offs of the lock in dir among n+1 ZooKeeper sessions. A session each, as
// instances have: ZooKeeper keeps one watch per session and path and notifies it once, so waiters
// sharing a session would share their notification, and the herd would hide inside the client.
func herdZK(ctx context.Context, addrs []string, dir string, n int,
	lock func(context.Context, *zk.Conn, string) (func(context.Context) error, error)) (herdRun, error) {
	var seen watchCount
	conns := make([]*zk.Conn, n+1)
	acquires := make([]acquire, n+1)
	for i := range conns {
		conn, err := herdConn(addrs, &seen)
		if err != nil {
			return herdRun{}, err
		}
		defer conn.Close()
		conns[i] = conn
		acquires[i] = func(ctx context.Context) (func(context.Context) error, error) { return lock(ctx, conn, dir) }
	}
	if _, err := conns[0].Create(dir, nil, 0, zk.WorldACL(zk.PermAll)); err != nil {
		return herdRun{}, fmt.Errorf("create %s: %w", dir, err)
	}
	queued := func(context.Context) (int, error) {
		children, _, err := conns[0].Children(dir) // no watch: it notifies nobody
		return len(children), err
	}
	return handOff(ctx, acquires, queued, &seen)
}

// herdConn opens a ZooKeeper session whose watch notifications are counted into seen: one
// notification is one wake-up, since a ZooKeeper watch fires once.
func herdConn(addrs []string, seen *watchCount) (*zk.Conn, error) {
	count := func(ev zk.Event) {
		if ev.Type != zk.EventSession && ev.Type != zk.EventNotWatching {
			seen.events.Add(1)
			seen.wakes.Add(1)
		}
	}
	conn, events, err := zk.Connect(addrs, 4*time.Second, zk.WithLogger(log.New(io.Discard, "", 0)), zk.WithLogInfo(false), zk.WithEventCallback(count))
	if err != nil {
		return nil, err
	}
	deadline := time.After(5 * time.Second)
	for {
		select {
		case ev := <-events:
			if ev.State == zk.StateHasSession {
				return conn, nil // the client drops the events nobody reads
			}
		case <-deadline:
			conn.Close()
			return nil, fmt.Errorf("no ZooKeeper session on %v in 5 s", addrs)
		}
	}
}

// acquire takes the lock for one waiter and returns its release.
type acquire func(ctx context.Context) (release func(context.Context) error, err error)

// watchCount counts the watch notifications that reached the waiters: the events, and the
// wake-ups — notifications that end a wait (an etcd watch response, a ZooKeeper watch firing),
// after which the waiter looks at the lock again.
type watchCount struct{ events, wakes atomic.Int64 }

// countedWatcher is an etcd client's Watcher with what it delivers counted: every watch of the
// client — the herd waiter's, etcdlock.Mutex's — goes through it.
type countedWatcher struct {
	clientv3.Watcher
	seen *watchCount
}

// Watch is the client's Watch, with each response that carries events counted.
func (w countedWatcher) Watch(ctx context.Context, key string, opts ...clientv3.OpOption) clientv3.WatchChan {
	in := w.Watcher.Watch(ctx, key, opts...)
	out := make(chan clientv3.WatchResponse)
	go func() {
		defer close(out)
		for wr := range in {
			if len(wr.Events) > 0 {
				w.seen.events.Add(int64(len(wr.Events)))
				w.seen.wakes.Add(1)
			}
			select {
			case out <- wr:
			case <-ctx.Done(): // the watcher has gone; the client closes in
			}
		}
	}()
	return out
}

// herdRun is one form's hand-offs on one lock service.
type herdRun struct {
	label             string
	waiters, handoffs int
	events, wakes     int64
	p50, p99          time.Duration // of the hand-offs: from a release's start to the next holder's
}

// wakesPerHandoff is how many waiters a release woke, on average.
func (r herdRun) wakesPerHandoff() float64 { return float64(r.wakes) / float64(r.handoffs) }

// said is the run in a sentence. Of a release's wake-ups one is useful, the successor's: the
// others found they were not next.
func (r herdRun) said() string {
	return fmt.Sprintf("%s: %d hand-offs among %d waiters delivered %d watch events; a release woke %.1f clients on average, %.1f of them for nothing; hand-off p50 %s, p99 %s",
		r.label, r.handoffs, r.waiters, r.events, r.wakesPerHandoff(), max(0, r.wakesPerHandoff()-1), ms(r.p50), ms(r.p99))
}

// handOff hands one lock on from holder to holder: the first of acquires takes it, the others
// queue behind it (queued counts the lock's queue), and each, once it holds the lock, keeps it
// for herdHold and releases it. What the waiters are notified of is counted from the moment the
// queue is complete, so only releases are counted, not arrivals.
func handOff(ctx context.Context, acquires []acquire, queued func(context.Context) (int, error), seen *watchCount) (herdRun, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	release, err := acquires[0](ctx)
	if err != nil {
		return herdRun{}, err
	}
	start := time.Now()
	var (
		released atomic.Int64 // when the last release began, since start
		holders  atomic.Int32 // the lock's holders at this moment: never more than one
		wg       sync.WaitGroup
	)
	holders.Store(1)
	waiters := acquires[1:]
	took := make([]time.Duration, len(waiters))
	errs := make([]error, len(waiters)+1)
	for i, lock := range waiters {
		wg.Go(func() {
			release, err := lock(ctx)
			if err != nil {
				errs[i] = err
				return
			}
			took[i] = time.Since(start) - time.Duration(released.Load())
			if holders.Add(1) > 1 {
				errs[i] = errors.New("two holders at once: the lock is broken")
			}
			sleep(ctx, herdHold)
			holders.Add(-1)
			released.Store(int64(time.Since(start)))
			errs[i] = errors.Join(errs[i], release(ctx))
		})
	}
	for {
		q, err := queued(ctx)
		if err != nil || q == len(acquires) {
			errs[len(waiters)] = err
			break
		}
		sleep(ctx, 10*time.Millisecond)
	}
	sleep(ctx, 200*time.Millisecond) // the last to arrive set their watches
	events, wakes := seen.events.Load(), seen.wakes.Load()
	holders.Add(-1)
	released.Store(int64(time.Since(start)))
	if err := release(ctx); err != nil {
		cancel()
		errs[len(waiters)] = errors.Join(errs[len(waiters)], err)
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return herdRun{}, err
	}
	return herdRun{waiters: len(waiters), handoffs: len(waiters), events: seen.events.Load() - events, wakes: seen.wakes.Load() - wakes,
		p50: quantile.Of(took, 0.5), p99: quantile.Of(took, 0.99)}, nil
}
