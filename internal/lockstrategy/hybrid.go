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

	"github.com/flashsale/seckill/internal/stock"
)

// Hybrid is the pattern this project teaches, and its default: Redis admission rejects the
// losers at memory speed, a redsync lock per SKU lets one admitted order at a time into the
// critical section (so the hot row sees no contention), and the database's version check is the
// final guarantee for when the lock fails — expiry under a pause, a failover, a flush.
//
// Order of events for one order:
//  1. Admission (one Lua script): sold out / already purchased are answered here.
//  2. A per-instance lane, then the redsync mutex (expiry, bounded wait); a watchdog extends the
//     mutex while the section runs and cancels the section if an extension fails.
//  3. Read the product, then UPDATE ... WHERE version = ? AND stock >= ?; insert the order.
//     Zero rows means another writer got there: re-read and retry, never write blind.
//  4. If the database step failed, the admission's pre-deduction is given back.
//
// With Redis unreachable, orders skip 1 and 2 and take 3 alone (behind the per-instance lane):
// slower under contention, still correct.
type Hybrid struct {
	store     *stock.Store
	admission *Admission
	rs        *redsync.Redsync
	opts      HybridOptions
	lanes     *lanes
	batch     *batcher // nil: one order per critical section
	metrics   *LockMetrics
	releases  *releases
	turns     *turns
}

// HybridOptions tune the hybrid strategy.
type HybridOptions struct {
	TTL      time.Duration // redsync lock expiry
	Wait     time.Duration // how long an order waits for the lock before answering busy
	Extend   time.Duration // watchdog period; default TTL/3
	Attempts int           // version-guarded writes tried before answering busy
	// Poll is how often a waiter tries a taken lock when no release message wakes it first;
	// default: every 1 to 5 ms, jittered.
	Poll time.Duration
	// Batch, above 1, turns on group commit: up to Batch orders that queued for a SKU while the
	// last section ran are placed by the next one together (one lock, one update, one insert).
	Batch int
	// AfterRead, when set, runs inside the critical section between reading the product and
	// writing it. Tests use it to hold the section open, as a paused holder would (per-order
	// sections only).
	AfterRead func(context.Context, stock.OrderRequest)
}

// NewHybrid returns the hybrid strategy. rs locks over one Redis (a single pool) or several
// independent ones (Redlock: a quorum of them).
func NewHybrid(store *stock.Store, admission *Admission, rs *redsync.Redsync, opts HybridOptions, metrics *LockMetrics) *Hybrid {
	if opts.Extend <= 0 {
		opts.Extend = opts.TTL / 3
	}
	h := &Hybrid{store: store, admission: admission, rs: rs, opts: opts, lanes: newLanes(), metrics: metrics,
		releases: newReleases(admission.client), turns: newTurns()}
	if opts.Batch > 1 {
		h.batch = newBatcher(h.Name(), opts.Batch, opts.Wait, metrics, h.placeBatch)
	}
	return h
}

// Name implements Strategy.
func (*Hybrid) Name() string { return "hybrid" }

// Close stops listening for lock releases.
func (h *Hybrid) Close() error { return h.releases.Close() }

// PlaceOrder implements Strategy.
func (h *Hybrid) PlaceOrder(ctx context.Context, req stock.OrderRequest) (stock.Order, error) {
	err := h.admission.Admit(ctx, req)
	if errors.Is(err, errRedisDown) {
		h.admission.fellBack("admission")
		return h.placeUnlocked(ctx, req)
	}
	if err != nil {
		return stock.Order{}, err
	}
	place := h.placeLocked
	if h.batch != nil {
		place = h.batch.place
	}
	order, err := place(ctx, req)
	if err != nil {
		h.admission.GiveBack(ctx, req, err)
	}
	return order, err
}

// placeBatch is placeLocked for a batch: one lock acquisition, one version-guarded write for all
// the orders, each answered on its own.
func (h *Hybrid) placeBatch(ctx context.Context, sku string, take func() []stock.OrderRequest) []stock.Placed {
	key := lockKey(sku)
	waitCtx, cancel := context.WithTimeout(ctx, h.opts.Wait)
	defer cancel()
	start := time.Now()
	// A woken waiter needs a fraction of a millisecond to hear the release message and try.
	h.turns.wait(ctx, key, 500*time.Microsecond+rand.N(500*time.Microsecond))
	m, err := h.lock(ctx, waitCtx, key)
	if errors.Is(err, errLockUnreachable) {
		h.admission.down("lock", err)
		h.admission.fellBack("lock")
		return placeVersionedBatch(ctx, h.store, take(), h.opts.Attempts, h.metrics, h.Name())
	}
	if err != nil {
		return failAll(len(take()), waitFailed(ctx, key, h.opts.Wait, err))
	}
	locked := time.Now()
	h.metrics.waited(h.Name(), locked.Sub(start))
	section, stop := h.watchdog(ctx, m, key)
	placed := placeVersionedBatch(section, h.store, take(), h.opts.Attempts, h.metrics, h.Name())
	stop()
	h.unlock(ctx, m, key, locked)
	h.turns.done(key)
	if errors.Is(context.Cause(section), errLockLost) {
		for i := range placed {
			if placed[i].Err != nil && !errors.Is(placed[i].Err, stock.ErrSoldOut) {
				placed[i].Err = fmt.Errorf("lock %s lost mid-section, section abandoned: %w", key, stock.ErrBusy)
			}
		}
	}
	return placed
}

// placeLocked runs the critical section under the redsync lock.
func (h *Hybrid) placeLocked(ctx context.Context, req stock.OrderRequest) (stock.Order, error) {
	key := lockKey(req.SKU)
	waitCtx, cancel := context.WithTimeout(ctx, h.opts.Wait)
	defer cancel()
	start := time.Now()
	release, err := h.lanes.acquire(waitCtx, req.SKU)
	if err != nil {
		return stock.Order{}, waitFailed(ctx, key, h.opts.Wait, err)
	}
	defer release()

	m, err := h.lock(ctx, waitCtx, key)
	if errors.Is(err, errLockUnreachable) {
		// Redis failed between admission and lock: the order is admitted, and the database can
		// still decide it safely on its own.
		h.admission.down("lock", err)
		h.admission.fellBack("lock")
		return placeVersioned(ctx, h.store, req, h.opts.Attempts, h.metrics, h.Name(), h.opts.AfterRead)
	}
	if err != nil {
		return stock.Order{}, waitFailed(ctx, key, h.opts.Wait, err)
	}
	locked := time.Now()
	h.metrics.waited(h.Name(), locked.Sub(start))

	section, stop := h.watchdog(ctx, m, key)
	order, err := placeVersioned(section, h.store, req, h.opts.Attempts, h.metrics, h.Name(), h.opts.AfterRead)
	stop()
	h.unlock(ctx, m, key, locked)
	if err != nil && errors.Is(context.Cause(section), errLockLost) && ctx.Err() == nil {
		return stock.Order{}, fmt.Errorf("lock %s lost mid-section, section abandoned: %w", key, stock.ErrBusy)
	}
	return order, err
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

// placeUnlocked is the fallback without Redis: the version guard alone decides, behind the
// per-instance lane so that at least this instance's orders do not conflict with each other.
func (h *Hybrid) placeUnlocked(ctx context.Context, req stock.OrderRequest) (stock.Order, error) {
	waitCtx, cancel := context.WithTimeout(ctx, h.opts.Wait)
	defer cancel()
	release, err := h.lanes.acquire(waitCtx, req.SKU)
	if err != nil {
		return stock.Order{}, waitFailed(ctx, "lane "+req.SKU, h.opts.Wait, err)
	}
	defer release()
	return placeVersioned(ctx, h.store, req, h.opts.Attempts, h.metrics, h.Name(), h.opts.AfterRead)
}

// errLockLost is the cause given to a critical section whose lock could not be extended.
var errLockLost = errors.New("lock lost")

// watchdog extends the lock every opts.Extend while the section runs. redsync has no watchdog
// of its own. If an extension fails, the lock may already belong to someone else, so the section
// is cancelled: a section that has not written yet abandons its write, and one that is writing
// is stopped by the version guard if another holder has written since. stop must be called
// before the mutex is used again (it is not safe for concurrent use).
func (h *Hybrid) watchdog(ctx context.Context, m *redsync.Mutex, key string) (section context.Context, stop func()) {
	section, cancel := context.WithCancelCause(ctx)
	done, exited := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(exited)
		tick := time.NewTicker(h.opts.Extend)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
				extendCtx, cancelExtend := context.WithTimeout(context.WithoutCancel(ctx), h.opts.Extend)
				ok, err := m.ExtendContext(extendCtx)
				cancelExtend()
				if !ok {
					h.metrics.log.Warn("lock extension failed; abandoning the critical section", "key", key, "err", err)
					cancel(fmt.Errorf("%w: extend: %v", errLockLost, err))
					return
				}
				h.metrics.extended(h.Name())
			}
		}
	}()
	return section, func() {
		close(done)
		<-exited
		cancel(nil)
	}
}

// lockValue is a random lock value: only the holder knows it, so only the holder can release.
func lockValue() string {
	b := make([]byte, 16)
	_, _ = crand.Read(b) // crypto/rand.Read never returns an error on supported platforms
	return base64.StdEncoding.EncodeToString(b)
}

// unlock releases the mutex even when the request was cancelled. false means the lock had
// expired or been taken over: the version guard kept the write safe, but it is worth a warning.
func (h *Hybrid) unlock(ctx context.Context, m *redsync.Mutex, key string, locked time.Time) {
	h.metrics.held(h.Name(), key, time.Since(locked))
	unlockCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
	defer cancel()
	if ok, _ := m.UnlockContext(unlockCtx); !ok {
		h.metrics.lostAt(h.Name(), key)
		return
	}
	h.releases.released(unlockCtx, key)
}
