package lockstrategy

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/flashsale/seckill/internal/lock/etcdlock"
	"github.com/flashsale/seckill/internal/stock"
)

// Etcd is the "strong consistency" lock of the classic comparison: an etcd lease kept alive by
// a session, and a mutex per SKU. A lease can still expire under a paused or partitioned holder,
// so the lock alone is not mutual exclusion; the revision at which the mutex was granted is used
// as a fencing token, and the database refuses a write whose token is older than the last one
// written (stock.Store.PlaceFenced).
//
// The token: each grant happens only after the previous holder's key was deleted (a write, so a
// new revision), and the mutex's response header carries the revision at grant time. Tokens
// therefore increase strictly in grant order — the create revision of the mutex key would do as
// well, at the cost of one more round trip.
type Etcd struct {
	name    string
	client  *clientv3.Client
	store   *stock.Store
	opts    EtcdOptions
	batch   *batcher
	metrics *LockMetrics
	log     *slog.Logger

	renewals prometheus.Counter

	ctx     context.Context // lives as long as the strategy: the sessions' keep-alives
	cancel  context.CancelFunc
	mu      sync.Mutex
	session *concurrency.Session
}

// EtcdOptions tune the etcd strategy.
type EtcdOptions struct {
	TTL    time.Duration // session lease TTL, rounded up to whole seconds (etcd leases count seconds)
	Wait   time.Duration // how long a section waits for the mutex before answering busy
	Prefix string        // key prefix of the mutexes; default /seckill/locks/
	// Batch is how many queued orders of a SKU one section may place under one mutex
	// acquisition and one fenced write (group commit); 1 or less: one order per section.
	Batch int
	// Hooks.InSection runs after the lease was last checked and the product read, right before
	// the fenced write — the window no check can close.
	Hooks Hooks
	// Unguarded makes this the unguarded-etcd strategy: the same lock, and a write with no fence
	// (unguarded.go). Unsafe on purpose.
	Unguarded bool
}

// NewEtcd returns the etcd strategy. Close it to revoke its lease.
func NewEtcd(client *clientv3.Client, store *stock.Store, opts EtcdOptions, metrics *LockMetrics, log *slog.Logger,
	reg prometheus.Registerer) *Etcd {
	if opts.Prefix == "" {
		opts.Prefix = "/seckill/locks/"
	}
	ctx, cancel := context.WithCancel(context.Background())
	e := &Etcd{
		name:   "etcd",
		client: client, store: store, opts: opts, metrics: metrics, log: log, ctx: ctx, cancel: cancel,
	}
	if opts.Unguarded {
		e.name = "unguarded-etcd"
	}
	e.renewals = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "seckill_etcd_sessions_total", Help: "etcd sessions (leases) created: the first, and one after every session loss.",
		ConstLabels: prometheus.Labels{"strategy": e.name},
	})
	reg.MustRegister(e.renewals)
	e.batch = newBatcher(e.Name(), opts.Batch, opts.Wait, metrics, e.section)
	return e
}

// Name implements Strategy.
func (e *Etcd) Name() string { return e.name }

// Close ends the session, revoking its lease so that its locks are free at once.
func (e *Etcd) Close() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	var err error
	if e.session != nil {
		err = e.session.Close()
	}
	e.cancel()
	return err
}

// ttlSeconds is the lease TTL in whole seconds, at least one.
func (e *Etcd) ttlSeconds() int64 { return max(1, int64((e.opts.TTL+time.Second-1)/time.Second)) }

// currentSession returns the instance's session, making a new one when there is none or the old
// one's lease was lost (Session.Done closes when its keep-alive fails or the lease expires).
func (e *Etcd) currentSession(ctx context.Context) (*concurrency.Session, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.session != nil {
		select {
		case <-e.session.Done():
			e.log.Warn("etcd session lost; its locks are gone, starting a new one", "lease", fmt.Sprintf("%x", e.session.Lease()))
		default:
			return e.session, nil
		}
	}
	// The lease is granted here, under ctx, rather than by NewSession (which would use the
	// session's long-lived context and could hang while etcd is unreachable).
	lease, err := e.client.Grant(ctx, e.ttlSeconds())
	if err != nil {
		return nil, fmt.Errorf("etcd lease: %w: %w", stock.ErrUnavailable, err)
	}
	s, err := concurrency.NewSession(e.client, concurrency.WithLease(lease.ID), concurrency.WithContext(e.ctx))
	if err != nil {
		return nil, fmt.Errorf("etcd session: %w: %w", stock.ErrUnavailable, err)
	}
	e.session = s
	e.renewals.Inc()
	return s, nil
}

// LockKey is the prefix of sku's mutex, which the service publishes (GET .../locks): each waiter
// puts a key <prefix>/<lease id> under it, and the lowest create revision holds the lock.
func (e *Etcd) LockKey(sku string) string { return e.opts.Prefix + sku }

// PlaceOrder implements Strategy.
func (e *Etcd) PlaceOrder(ctx context.Context, req stock.OrderRequest) (stock.Order, error) {
	return e.batch.place(ctx, req)
}

// section is the critical section: one mutex acquisition, one fenced write for the orders it
// takes. Two mutexes on one session do not exclude each other (the mutex key is prefix + lease),
// so this instance's orders for a SKU must take turns in memory first: the batcher runs at most
// one section per SKU, hence at most one etcd waiter per instance and SKU.
func (e *Etcd) section(ctx context.Context, sku string, take func() []stock.OrderRequest) []stock.Placed {
	key := e.opts.Prefix + sku
	waitCtx, cancel := context.WithTimeout(ctx, e.opts.Wait)
	defer cancel()
	start := time.Now()
	session, m, err := e.lock(waitCtx, key)
	if err != nil {
		return failAll(len(take()), waitFailed(ctx, key, e.opts.Wait, err))
	}
	reqs := take()
	locked := time.Now()
	e.metrics.waited(e.Name(), locked.Sub(start))
	defer e.unlock(ctx, session, m, key, locked)

	if e.opts.Unguarded {
		return lockedWrite(ctx, e.store, reqs, e.opts.Hooks)
	}
	token := stock.Token{Fence: stock.EtcdFence, Value: m.Header().Revision}
	held := func(context.Context) bool {
		select {
		case <-session.Done():
			return false
		default:
			return true
		}
	}
	return fencedWrite(ctx, e.store, reqs, token, key, e.Name(), e.metrics, e.opts.Hooks, held, e.recover)
}

// lock takes the mutex of key on the instance's session. A lease that etcd no longer knows
// (revoked, or expired before the keep-alive noticed) fails the attempt at once; the session is
// then dropped and the attempt made once more on a new one.
func (e *Etcd) lock(ctx context.Context, key string) (*concurrency.Session, *etcdlock.Mutex, error) {
	for attempt := 0; ; attempt++ {
		session, err := e.currentSession(ctx)
		if err != nil {
			return nil, nil, err
		}
		m := etcdlock.New(session, key)
		err = m.Lock(ctx)
		if err == nil {
			return session, m, nil
		}
		if attempt > 0 || !(errors.Is(err, rpctypes.ErrLeaseNotFound) || errors.Is(err, concurrency.ErrSessionExpired)) {
			return nil, nil, err
		}
		e.dropSession(session)
	}
}

// dropSession forgets a session whose lease is gone, so that the next order makes a new one.
func (e *Etcd) dropSession(s *concurrency.Session) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.session == s {
		e.log.Warn("etcd lease gone; starting a new session", "lease", fmt.Sprintf("%x", s.Lease()))
		s.Orphan() // stop its keep-alive; revoking a lease etcd no longer has would only wait
		e.session = nil
	}
}

// recover handles a fence that is ahead of the etcd cluster itself. No holder can have been
// granted a revision the cluster has not reached, so such a fence was written under another
// cluster — replaced, or restored from an old backup — whose revisions have started again.
// Without this, every write would be fenced out forever: a silent stall. The fence is reset
// (only if it is still that value) and the caller retries once. A fence at or below the current
// revision means a newer holder really wrote: that is a genuine fence-out.
func (e *Etcd) recover(ctx context.Context, fenced *stock.FenceError) bool {
	resp, err := e.client.Get(ctx, e.opts.Prefix+fenced.SKU, clientv3.WithCountOnly())
	if err != nil || fenced.Fence <= resp.Header.Revision {
		return false
	}
	e.log.Warn("fence ahead of the etcd cluster's revision: the cluster was replaced; resetting the fence",
		"sku", fenced.SKU, "fence", fenced.Fence, "revision", resp.Header.Revision)
	return e.store.ResetFence(ctx, fenced.SKU, stock.EtcdFence, fenced.Fence) == nil
}

// unlock releases the mutex even when the request was cancelled. etcd's Unlock answers nil even
// when the lease had already expired, so a lost lock is read from the session instead.
func (e *Etcd) unlock(ctx context.Context, session *concurrency.Session, m *etcdlock.Mutex, key string, locked time.Time) {
	e.metrics.held(e.Name(), key, time.Since(locked))
	select {
	case <-session.Done():
		e.metrics.lostAt(e.Name(), key)
		return
	default:
	}
	unlockCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
	defer cancel()
	if err := m.Unlock(unlockCtx); err != nil {
		e.log.Warn("etcd unlock failed; the lock ends with the lease", "key", key, "err", err)
	}
}
