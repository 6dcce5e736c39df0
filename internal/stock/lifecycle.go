package stock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"

	"github.com/flashsale/seckill/internal/planted"
)

// The order as a state machine («Choosing a lock», docs/sources.md): pending -> confirmed;
// pending or confirmed -> cancelled; pending -> expired. Each transition is one transaction that
// locks the product row first, as a sale does, so the two never deadlock, then moves the order
// with one conditional UPDATE (WHERE status = ...). Ending an active order gives its units back
// in that transaction and marks it restock_pending until Redis admission has them: a unit comes
// back once, however cancels, expiries and late payments race. The database's clock decides.

// Cancel cancels the order or checkout ref names (a line cancels its whole checkout), its units
// back on sale; userID is the buyer's, empty for the admin. Cancelled answers as it is; expired
// or past its deadline (expired now), ErrOrderExpired; another user's or none, ErrNotFound.
func (s *Store) Cancel(ctx context.Context, ref Ref, userID string) (Checkout, error) {
	return s.transition(ctx, ref, userID, s.cancelStep)
}

// cancelStep is Cancel's step on one order.
func (s *Store) cancelStep(tx *gorm.DB, o *orderRow, now time.Time) error {
	switch {
	case o.Status == Cancelled:
		return nil
	case lapsed(o, now):
		if err := s.end(tx, o, Expired); err != nil {
			return err
		}
		return refused{ErrOrderExpired}
	}
	return s.end(tx, o, Cancelled)
}

// Pay confirms a pending order or checkout before its deadline. Confirmed answers as it is;
// cancelled, ErrOrderCancelled; expired or past its deadline (expired now: a late payment is
// refused, never sold twice), ErrOrderExpired; another user's or none, ErrNotFound.
func (s *Store) Pay(ctx context.Context, ref Ref, userID string) (Checkout, error) {
	if ref.Checkout {
		return s.transition(ctx, ref, userID, s.payStep)
	}
	// A payment in time moves no units: one statement, no wait behind a hot product's sales.
	db := s.db.WithContext(ctx)
	now, err := s.clock(db)
	if err != nil {
		return Checkout{}, err
	}
	// A checkout's line goes the long way: its checkout is paid as one.
	res := db.Model(&orderRow{}).Where("order_id = ? AND user_id = ? AND status = ? AND expires_at > ? AND checkout_id IS NULL", ref.ID, userID, Pending, now).
		Updates(map[string]any{"status": Confirmed, "expires_at": nil})
	if err := classify(res.Error); err != nil {
		return Checkout{}, fmt.Errorf("pay %s: %w", ref, err)
	}
	if res.RowsAffected == 1 {
		return s.Read(ctx, ref)
	}
	return s.transition(ctx, ref, userID, s.payStep)
}

// payStep is Pay's step on one order, once it holds its product's row.
func (s *Store) payStep(tx *gorm.DB, o *orderRow, now time.Time) error {
	switch {
	case o.Status == Confirmed:
		return nil
	case o.Status == Cancelled:
		return refused{ErrOrderCancelled}
	case lapsed(o, now):
		if err := s.end(tx, o, Expired); err != nil {
			return err
		}
		return refused{ErrOrderExpired}
	}
	res := tx.Model(&orderRow{}).Where("order_id = ? AND status = ?", o.OrderID, Pending).
		Updates(map[string]any{"status": Confirmed, "expires_at": nil})
	if err := changedOne(res, o.OrderID); err != nil {
		return err
	}
	o.Status, o.ExpiresAt = Confirmed, nil
	return nil
}

// lapsed reports whether the order is expired, or pending past its deadline at now.
func lapsed(o *orderRow, now time.Time) bool {
	return o.Status == Expired || (o.Status == Pending && o.ExpiresAt != nil && !now.Before(*o.ExpiresAt))
}

// refused is a step's answer that refuses the transition asked for, though what the step did
// on the way (expiring an order found past its deadline) commits.
type refused struct{ err error }

func (r refused) Error() string { return r.err.Error() }

// transition runs step on every line of the checkout ref names, or of the order's checkout,
// and answers what ref names as it then is.
func (s *Store) transition(ctx context.Context, ref Ref, userID string,
	step func(tx *gorm.DB, o *orderRow, now time.Time) error) (Checkout, error) {
	cond := "order_id = ?"
	if ref.Checkout {
		cond = "checkout_id = ?"
	}
	rows, now, err := s.transitionRows(ctx, cond, ref.ID, userID, step)
	if err != nil {
		return Checkout{}, fmt.Errorf("%s: %w", ref, err)
	}
	if ref.Checkout {
		return checkoutOf(rows, now), nil
	}
	if i := slices.IndexFunc(rows, func(r orderRow) bool { return r.OrderID == ref.ID }); i >= 0 {
		return Single(rows[i].order(now)), nil
	}
	return Checkout{}, fmt.Errorf("%s: %w", ref, ErrNotFound)
}

// transitionRows runs step on the order cond names, or on every line of its checkout (which
// moves as one), holding their products' rows in SKU order as a sale does. An error of step
// rolls everything back, except refused: that commits, and is the caller's answer.
func (s *Store) transitionRows(ctx context.Context, cond, arg, userID string,
	step func(tx *gorm.DB, o *orderRow, now time.Time) error) ([]orderRow, time.Time, error) {
	var (
		rows    []orderRow
		now     time.Time
		verdict error
	)
	err := s.withTx(ctx, s.waiting(), func(tx *gorm.DB) error {
		var head orderRow
		if err := tx.Select("order_id", "user_id", "checkout_id").Where(cond, arg).Take(&head).Error; err != nil {
			return err
		}
		if userID != "" && head.UserID != userID {
			return ErrNotFound // another user's order is not theirs to see
		}
		which, key := "order_id = ?", head.OrderID
		if head.CheckoutID != nil {
			which, key = "checkout_id = ?", *head.CheckoutID
		}
		var skus []string
		if err := tx.Model(&orderRow{}).Where(which, key).Order("sku").Pluck("sku", &skus).Error; err != nil {
			return err
		}
		for _, sku := range skus {
			if err := s.lockProduct(tx, sku); err != nil {
				return err
			}
		}
		// Under the product rows' locks the orders stay as read until the commit. A locking read
		// reads the latest committed rows, not the snapshot of the read above (repeatable read).
		if err := s.locking(tx).Where(which, key).Order("sku").Find(&rows).Error; err != nil {
			return err
		}
		var err error
		if now, err = s.clock(tx); err != nil {
			return err
		}
		for i := range rows {
			var r refused
			if err := step(tx, &rows[i], now); errors.As(err, &r) {
				verdict = r.err
			} else if err != nil {
				return err
			}
		}
		return nil
	})
	if errors.Is(err, ErrVersionConflict) {
		err = Busy(BusyConflicts, err) // the world moved under a lock: the client may retry
	}
	if err == nil {
		err = verdict
	}
	return rows, now, err
}

// end moves an active order to status (cancelled or expired) and gives its units back, in tx.
func (s *Store) end(tx *gorm.DB, o *orderRow, status Status) error {
	ended := map[string]any{"status": status, "expires_at": nil, "restock_pending": true}
	if planted.On(planted.DoubleReturn) {
		tx.Model(&orderRow{}).Where("order_id = ?", o.OrderID).Updates(ended)
	} else if !o.Status.Active() {
		return nil // ended already: its units came back then
	} else {
		res := tx.Model(&orderRow{}).Where("order_id = ? AND status = ?", o.OrderID, o.Status).Updates(ended)
		if err := changedOne(res, o.OrderID); err != nil {
			return err
		}
	}
	o.Status, o.ExpiresAt, o.RestockPending = status, nil, true
	return restock(tx, o.SKU, int64(o.Quantity))
}

// restock gives units back to sku's stock, leaving the version: a section that read before
// decided on fewer units than there are, never more, so failing it would be for nothing.
func restock(tx *gorm.DB, sku string, units int64) error {
	res := tx.Model(&productRow{}).Where("sku = ?", sku).Updates(map[string]any{
		"stock":      gorm.Expr("stock + ?", units),
		"updated_at": time.Now().UTC(),
	})
	return changedOne(res, "products/"+sku)
}

// changedOne checks that a conditional UPDATE changed exactly one row: anything else means the
// row is not what the transaction read.
func changedOne(res *gorm.DB, what string) error {
	if res.Error != nil {
		return res.Error
	}
	if res.RowsAffected != 1 {
		return fmt.Errorf("%s changed under its lock: %w", what, ErrVersionConflict)
	}
	return nil
}

// lockProduct takes sku's row lock in tx (SQLite: the transaction holds the write lock already).
func (s *Store) lockProduct(tx *gorm.DB, sku string) error {
	if s.dialect != MySQL {
		return nil
	}
	var row productRow
	return s.locking(tx).Select("sku").Where("sku = ?", sku).Take(&row).Error
}

// locking makes tx's next read lock and read the latest committed rows (FOR UPDATE) on MySQL.
// SQLite's write transaction reads them anyway.
func (s *Store) locking(tx *gorm.DB) *gorm.DB {
	if s.dialect != MySQL {
		return tx
	}
	return tx.Clauses(clause.Locking{Strength: clause.LockingStrengthUpdate})
}

// waiting is the pool whose transactions wait for a row lock boundedly: on MySQL the queue
// pool (its lock wait is Options.LockWait), on SQLite the main one (a busy timeout).
func (s *Store) waiting() *gorm.DB {
	if s.dialect == MySQL {
		return s.queue
	}
	return s.db
}

// ExpireDue expires and returns pending orders past their deadline, their units back: up to
// limit checkouts, then up to limit orders per product for a few products. Each expires once.
func (s *Store) ExpireDue(ctx context.Context, limit int) ([]Order, error) {
	db := s.db.WithContext(ctx)
	now, err := s.clock(db)
	if err != nil {
		return nil, err
	}
	expired, err := s.expireCheckouts(ctx, now, limit)
	if err != nil {
		return expired, err
	}
	var skus []string
	if err := classify(db.Model(&orderRow{}).Distinct("sku").Where("status = ? AND expires_at <= ? AND checkout_id IS NULL", Pending, now).
		Limit(20).Pluck("sku", &skus).Error); err != nil {
		return nil, fmt.Errorf("due orders: %w", err)
	}
	for _, sku := range skus {
		var due []orderRow
		err := s.withTx(ctx, s.waiting(), func(tx *gorm.DB) error {
			if err := s.lockProduct(tx, sku); err != nil {
				return err
			}
			if err := s.locking(tx).Where("sku = ? AND status = ? AND expires_at <= ? AND checkout_id IS NULL", sku, Pending, now).Limit(limit).Find(&due).Error; err != nil {
				return err
			}
			for i := range due {
				if err := s.end(tx, &due[i], Expired); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return expired, fmt.Errorf("expire orders of %s: %w", sku, err)
		}
		for _, o := range due {
			expired = append(expired, o.order(now))
		}
	}
	return expired, nil
}

// Restocks lists up to limit orders whose units came back to the database but not yet to Redis
// admission (restock_pending).
func (s *Store) Restocks(ctx context.Context, limit int) ([]Order, error) {
	var rows []orderRow
	if err := classify(s.db.WithContext(ctx).Where("restock_pending = ?", true).Limit(limit).Find(&rows).Error); err != nil {
		return nil, fmt.Errorf("pending restocks: %w", err)
	}
	out := make([]Order, len(rows))
	for i, r := range rows {
		out[i] = r.order(time.Time{})
	}
	return out, nil
}

// Restocked records that Redis admission has the units of these orders back.
func (s *Store) Restocked(ctx context.Context, orderIDs []string) error {
	if len(orderIDs) == 0 {
		return nil
	}
	err := s.db.WithContext(ctx).Model(&orderRow{}).Where("order_id IN ?", orderIDs).Update("restock_pending", false).Error
	if err := classify(err); err != nil && !errors.Is(err, ErrNotFound) {
		return fmt.Errorf("restocked: %w", err)
	}
	return nil
}
