package stock

import (
	"context"
	"errors"
	"fmt"

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
	a, err := allocate(s.db.WithContext(ctx), reqs, read)
	if err != nil || len(a.rows) == 0 {
		return a.out, err
	}
	err = withTx(ctx, s.db, func(tx *gorm.DB) error {
		res := tx.Model(&productRow{}).Where("sku = ? AND version = ? AND stock >= ?", read.SKU, read.Version, a.total).
			Updates(sale(a.total, 0))
		if res.Error != nil {
			return res.Error
		}
		if res.RowsAffected != 1 {
			return fmt.Errorf("product %s at version %d: %w", read.SKU, read.Version, ErrVersionConflict)
		}
		return tx.Create(&a.rows).Error
	})
	return a.settle(read, err)
}

// PlaceBatchFenced is the group-commit form of PlaceOrderFenced: the batch is placed in one
// transaction only if no later lock holder has written (fence <= token), and sets the fence. A
// newer fence refuses the whole batch with a *FenceError; a stock that moved under the batch
// (a writer outside the lock) answers ErrVersionConflict: read again and retry.
func (s *Store) PlaceBatchFenced(ctx context.Context, reqs []OrderRequest, fence int64) ([]Placed, error) {
	read, err := s.Product(ctx, reqs[0].SKU)
	if err != nil {
		return nil, err
	}
	a, err := allocate(s.db.WithContext(ctx), reqs, read)
	if err != nil || len(a.rows) == 0 {
		return a.out, err
	}
	err = withTx(ctx, s.db, func(tx *gorm.DB) error {
		res := tx.Model(&productRow{}).Where("sku = ? AND version = ? AND fence <= ?", read.SKU, read.Version, fence).
			Updates(sale(a.total, fence))
		if res.Error != nil {
			return res.Error
		}
		if res.RowsAffected != 1 {
			var now productRow
			if err := tx.Where("sku = ?", read.SKU).Take(&now).Error; err != nil {
				return err
			}
			if now.Fence > fence {
				return &FenceError{SKU: read.SKU, Token: fence, Fence: now.Fence}
			}
			return fmt.Errorf("product %s changed under the batch: %w", read.SKU, ErrVersionConflict)
		}
		return tx.Create(&a.rows).Error
	})
	return a.settle(read, err)
}

// PlaceBatchForUpdate is the group-commit form of PlaceOrderNowait: one transaction takes the
// product row (SELECT ... FOR UPDATE), decides every order of the batch against it, decrements
// once and inserts all the rows. Unlike one order per transaction, it waits in the row's lock
// queue, for at most Options.LockWait: NOWAIT exists so that hundreds of buyers cannot park
// connections behind one row, but batches are at most one per SKU and instance, and the queue
// hands the row to the next batch the moment the holder commits, where retried NOWAITs would
// leave it idle between tries. A wait that runs out answers ErrBusy, having written nothing.
// On SQLite the write lock is taken without waiting: the caller decides whether to try again.
//
// The orders come from take, called once the row is held, so that the orders that arrived while
// the batch waited in the queue are placed by it too; the answers are for take's orders, in
// order. take is not called when the row could not be had, and may be called again on a retry
// (it must return the same orders then).
func (s *Store) PlaceBatchForUpdate(ctx context.Context, sku string, take func() []OrderRequest) ([]Placed, error) {
	var (
		a    allocation
		read Product
	)
	err := withTx(ctx, s.queue, func(tx *gorm.DB) error {
		row, err := s.lockRow(tx, sku, "")
		if err != nil {
			return err
		}
		read = row.product()
		// Under the row lock no other writer can sell, so the buyers read here stay true until
		// the commit; the unique keys back that up.
		if a, err = allocate(tx, take(), read); err != nil || len(a.rows) == 0 {
			return err
		}
		res := tx.Model(&productRow{}).Where("sku = ? AND stock >= ?", read.SKU, a.total).Updates(sale(a.total, 0))
		if res.Error != nil {
			return res.Error
		}
		if res.RowsAffected != 1 {
			return fmt.Errorf("product %s changed under its row lock: %w", read.SKU, ErrVersionConflict)
		}
		return tx.Create(&a.rows).Error
	})
	return a.settle(read, err)
}

// allocation is a batch decided against one read of the product: the answers of the orders that
// fail alone, and the rows of those to insert.
type allocation struct {
	out   []Placed
	rows  []orderRow
	at    []int // out index of each row
	total int64
}

// allocate decides each order of a batch against read, in arrival order: over the product's
// limit, a repeat buyer (in the database or earlier in the batch), an Idempotency-Key already
// used (in the database or earlier in the batch), or not enough stock left fail alone; the rest
// take their units. One query finds the buyers and keys already stored, so that no known
// conflict reaches the insert, where it would fail the whole batch.
// db is the store's pool or the transaction the batch runs in.
func allocate(db *gorm.DB, reqs []OrderRequest, read Product) (allocation, error) {
	a := allocation{out: make([]Placed, len(reqs))}
	users := make([]string, len(reqs))
	keyList := []string{}
	for i, r := range reqs {
		users[i] = r.UserID
		if r.IdempotencyKey != "" {
			keyList = append(keyList, r.IdempotencyKey)
		}
	}
	q := db.Model(&orderRow{}).Where("sku = ? AND user_id IN ?", read.SKU, users)
	if len(keyList) > 0 {
		q = q.Or("idempotency_key IN ?", keyList)
	}
	var existing []orderRow
	if err := classify(q.Select("sku", "user_id", "idempotency_key").Find(&existing).Error); err != nil {
		return a, fmt.Errorf("batch buyers of %s: %w", read.SKU, err)
	}
	bought := map[string]bool{}
	keys := map[string]bool{}
	for _, o := range existing {
		if o.SKU == read.SKU {
			bought[o.UserID] = true
		}
		if o.IdempotencyKey != nil {
			keys[*o.IdempotencyKey] = true
		}
	}
	left := read.Stock
	for i, r := range reqs {
		switch {
		case r.Quantity > read.MaxPerOrder:
			a.out[i].Err = &InvalidError{Msg: fmt.Sprintf("quantity %d exceeds max_per_order %d of product %s", r.Quantity, read.MaxPerOrder, read.SKU)}
		case bought[r.UserID]:
			a.out[i].Err = fmt.Errorf("user %s, product %s: %w", r.UserID, r.SKU, ErrAlreadyPurchased)
		case r.IdempotencyKey != "" && keys[r.IdempotencyKey]:
			a.out[i].Err = fmt.Errorf("key %q already used: %w", r.IdempotencyKey, ErrDuplicateRequest)
		case int64(r.Quantity) > left:
			a.out[i].Err = &SoldOutError{SKU: read.SKU, Left: left, Asked: r.Quantity}
		default:
			bought[r.UserID] = true
			if r.IdempotencyKey != "" {
				keys[r.IdempotencyKey] = true
			}
			left -= int64(r.Quantity)
			a.total += int64(r.Quantity)
			a.rows = append(a.rows, newOrderRow(r))
			a.at = append(a.at, i)
		}
	}
	return a, nil
}

// settle turns the batch transaction's outcome into the answers.
func (a allocation) settle(read Product, err error) ([]Placed, error) {
	if err != nil {
		var dup *errDuplicate
		if errors.As(err, &dup) {
			// A key or buyer of this batch was taken by a writer outside it between the check and
			// the insert: nothing was written; read again and retry.
			return nil, fmt.Errorf("batch of %d on %s: %w", len(a.rows), read.SKU, ErrVersionConflict)
		}
		return nil, fmt.Errorf("batch of %d on %s: %w", len(a.rows), read.SKU, err)
	}
	for j, i := range a.at {
		a.out[i].Order = a.rows[j].order()
	}
	return a.out, nil
}
