package lockstrategy

import (
	"context"
	crand "crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"time"

	"github.com/go-redsync/redsync/v4"
	"github.com/redis/go-redis/v9"

	"github.com/flashsale/seckill/internal/admission"
	"github.com/flashsale/seckill/internal/stock"
)

// Hybrid is the pattern this project teaches, and its default: Redis admission rejects the
// losers at memory speed, a redsync lock per SKU lets one batch of admitted orders at a time into
// the critical section (so the hot row sees no contention), and the database's version check is
// the final guarantee for when the lock fails — expiry under a pause, a failover, a flush.
//
// Order of events for one order:
//  1. Admission (one Lua script): sold out / already purchased are answered here.
//  2. The order queues in the instance's batcher; the next section of its SKU takes the redsync
//     mutex (expiry, bounded wait), and a watchdog extends it while the section runs and
//     cancels the section if an extension fails.
//  3. Read the product, then UPDATE ... WHERE version = ? AND stock >= total; insert the orders.
//     Zero rows means another writer got there: re-read and retry, never write blind.
//  4. The reservation of each written order is settled; a failed one is given back. One whose
//     outcome is unknown here is resolved by this instance's sweeper after a grace, and one
//     whose instance died or froze by the others' once its heartbeat has lapsed, as the
//     database says (package admission).
//
// With Redis unreachable, orders skip 1 and the lock and take 3 alone (still one section per SKU
// and instance): slower under contention, still correct.
type Hybrid struct {
	name      string
	unguarded bool // unguarded-redis (UnguardedTwin)
	twin      bool // shares the releases of the Hybrid it was made from
	store     *stock.Store
	admission *admission.Ledger
	rs        *redsync.Redsync
	opts      HybridOptions
	batch     *batcher
	metrics   *LockMetrics
	releases  *releases
	turns     *turns
}

// HybridOptions tune the hybrid strategy.
type HybridOptions struct {
	TTL      time.Duration // redsync lock expiry: short, since the watchdog extends it while held
	Wait     time.Duration // how long a section waits for the lock before answering busy
	Extend   time.Duration // watchdog period; default TTL/3
	Attempts int           // version-guarded writes tried before answering busy
	// Poll is how often a waiter tries a taken lock when no release message wakes it first;
	// default: every 1 to 5 ms, jittered.
	Poll time.Duration
	// Batch is how many queued orders of a SKU one section may place (group commit); 1 or less:
	// one order per section.
	Batch int
	Hooks Hooks
}

// lockKey is the redsync lock of sku, in the same Redis Cluster slot as its admission keys.
func lockKey(sku string) string { return "seckill:{" + sku + "}:lock" }

// LockKey is the redsync key of sku's lock, which the service publishes (GET .../locks).
func (h *Hybrid) LockKey(sku string) string { return lockKey(sku) }

// NewHybrid returns the hybrid strategy: admission through ledger, release messages on rdb (the
// Redis that holds admission), and locks by rs, over one Redis (a single pool) or several
// independent ones (Redlock: a quorum of them).
func NewHybrid(store *stock.Store, ledger *admission.Ledger, rdb redis.UniversalClient, rs *redsync.Redsync, opts HybridOptions,
	metrics *LockMetrics) *Hybrid {
	if opts.Extend <= 0 {
		opts.Extend = opts.TTL / 3
	}
	h := &Hybrid{name: "hybrid", store: store, admission: ledger, rs: rs, opts: opts, metrics: metrics,
		releases: newReleases(rdb), turns: newTurns()}
	h.batch = newBatcher(h.Name(), opts.Batch, opts.Wait, metrics, h.section)
	return h
}

// UnguardedTwin returns the unguarded-redis strategy, the lock of the oversell post-mortem
// (unguarded.go), on h's own lock: the same redsync pools, release messages and turn-taking —
// one subscription per instance, not one per strategy — with no admission and a write with no
// version check; with Redis unreachable it answers unavailable, having no safe way without the
// lock. Unsafe on purpose. Closing h closes what the two share; the twin's Close does nothing.
func (h *Hybrid) UnguardedTwin() *Hybrid {
	t := &Hybrid{name: "unguarded-redis", unguarded: true, twin: true, store: h.store, admission: h.admission, rs: h.rs,
		opts: h.opts, metrics: h.metrics, releases: h.releases, turns: h.turns}
	t.batch = newBatcher(t.Name(), t.opts.Batch, t.opts.Wait, t.metrics, t.section)
	return t
}

// Name implements Strategy.
func (h *Hybrid) Name() string { return h.name }

// Close stops listening for lock releases.
func (h *Hybrid) Close() error {
	if h.twin {
		return nil
	}
	return h.releases.Close()
}

// PlaceOrder implements Strategy.
func (h *Hybrid) PlaceOrder(ctx context.Context, req stock.OrderRequest) (stock.Order, error) {
	if h.unguarded {
		return h.batch.place(ctx, req)
	}
	res, err := h.admission.Admit(ctx, req)
	if errors.Is(err, admission.ErrRedisDown) {
		h.admission.FellBack("admission")
		return h.batch.place(ctx, req)
	}
	if err != nil {
		return stock.Order{}, err
	}
	req.Reservation = res
	order, err := h.batch.place(ctx, req)
	if err != nil {
		h.admission.GiveBack(ctx, req, err)
	} else {
		h.admission.Done(res)
	}
	return order, err
}

// section is the critical section: one lock acquisition, one version-guarded write for all the
// orders it takes, each answered on its own.
func (h *Hybrid) section(ctx context.Context, sku string, take func() []stock.OrderRequest) []stock.Placed {
	if !h.admission.Available() {
		// Redis is known to be down: no lock can be had, and the database decides on its own.
		// Reservations of admitted orders in the batch are settled by the sweeper.
		return h.withoutLock(ctx, take())
	}
	key := lockKey(sku)
	waitCtx, cancel := context.WithTimeout(ctx, h.opts.Wait)
	defer cancel()
	start := time.Now()
	// A woken waiter needs a fraction of a millisecond to hear the release message and try.
	h.turns.wait(ctx, key, 500*time.Microsecond+rand.N(500*time.Microsecond))
	m, err := h.lock(ctx, waitCtx, key)
	if errors.Is(err, errLockUnreachable) {
		// Redis failed between admission and lock: the orders are admitted, and the database can
		// still decide them safely on its own.
		h.admission.Down("lock", err)
		return h.withoutLock(ctx, take())
	}
	if err != nil {
		return failAll(len(take()), waitFailed(ctx, key, h.opts.Wait, err))
	}
	locked := time.Now()
	h.metrics.waited(h.Name(), locked.Sub(start))
	section, stop := h.metrics.watchdog(ctx, h.Name(), key, h.opts.Extend, func(ctx context.Context) error {
		if ok, err := m.ExtendContext(ctx); !ok {
			return fmt.Errorf("redsync extend: %v", err)
		}
		return nil
	})
	reqs := take()
	var (
		placed []stock.Placed
		left   *stock.Product
	)
	if h.unguarded {
		placed = lockedWrite(section, h.store, reqs, h.opts.Hooks)
	} else {
		placed, left = placeVersioned(section, h.store, reqs, h.opts.Attempts, h.metrics, h.Name(), h.opts.Hooks, h.releases.product(key))
	}
	stop()
	h.unlock(ctx, m, key, locked, left)
	h.turns.done(key)
	// Outside the lock: the written orders' reservations end, their units stay sold.
	h.admission.Settle(ctx, sku, reqs, placed)
	abandoned(section, key, placed)
	return placed
}

// withoutLock places orders that no lock can be had for: the version check decides them on its
// own. The unguarded form has no check to fall back on and answers unavailable.
func (h *Hybrid) withoutLock(ctx context.Context, reqs []stock.OrderRequest) []stock.Placed {
	if h.unguarded {
		return failAll(len(reqs), fmt.Errorf("redis lock unreachable: %w", stock.ErrUnavailable))
	}
	h.admission.FellBack("lock")
	placed, _ := placeVersioned(ctx, h.store, reqs, h.opts.Attempts, h.metrics, h.Name(), h.opts.Hooks, nil)
	return placed
}

// errLockUnreachable means a lock attempt found no holder, only Redis errors: no quorum of
// nodes can be reached.
var errLockUnreachable = errors.New("no quorum of lock nodes reachable")

// lock takes the redsync mutex of key, trying until waitCtx ends. It loops itself (one redsync
// try per call) so that each failure can be told apart: held by someone (wait and retry) or
// unreachable (give up at once: the caller falls back). A Mutex is made per acquisition:
// redsync's Mutex holds the lock's random value and is not safe to share between goroutines.
func (h *Hybrid) lock(ctx, waitCtx context.Context, key string) (*redsync.Mutex, error) {
	var value string // the value of the latest try, to clean up after a try cut off mid-flight
	m := h.rs.NewMutex(key,
		redsync.WithExpiry(h.opts.TTL),
		redsync.WithTries(1),
		redsync.WithGenValueFunc(func() (string, error) { value = lockValue(); return value, nil }),
	)
	for {
		released := h.releases.next(key)
		err := m.LockContext(waitCtx)
		if err == nil {
			return m, nil
		}
		if unreachable(err) {
			return nil, fmt.Errorf("lock %s: %w: %w", key, errLockUnreachable, err)
		}
		select {
		case <-waitCtx.Done():
			// The last try may have been cut off by the deadline after a node had set our
			// value, and redsync's own release then ran with the expired context. Left there,
			// the value would block the key for a whole TTL — with one Redlock node down, for
			// everyone. Release it with a fresh context: the script deletes only our value.
			cleanupCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
			_, _ = h.rs.NewMutex(key, redsync.WithValue(value)).UnlockContext(cleanupCtx)
			cancel()
			return nil, err
		case <-released:
			h.metrics.wokenByRelease(h.Name())
		case <-time.After(h.poll()):
		}
	}
}

func (h *Hybrid) poll() time.Duration {
	if h.opts.Poll > 0 {
		return h.opts.Poll
	}
	return time.Millisecond + rand.N(4*time.Millisecond)
}

// unreachable reports whether a failed try met only connection failures: no node said the lock
// was taken, and none merely answered too slowly. A timeout is not proof that Redis is down —
// under load the per-try timeout (a twentieth of the TTL) is easy to miss — and falling back on
// it would let an order past a lock that someone holds.
func unreachable(err error) bool {
	var (
		taken     *redsync.ErrTaken
		nodeTaken *redsync.ErrNodeTaken
	)
	if errors.As(err, &taken) || errors.As(err, &nodeTaken) {
		return false
	}
	var failures []error
	collect(err, &failures)
	for _, e := range failures {
		var netErr net.Error
		if errors.Is(e, context.DeadlineExceeded) || errors.Is(e, context.Canceled) || (errors.As(e, &netErr) && netErr.Timeout()) {
			return false
		}
	}
	return len(failures) > 0
}

// collect gathers the per-node Redis errors of a (possibly joined) redsync error.
func collect(err error, out *[]error) {
	var redisErr *redsync.RedisError
	if joined, ok := err.(interface{ Unwrap() []error }); ok {
		for _, e := range joined.Unwrap() {
			collect(e, out)
		}
	} else if errors.As(err, &redisErr) {
		*out = append(*out, redisErr.Err)
	}
}

// lockValue is a random lock value: only the holder knows it, so only the holder can release.
func lockValue() string {
	b := make([]byte, 16)
	_, _ = crand.Read(b) // crypto/rand.Read never returns an error on supported platforms
	return base64.StdEncoding.EncodeToString(b)
}

// unlock releases the mutex even when the request was cancelled, and hands left — the product as
// the section left it, nil when it cannot say — to the next holder with the release message. A
// lock that had expired or been taken over is not released (the version guard kept the write
// safe, but it is worth a warning), and its holder hands nothing over.
func (h *Hybrid) unlock(ctx context.Context, m *redsync.Mutex, key string, locked time.Time, left *stock.Product) {
	h.metrics.held(h.Name(), key, time.Since(locked))
	unlockCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
	defer cancel()
	if ok, _ := m.UnlockContext(unlockCtx); !ok {
		h.metrics.lostAt(h.Name(), key)
		return
	}
	h.releases.released(unlockCtx, key, left)
}
