package etcdlock

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/flashsale/seckill/internal/lock"
	"github.com/flashsale/seckill/internal/stock"
)

// Locker is the "strong consistency" lock of the classic comparison, the lock of the etcd
// strategy (with the fence) and of unguarded-etcd (with no guard): an etcd lease kept alive by a
// session, and a mutex per SKU (Mutex). A lease can still expire under a paused or
// partitioned holder, so the lock alone is not mutual exclusion; the revision at which the mutex
// was granted is its fencing token, and the database refuses a write whose token is older than
// the last one written (stock.Store.PlaceFenced).
//
// The token: each grant happens only after the previous holder's key was deleted (a write, so a
// new revision), and the mutex's response header carries the revision at grant time. Tokens
// therefore increase strictly in grant order — the create revision of the mutex key would do as
// well, at the cost of one more round trip.
//
// A Locker is one session, so give each strategy its own: two mutexes on one session do not
// exclude each other (the mutex key is prefix + lease). Within a strategy the batcher runs at
// most one section per SKU and instance, hence at most one etcd waiter per instance and SKU.
type Locker struct {
	client *clientv3.Client
	opts   Options
	obs    lock.Observer
	log    *slog.Logger

	ctx     context.Context // lives as long as the lock: the sessions' keep-alives
	cancel  context.CancelFunc
	mu      sync.Mutex
	session *concurrency.Session
}

// Options tune the etcd lock.
type Options struct {
	TTL    time.Duration // session lease TTL, rounded up to whole seconds (etcd leases count seconds)
	Prefix string        // key prefix of the mutexes; default /seckill/locks/
}

// NewLocker returns an etcd lock on client, with a session of its own, its metrics on obs.
// Close it to revoke its lease.
func NewLocker(client *clientv3.Client, opts Options, obs lock.Observer, log *slog.Logger) *Locker {
	if opts.Prefix == "" {
		opts.Prefix = "/seckill/locks/"
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Locker{client: client, opts: opts, obs: obs, log: log, ctx: ctx, cancel: cancel}
}

// Backend implements lock.Locker.
func (*Locker) Backend() string { return "etcd" }

// Key implements lock.Locker: the prefix under which each waiter's mutex key is its lease.
func (e *Locker) Key(sku string) string { return e.opts.Prefix + sku }

// Close implements lock.Locker: it ends the session, revoking its lease so that its locks are free at once.
func (e *Locker) Close() error {
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
func (e *Locker) ttlSeconds() int64 { return max(1, int64((e.opts.TTL+time.Second-1)/time.Second)) }

// currentSession returns the lock's session, making a new one when there is none or the old
// one's lease was lost (Session.Done closes when its keep-alive fails or the lease expires).
func (e *Locker) currentSession(ctx context.Context) (*concurrency.Session, error) {
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
	e.obs.SessionStarted()
	return s, nil
}

// Lock implements lock.Locker: the mutex of key on the lock's session. A lease that etcd no longer
// knows (revoked, or expired before the keep-alive noticed) fails the attempt at once; the
// session is then dropped and the attempt made once more on a new one.
func (e *Locker) Lock(ctx context.Context, key string) (lock.Lock, error) {
	for attempt := 0; ; attempt++ {
		session, err := e.currentSession(ctx)
		if err != nil {
			return nil, err
		}
		m := New(session, key)
		err = m.Lock(ctx)
		if err == nil {
			return &hold{locker: e, session: session, m: m, key: key}, nil
		}
		if attempt > 0 || !(errors.Is(err, rpctypes.ErrLeaseNotFound) || errors.Is(err, concurrency.ErrSessionExpired)) {
			return nil, err
		}
		e.dropSession(session)
	}
}

// dropSession forgets a session whose lease is gone, so that the next order makes a new one.
func (e *Locker) dropSession(s *concurrency.Session) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.session == s {
		e.log.Warn("etcd lease gone; starting a new session", "lease", fmt.Sprintf("%x", s.Lease()))
		s.Orphan() // stop its keep-alive; revoking a lease etcd no longer has would only wait
		e.session = nil
	}
}

// hold is one acquisition of the etcd mutex.
type hold struct {
	locker  *Locker
	session *concurrency.Session
	m       *Mutex
	key     string
}

// Token implements lock.Lock: the revision at which the mutex was granted, while the session
// that holds the mutex is alive.
func (h *hold) Token(context.Context) (stock.Token, error) {
	if h.lost() {
		return stock.Token{}, fmt.Errorf("etcd session %x: %w", h.session.Lease(), lock.ErrLost)
	}
	return stock.Token{Fence: stock.EtcdFence, Value: h.m.Header().Revision}, nil
}

// Lost implements lock.Lock: nil, since the fence, not the section's end, stops a holder whose
// session ends (see lock.Lock).
func (*hold) Lost() <-chan struct{} { return nil }

// Known implements lock.Lock: etcd hands nothing over.
func (*hold) Known() *stock.Product { return nil }

// lost reports whether the session that holds the mutex has ended.
func (h *hold) lost() bool {
	select {
	case <-h.session.Done():
		return true
	default:
		return false
	}
}

// Ahead implements lock.Lock. No holder can have been granted a revision the cluster has not
// reached, so a fence above its current revision was written under another cluster — replaced,
// or restored from an old backup — whose revisions have started again. A fence at or below it
// means a newer holder really wrote: a genuine fence-out.
func (h *hold) Ahead(ctx context.Context, fenced *stock.FenceError) bool {
	resp, err := h.locker.client.Get(ctx, h.key, clientv3.WithCountOnly())
	if err != nil || fenced.Fence <= resp.Header.Revision {
		return false
	}
	h.locker.log.Warn("fence ahead of the etcd cluster's revision: the cluster was replaced; resetting the fence",
		"sku", fenced.SKU, "fence", fenced.Fence, "revision", resp.Header.Revision)
	return true
}

// Unlock implements lock.Lock. etcd's Unlock answers nil even when the lease had already expired,
// so a lost lock is read from the session instead.
func (h *hold) Unlock(ctx context.Context, _ *stock.Product) bool {
	if h.lost() {
		return false
	}
	if err := h.m.Unlock(ctx); err != nil {
		h.locker.log.Warn("etcd unlock failed; the lock ends with the lease", "key", h.key, "err", err)
	}
	return true
}
