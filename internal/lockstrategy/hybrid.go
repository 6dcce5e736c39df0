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
// losers at memory speed, a redsync lock per SKU lets one batch of admitted orders at a time into
// the section (the hot row sees no contention), and the version check (Version) is the final
// guarantee for when the lock fails: expiry under a pause, a failover, a flush.
//
// One order:
//  1. Admission (one Lua script) answers sold out and already purchased.
//  2. The order queues in the batcher; the next section of its SKU takes the redsync mutex, which
//     a watchdog extends while held; the section is cancelled if an extension fails.
//  3. Read the product, UPDATE ... WHERE version = ? AND stock >= total, insert the orders. Zero
//     rows means another writer got there: read again, never write blind.
//  4. A written order's reservation is settled, a failed one's given back; one in doubt is left
//     to the sweepers, who ask the database (package admission).
//
// With Redis unreachable, orders skip 1 and the lock and take 3 alone: slower, still correct.
// Its name, lock and Close are those of its Locked.
type Hybrid struct {
	*Locked
	admission *admission.Ledger
}

// NewHybrid returns the hybrid strategy: admission through ledger, locks by locker (the Redis
// lock), written under the version guard.
func NewHybrid(store *stock.Store, ledger *admission.Ledger, locker lock.Locker, opts Options, metrics *LockMetrics) *Hybrid {
	h := &Hybrid{Locked: &Locked{batched{run: newRunner("hybrid", store, locker, Version, opts, metrics)}}, admission: ledger}
	h.run.fallback = h.fallback
	h.run.settle = h.settle
	h.batch = newBatcher(h.run, h.Section)
	return h
}

// Place implements Strategy: admission of every line or none; then, with the requests that
// queued meanwhile, the locks in SKU order and one version-guarded transaction; then every
// line's reservation settled, or given back.
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

// Section places the batch take returns (hybrid's, or a queued writer's) in the runner's section,
// unless Redis is known to be down: then no lock can be had, the database decides alone, and
// the sweeper settles the batch's reservations.
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

// fallback places requests whose locks failed because Redis did, after their admission: the
// database can still decide them safely alone.
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
