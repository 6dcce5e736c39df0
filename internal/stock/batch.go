package stock

import (
	"context"
	"errors"
	"fmt"
	"time"

	"gorm.io/gorm"
)

// Placed is the answer to one order of a batch: its order, or why it was not placed.
type Placed struct {
	Order Order
	Err   error
}

// PlaceBatchAt is the group-commit form of PlaceOrderAt: the orders that arrived while the last
// critical section ran are placed together, in arrival order, in one transaction — one
// conditional stock update for all of them (UPDATE ... WHERE version = ? AND stock >= total),
// one insert of all their rows. Each order still gets its own answer: an order over the
// product's limit, a repeat buyer, a repeated Idempotency-Key or one that finds the stock spent
// fails alone, not the batch. The version guard covers the batch as it covers a single order:
// ErrVersionConflict (nothing written) means another writer got there first — read again and
// retry. Any other error fails the whole batch, and nothing was written.
func (s *Store) PlaceBatchAt(ctx context.Context, reqs []OrderRequest, read Product) ([]Placed, error) {
	out := make([]Placed, len(reqs))
	users := make([]string, len(reqs))
	for i, r := range reqs {
		users[i] = r.UserID
	}
	var existing []string
	if err := classify(s.db.WithContext(ctx).Model(&orderRow{}).Where("sku = ? AND user_id IN ?", read.SKU, users).
		Pluck("user_id", &existing).Error); err != nil {
		return nil, fmt.Errorf("batch buyers of %s: %w", read.SKU, err)
	}
	bought := map[string]bool{}
	for _, u := range existing {
		bought[u] = true
	}
	keys := map[string]bool{}
	left, total := read.Stock, int64(0)
	var rows []orderRow
	var at []int // out index of each row
	for i, r := range reqs {
		switch {
		case r.Quantity > read.MaxPerOrder:
			out[i].Err = &InvalidError{Msg: fmt.Sprintf("quantity %d exceeds max_per_order %d of product %s", r.Quantity, read.MaxPerOrder, read.SKU)}
		case bought[r.UserID]:
			out[i].Err = fmt.Errorf("user %s, product %s: %w", r.UserID, r.SKU, ErrAlreadyPurchased)
		case r.IdempotencyKey != "" && keys[r.IdempotencyKey]:
			out[i].Err = fmt.Errorf("key %q twice in one batch: %w", r.IdempotencyKey, ErrDuplicateRequest)
		case int64(r.Quantity) > left:
			out[i].Err = &SoldOutError{SKU: read.SKU, Left: left, Asked: r.Quantity}
		default:
			bought[r.UserID] = true
			if r.IdempotencyKey != "" {
				keys[r.IdempotencyKey] = true
			}
			left -= int64(r.Quantity)
			total += int64(r.Quantity)
			rows = append(rows, newOrderRow(r))
			at = append(at, i)
		}
	}
	if len(rows) == 0 {
		return out, nil
	}
	err := withTx(ctx, s.db, func(tx *gorm.DB) error {
		res := tx.Model(&productRow{}).Where("sku = ? AND version = ? AND stock >= ?", read.SKU, read.Version, total).
			Updates(map[string]any{
				"stock":      gorm.Expr("stock - ?", total),
				"version":    gorm.Expr("version + 1"),
				"updated_at": time.Now().UTC(),
			})
		if res.Error != nil {
			return res.Error
		}
		if res.RowsAffected != 1 {
			return fmt.Errorf("product %s at version %d: %w", read.SKU, read.Version, ErrVersionConflict)
		}
		return tx.Create(&rows).Error
	})
	if err != nil {
		var dup *errDuplicate
		if errors.As(err, &dup) {
			// A key or buyer of this batch was taken by a writer outside it between the check and
			// the insert: nothing was written; the caller places these orders one by one.
			return nil, fmt.Errorf("batch of %d on %s: %w", len(rows), read.SKU, ErrVersionConflict)
		}
		return nil, fmt.Errorf("batch of %d on %s at version %d: %w", len(rows), read.SKU, read.Version, err)
	}
	for j, i := range at {
		out[i].Order = rows[j].order()
	}
	return out, nil
}
