package lockstrategy

import (
	"context"
	"errors"

	"github.com/flashsale/seckill/internal/admission"
	"github.com/flashsale/seckill/internal/freezepoint"
	"github.com/flashsale/seckill/internal/lock"
	"github.com/flashsale/seckill/internal/stock"
)

// Hybrid is the pattern this project teaches, and its default. Redis admission (one Lua script)
// answers sold out and already purchased at memory speed. A redsync lock per SKU, extended by a
// watchdog, lets one batch at a time into the section, so the hot row sees no contention; a
// failed extension cancels the section. The version check (Version) holds when the lock fails:
// expiry under a pause, a failover, a flush. A written order's reservation is settled, a failed
// one's given back; one in doubt is left to the sweepers, who ask the database. Without Redis,
// orders skip admission and the lock: slower, still correct. Its name, lock and Close are its
// Locked's, embedded unexported: a caller outside cannot reach the Locked's Place, which would
// skip admission.
type Hybrid struct {
	*locked
	admission *admission.Ledger
}

// locked names Hybrid's embedded Locked so that the field is unexported.
type locked = Locked

// NewHybrid returns the hybrid strategy: admission through ledger, locks by locker (the Redis
// lock), written under the version guard.
func NewHybrid(store *stock.Store, ledger *admission.Ledger, locker lock.Locker, opts Options, metrics *LockMetrics) *Hybrid {
	h := &Hybrid{locked: &Locked{batched{run: newRunner("hybrid", store, locker, Version, opts, metrics)}}, admission: ledger}
	h.run.fallback = h.fallback
	h.run.settle = ledger.Settle
	h.batch = newBatcher(h.run, h.Section)
	return h
}

// Place implements Strategy: admission of every line or none; then the batch's section; then
// every line's reservation settled, or given back.
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

// Section places the batch take returns (hybrid's, or a queued writer's) in the runner's section.
// With Redis known down, no lock can be had: the database decides alone, the sweeper settles.
func (h *Hybrid) Section(ctx context.Context, skus []string, take func() []stock.CheckoutRequest) []stock.Placed {
	if !h.admission.Available() {
		return h.withoutLock(ctx, take())
	}
	return h.run.section(ctx, skus, take)
}

// fallback places requests whose locks failed because Redis did: the database decides alone.
func (h *Hybrid) fallback(ctx context.Context, reqs []stock.CheckoutRequest, err error) []stock.Placed {
	h.admission.Down("lock", err)
	return h.withoutLock(ctx, reqs)
}

// withoutLock places requests without a lock: the version checks decide them.
func (h *Hybrid) withoutLock(ctx context.Context, reqs []stock.CheckoutRequest) []stock.Placed {
	h.admission.FellBack("lock")
	placed, _ := h.run.write(ctx, nil, reqs)
	return placed
}
