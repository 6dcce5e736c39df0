package lab

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/go-redsync/redsync/v4"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/flashsale/seckill/internal/stock"
)

// crossedCheckouts is two checkouts of the same two products that list them in opposite orders
// (A+B against B+A), each taking its products' locks in the order its request lists them: each
// takes its first, then waits for the one the other holds. A lock with an expiry frees a dead
// holder — the deadlock the sources warn of — but not two live ones waiting for each other:
// their waits run out (Redis, etcd), or the database finds the cycle and kills one (row locks).
// Taken in one global order — SKU order, as every strategy does (stock.SKUOrder) — the second
// waits for the first holding nothing, and both go through.
func crossedCheckouts() Experiment {
	return Experiment{
		Name:  "crossed-checkouts",
		Seed:  "«Choosing a lock», a distributed lock's requirements (避免死锁, no deadlock); «Which lock», the lock table's problems",
		Claim: "Two holders that take two locks in opposite orders wait for each other whatever the lock service (until their waits run out, or the database kills one); taken in one global order, both go through.",
		Fix:   `slices.SortFunc(out, func(a, b OrderRequest) int { return strings.Compare(a.SKU, b.SKU) }) // stock.SKUOrder`,
		Run:   runCrossedCheckouts,
	}
}

// pairLocker takes and releases the locks of one backend for one holder; lock waits at most
// until ctx ends.
type pairLocker interface {
	lock(ctx context.Context, name string) error
	unlockAll(ctx context.Context)
}

// crossedBackend is one lock service the checkouts cross on: a holder of its own for each
// checkout.
type crossedBackend struct {
	name   string
	holder func(ctx context.Context) (pairLocker, error)
}

// crossing is what one form did on one backend.
type crossing struct {
	took     time.Duration // until both checkouts held both locks, or gave up
	through  int           // checkouts that held both their locks
	refusals []string      // what stopped the others
}

func runCrossedCheckouts(ctx context.Context, env *Env) (Result, error) {
	if err := env.needRedis(); err != nil {
		return Result{}, err
	}
	if err := env.needStore(); err != nil {
		return Result{}, err
	}
	wait := pick(env.Size, time.Second, 3*time.Second)
	db, err := sql.Open("mysql", env.base.MySQLDSN)
	if err != nil {
		return Result{}, err
	}
	defer db.Close()
	endpoints, err := env.etcdEndpoints()
	if err != nil {
		return Result{}, err
	}
	etcd, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second})
	if err != nil {
		return Result{}, err
	}
	defer etcd.Close()
	a, b := env.key("crossed", "a"), env.key("crossed", "b")
	for _, sku := range []string{a, b} {
		if _, err := env.Store.PutProduct(ctx, stock.ProductSpec{SKU: sku, Name: "crossed", Stock: 1, MaxPerOrder: 1}); err != nil {
			return Result{}, err
		}
	}
	rs := redsync.New(goredis.NewPool(env.Redis))
	backends := []crossedBackend{
		{"Redis (redsync)", func(context.Context) (pairLocker, error) { return &redsyncPair{rs: rs}, nil }},
		{"etcd (mutex)", func(ctx context.Context) (pairLocker, error) {
			s, err := concurrency.NewSession(etcd, concurrency.WithTTL(5), concurrency.WithContext(ctx))
			return &etcdPair{session: s}, err
		}},
		{"MariaDB (FOR UPDATE)", func(ctx context.Context) (pairLocker, error) {
			tx, err := db.BeginTx(ctx, nil)
			return &rowPair{tx: tx}, err
		}},
	}
	forms := []struct {
		name  string
		order func(first, second string) []string
	}{
		{"request order (A+B against B+A)", func(first, second string) []string { return []string{first, second} }},
		{"SKU order (both A, then B)", func(first, second string) []string {
			return []string{min(first, second), max(first, second)}
		}},
	}
	chart := Chart{Title: fmt.Sprintf("Time until both crossed checkouts held both locks or gave up (lock wait %s)", wait), Unit: "s"}
	var out [2]Outcome
	for i, f := range forms {
		var said []string
		failed := false
		for _, be := range backends {
			c, err := crossOnce(ctx, be, f.order(a, b), f.order(b, a), wait)
			if err != nil {
				return Result{}, fmt.Errorf("%s, %s: %w", f.name, be.name, err)
			}
			stuck := c.through < 2
			failed = failed || stuck
			what := fmt.Sprintf("%s: both through in %.2f s", be.name, c.took.Seconds())
			if stuck {
				what = fmt.Sprintf("%s: %d of 2 through after %.2f s (%s)", be.name, c.through, c.took.Seconds(), strings.Join(c.refusals, "; "))
			}
			said = append(said, what)
			chart.Bars = append(chart.Bars, Bar{Label: be.name + ", " + strings.SplitN(f.name, " (", 2)[0], Value: c.took.Seconds(), Failed: stuck})
		}
		named := strings.NewReplacer(a, "A", b, "B")
		out[i] = Outcome{Form: f.name, Happened: named.Replace(strings.Join(said, "; ")), Failed: failed}
	}
	return Result{Failing: out[0], Fixed: out[1], Chart: chart}, nil
}

// crossOnce runs the two checkouts on one backend. The first takes its first lock; then the
// second starts, and the first asks for its second lock once the second holds its own first (in
// request order at once: the deadlock every time, not by chance) or, when the second waits for
// the first's lock (SKU order), after a tenth of the wait. Each waits at most wait for each lock.
func crossOnce(ctx context.Context, be crossedBackend, first, second []string, wait time.Duration) (crossing, error) {
	var (
		c    crossing
		mu   sync.Mutex
		wg   sync.WaitGroup
		errs []error
	)
	firstHeld, secondHeld := make(chan struct{}), make(chan struct{})
	run := func(order []string, held chan<- struct{}, before func()) {
		defer wg.Done()
		h, err := be.holder(ctx)
		if err != nil {
			mu.Lock()
			errs = append(errs, err)
			mu.Unlock()
			close(held)
			return
		}
		defer h.unlockAll(context.WithoutCancel(ctx))
		for j, name := range order {
			if j == 1 {
				before()
			}
			lockCtx, cancel := context.WithTimeout(ctx, wait)
			err := h.lock(lockCtx, name)
			cancel()
			if j == 0 {
				close(held)
			}
			if err != nil {
				mu.Lock()
				c.refusals = append(c.refusals, fmt.Sprintf("the holder of %s asking for %s: %s", order[0], name, refusal(err)))
				mu.Unlock()
				return
			}
		}
		mu.Lock()
		c.through++
		mu.Unlock()
	}
	start := time.Now()
	wg.Add(2)
	go run(first, firstHeld, func() {
		select {
		case <-secondHeld:
		case <-time.After(wait / 10):
		}
	})
	<-firstHeld
	go run(second, secondHeld, func() {})
	wg.Wait()
	c.took = time.Since(start)
	return c, errors.Join(errs...)
}

// refusal says in a few words why a lock was not had.
func refusal(err error) string {
	switch {
	case errors.Is(err, context.DeadlineExceeded) || errors.Is(err, redsync.ErrFailed):
		return "its wait ran out"
	case strings.Contains(err.Error(), "1213"):
		return "the database found the deadlock and rolled it back (1213)"
	}
	return err.Error()
}

// redsyncPair holds redsync mutexes, one per lock name.
type redsyncPair struct {
	rs   *redsync.Redsync
	held []*redsync.Mutex
}

func (p *redsyncPair) lock(ctx context.Context, name string) error {
	m := p.rs.NewMutex("seckill:lab:"+name, redsync.WithExpiry(10*time.Second), redsync.WithTries(1<<20),
		redsync.WithRetryDelay(5*time.Millisecond))
	if err := m.LockContext(ctx); err != nil {
		return err
	}
	p.held = append(p.held, m)
	return nil
}

func (p *redsyncPair) unlockAll(ctx context.Context) {
	for _, m := range p.held {
		_, _ = m.UnlockContext(ctx)
	}
}

// etcdPair holds etcd mutexes on a session of its own.
type etcdPair struct {
	session *concurrency.Session
	held    []*concurrency.Mutex
}

func (p *etcdPair) lock(ctx context.Context, name string) error {
	m := concurrency.NewMutex(p.session, "/seckill/lab/"+name)
	if err := m.Lock(ctx); err != nil {
		return err
	}
	p.held = append(p.held, m)
	return nil
}

func (p *etcdPair) unlockAll(ctx context.Context) {
	for _, m := range p.held {
		_ = m.Unlock(ctx)
	}
	_ = p.session.Close()
}

// rowPair holds product rows locked in one transaction (SELECT ... FOR UPDATE), waiting in the
// row's lock queue as pessimistic's waiting form does.
type rowPair struct{ tx *sql.Tx }

func (p *rowPair) lock(ctx context.Context, sku string) error {
	var stockLeft int64
	return p.tx.QueryRowContext(ctx, "SELECT stock FROM products WHERE sku = ? FOR UPDATE", sku).Scan(&stockLeft)
}

func (p *rowPair) unlockAll(context.Context) { _ = p.tx.Rollback() }
