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
	checkouts *checkoutBatcher
}

// NewHybrid returns the hybrid strategy: admission through ledger, locks by locker (the Redis
// lock), written under the version guard.
func NewHybrid(store *stock.Store, ledger *admission.Ledger, locker lock.Locker, opts Options, metrics *LockMetrics) *Hybrid {
	h := &Hybrid{admission: ledger, run: newRunner("hybrid", store, locker, Version, opts, metrics)}
	h.run.fallback = h.fallback
	h.run.settle = h.settle
	h.batch = h.run.batcher(h.Section)
	h.checkouts = h.run.checkoutBatcher(h.CheckoutSection)
	return h
}

// Name implements Strategy.
func (*Hybrid) Name() string { return "hybrid" }

// LockKey names sku's lock in Redis.
func (h *Hybrid) LockKey(sku string) string { return h.run.locker.Key(sku) }

// LockBackend names its lock service: redis.
func (h *Hybrid) LockBackend() string { return h.run.locker.Backend() }

// PlaceOrder implements Strategy.
func (h *Hybrid) PlaceOrder(ctx context.Context, req stock.OrderRequest) (stock.Order, error) {
	res, err := h.admission.Admit(ctx, []stock.OrderRequest{req}, 0)
	if errors.Is(err, admission.ErrRedisDown) {
		h.admission.FellBack("admission")
		return h.batch.place(ctx, req)
	}
	if err != nil {
		var refused *stock.CheckoutError
		if errors.As(err, &refused) {
			err = refused.Err // an order's answer names no lines, which the handler would add as skus
		}
		return stock.Order{}, err
	}
	req.Reservation = res[0]
	freezepoint.At(freezepoint.Admitted)
	order, err := h.batch.place(ctx, req)
	if err != nil {
		h.admission.GiveBack(ctx, []stock.OrderRequest{req}, err)
	} else {
		h.admission.Done(res[0])
	}
	return order, err
}

// settle ends the reservations of the orders a section wrote.
func (h *Hybrid) settle(ctx context.Context, _ string, reqs []stock.OrderRequest, placed []stock.Placed) {
	var written []stock.OrderRequest
	for i, p := range placed {
		if p.Err == nil {
			written = append(written, reqs[i])
		}
	}
	h.admission.Settle(ctx, written)
}

// Section places the batch take returns — hybrid's orders, or a queued writer's (package
// queued) — in the runner's section, unless Redis is known to be down: then no lock can be had,
// and the database decides on its own. Reservations of admitted orders in such a batch are
// settled by the sweeper.
func (h *Hybrid) Section(ctx context.Context, sku string, take func() []stock.OrderRequest) []stock.Placed {
	if !h.admission.Available() {
		return h.withoutLock(ctx, take())
	}
	return h.run.section(ctx, sku, take)
}

// fallback places orders whose lock could not be had because Redis failed between admission and
// lock: they are admitted, and the database can still decide them safely on its own.
func (h *Hybrid) fallback(ctx context.Context, reqs []stock.OrderRequest, err error) []stock.Placed {
	h.admission.Down("lock", err)
	return h.withoutLock(ctx, reqs)
}

// withoutLock places orders that no lock can be had for: the version check decides them alone.
func (h *Hybrid) withoutLock(ctx context.Context, reqs []stock.OrderRequest) []stock.Placed {
	h.admission.FellBack("lock")
	placed, _ := h.run.write(ctx, nil, "", reqs)
	return placed
}

// Close stops listening for lock releases.
func (h *Hybrid) Close() error { return h.run.locker.Close() }

// PlaceCheckout implements Strategy: admission of every line or none
// (admission.Ledger.Admit: one script on one Redis, line by line on a Cluster); then,
// with the checkouts of the same products that queued meanwhile, the locks in SKU order and
// one transaction writing every line under every product's version guard; then every line's
// reservation settled, or given back.
func (h *Hybrid) PlaceCheckout(ctx context.Context, req stock.CheckoutRequest) (stock.Checkout, error) {
	lines := req.Admitted()
	res, err := h.admission.Admit(ctx, lines, 0)
	if errors.Is(err, admission.ErrRedisDown) {
		h.admission.FellBack("admission")
		return h.checkouts.place(ctx, req)
	}
	if err != nil {
		return stock.Checkout{}, err
	}
	for i := range lines {
		lines[i].Reservation = res[i]
	}
	req.Lines = lines
	co, err := h.checkouts.place(ctx, req)
	if err != nil {
		h.admission.GiveBack(ctx, lines, err)
		return co, err
	}
	h.admission.Settle(ctx, lines)
	for _, line := range lines {
		h.admission.Done(line.Reservation)
	}
	return co, nil
}

// CheckoutSection places the batch of checkouts of skus take returns — hybrid's, or a queued
// writer's — in the runner's section, unless Redis is known to be down or turns out unreachable
// at the lock: then the version checks decide alone, as for orders. It settles no reservation:
// its caller does, line by line.
func (h *Hybrid) CheckoutSection(ctx context.Context, skus []string, take func() []stock.CheckoutRequest) []stock.CheckoutPlaced {
	if h.admission.Available() {
		placed := h.run.checkoutSection(ctx, skus, take)
		if len(placed) == 0 || !errors.Is(placed[0].Err, lock.ErrUnreachable) {
			return placed
		}
		h.admission.Down("lock", placed[0].Err)
	}
	return h.checkoutsWithoutLock(ctx, take())
}

// checkoutsWithoutLock places checkouts no lock can be had for: the version checks decide them.
func (h *Hybrid) checkoutsWithoutLock(ctx context.Context, reqs []stock.CheckoutRequest) []stock.CheckoutPlaced {
	h.admission.FellBack("lock")
	if len(reqs) == 0 {
		return nil
	}
	return h.run.versionedCheckouts(ctx, reqs)
}
