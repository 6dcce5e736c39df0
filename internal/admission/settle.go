package admission

import (
	"context"
	"errors"
	"time"

	"github.com/flashsale/seckill/internal/planted"
	"github.com/flashsale/seckill/internal/stock"
)

// Done ends the tracking of a reservation whose order is no longer in flight here: settled
// (by this instance's sweeper, if the settle was lost) or given back.
func (a *Ledger) Done(res stock.Reservation) {
	a.mu.Lock()
	defer a.mu.Unlock()
	delete(a.tracked, res.ID)
}

// track records a reservation of an order in flight here (zero until), or in doubt until until.
func (a *Ledger) track(id string, until time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.tracked[id] = until
}

// GiveBack returns the reservations of admitted lines whose database step certainly failed, even
// for a cancelled request; a sold-out line also caps its counter at the database's. An open
// outcome (a connection lost mid-commit) gives nothing back: the sweeper asks the database once
// any commit in flight must have landed. So it does after a give-back that missed Redis.
func (a *Ledger) GiveBack(ctx context.Context, lines []stock.OrderRequest, err error) {
	var soldOut *stock.SoldOutError
	for _, l := range lines {
		lineErr := err
		if errors.As(err, &soldOut) && soldOut.SKU != l.SKU {
			lineErr = errOtherLine
		}
		a.giveBack(ctx, l, lineErr)
	}
}

// giveBack is GiveBack of one line.
func (a *Ledger) giveBack(ctx context.Context, req stock.OrderRequest, dbErr error) {
	if planted.On(planted.LostGiveBack) {
		a.Done(req.Reservation)
		return
	}
	if !definite(dbErr) {
		a.track(req.Reservation.ID, a.opts.Clock().Add(sweepGrace))
		a.touch(req.SKU)
		return
	}
	defer a.Done(req.Reservation)
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
	defer cancel()
	args := []any{req.UserID, req.Reservation.ID}
	var soldOut *stock.SoldOutError
	if errors.As(dbErr, &soldOut) {
		args = append(args, soldOut.Left)
	}
	if err := giveBackScript.Run(ctx, a.client, withSwept(req.SKU, []string{req.Reservation.ID}), args...).Err(); err != nil {
		a.Down("give-back", err)
		a.log.Warn("admission give-back failed; the sweeper returns the units", "sku", req.SKU, "err", err)
		return
	}
	a.givebacks.Inc()
}

// definite reports whether a failed order was certainly not written: the database or the lock
// refused it, or ErrNotPlaced. Anything else (stock.ErrOutcomeUnknown even when busy, a lost
// connection, a deadline) may have come after a COMMIT the database executed.
func definite(err error) bool {
	if errors.Is(err, stock.ErrOutcomeUnknown) {
		return false
	}
	for _, e := range []error{stock.ErrSoldOut, stock.ErrAlreadyPurchased, stock.ErrDuplicateRequest, stock.ErrBusy,
		stock.ErrInvalid, stock.ErrNotFound, ErrNotPlaced} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// Settle ends the reservations of lines the database has written: their units stay sold. One the
// sweeper returned meanwhile (this instance froze) is taken again. A lost settle costs only
// time: this instance's sweeper settles it. One call per product: a script's keys share a slot.
func (a *Ledger) Settle(ctx context.Context, lines []stock.OrderRequest) {
	bySKU := map[string][]stock.OrderRequest{}
	for _, l := range lines {
		if l.Reservation.ID != "" {
			bySKU[l.SKU] = append(bySKU[l.SKU], l)
		}
	}
	for sku, reqs := range bySKU {
		a.settle(ctx, sku, reqs)
	}
}

// settle is Settle of reqs, all of sku.
func (a *Ledger) settle(ctx context.Context, sku string, reqs []stock.OrderRequest) {
	ids := make([]string, len(reqs))
	args := make([]any, 0, 3*len(reqs))
	for i, r := range reqs {
		ids[i] = r.Reservation.ID
		args = append(args, r.UserID, r.Reservation.ID, r.Quantity)
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
	defer cancel()
	ks := withSwept(sku, ids)
	if planted.On(planted.SettleWithoutTakeBack) {
		ks = KeysOf(sku).all()
		for _, id := range ids {
			ks = append(ks, sweptKey(sku, id)+":unread")
		}
	}
	out, err := settleScript.Run(ctx, a.client, ks, args...).Int64Slice()
	if err != nil {
		a.log.Debug("settle failed; the sweeper settles", "sku", sku, "err", err)
		return
	}
	if out[1] > 0 {
		a.swept.WithLabelValues("retaken").Add(float64(out[1]))
		a.log.Warn("orders written after the sweeper returned their reservations (this instance was frozen): their units taken again",
			"sku", sku, "orders", out[1])
	}
}
