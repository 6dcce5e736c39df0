package lockstrategy

import (
	"context"
	"errors"

	"github.com/flashsale/seckill/internal/admission"
	"github.com/flashsale/seckill/internal/freezepoint"
	"github.com/flashsale/seckill/internal/lock"
	"github.com/flashsale/seckill/internal/stock"
)

// Hybrid is the pattern this project teaches, and its default: Redis admission rejects the
// losers at memory speed, a redsync lock per SKU (redislock.Locker) lets one batch of admitted orders at
// a time into the critical section (so the hot row sees no contention), and the database's
// version check (Version) is the final guarantee for when the lock fails — expiry under a pause,
// a failover, a flush.
//
// Order of events for one order:
//  1. Admission (one Lua script): sold out / already purchased are answered here.
//  2. The order queues in the instance's batcher; the next section of its SKU takes the redsync
//     mutex (expiry, bounded wait); its watchdog extends it while it is held, and the section
//     is cancelled if an extension fails.
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
	admission *admission.Ledger
	run       *runner
	batch     *batcher
}

// NewHybrid returns the hybrid strategy: admission through ledger, locks by locker (the Redis
// lock), written under the version guard.
func NewHybrid(store *stock.Store, ledger *admission.Ledger, locker lock.Locker, opts Options, metrics *LockMetrics) *Hybrid {
	h := &Hybrid{admission: ledger, run: newRunner("hybrid", store, locker, Version, opts, metrics)}
	h.run.fallback = h.fallback
	h.run.settle = h.settle
	h.batch = h.run.batcher(h.Section)
	return h
}

// Name implements Strategy.
func (*Hybrid) Name() string { return "hybrid" }

// LockKey names sku's lock in Redis.
func (h *Hybrid) LockKey(sku string) string { return h.run.locker.Key(sku) }

// LockBackend names its lock service: redis.
func (h *Hybrid) LockBackend() string { return h.run.locker.Backend() }

// Place implements Strategy: admission of every line or none (one script on one Redis, line by
// line on a Cluster); then, with the requests for the same products that queued meanwhile, the
// locks in SKU order and one transaction writing every line under every product's version
// guard; then every line's reservation settled, or given back.
func (h *Hybrid) Place(ctx context.Context, req stock.CheckoutRequest) (stock.Checkout, error) {
	lines := req.Admitted()
	res, err := h.admission.Admit(ctx, lines, 0)
	if errors.Is(err, admission.ErrRedisDown) {
		h.admission.FellBack("admission")
		return h.batch.place(ctx, req)
	}
	if err != nil {
		return stock.Checkout{}, err
	}
	for i := range lines {
		lines[i].Reservation = res[i]
	}
	req.Lines = lines
	freezepoint.At(freezepoint.Admitted)
	co, err := h.batch.place(ctx, req)
	if err != nil {
		h.admission.GiveBack(ctx, lines, err)
		return co, err
	}
	for _, r := range res {
		h.admission.Done(r)
	}
	return co, nil
}

// Section places the batch take returns — hybrid's requests, or a queued writer's (package
// queued) — in the runner's section, unless Redis is known to be down: then no lock can be had,
// and the database decides on its own. Reservations of admitted requests in such a batch are
// settled by the sweeper.
func (h *Hybrid) Section(ctx context.Context, skus []string, take func() []stock.CheckoutRequest) []stock.Placed {
	if !h.admission.Available() {
		return h.withoutLock(ctx, take())
	}
	return h.run.section(ctx, skus, take)
}

// settle ends the reservations of the lines the section wrote: their units stay sold.
func (h *Hybrid) settle(ctx context.Context, reqs []stock.CheckoutRequest, placed []stock.Placed) {
	var written []stock.OrderRequest
	for i, req := range reqs {
		if placed[i].Err == nil {
			written = append(written, req.Admitted()...)
		}
	}
	h.admission.Settle(ctx, written)
}

// fallback places requests whose locks could not be had because Redis failed between admission
// and lock: they are admitted, and the database can still decide them safely on its own.
func (h *Hybrid) fallback(ctx context.Context, reqs []stock.CheckoutRequest, err error) []stock.Placed {
	h.admission.Down("lock", err)
	return h.withoutLock(ctx, reqs)
}

// withoutLock places requests that no lock can be had for: the version checks decide them alone.
func (h *Hybrid) withoutLock(ctx context.Context, reqs []stock.CheckoutRequest) []stock.Placed {
	h.admission.FellBack("lock")
	placed, _ := h.run.write(ctx, nil, reqs)
	return placed
}

// Close stops listening for lock releases.
func (h *Hybrid) Close() error { return h.run.locker.Close() }
