package stock

import (
	"context"
	"fmt"
	"time"

	"github.com/oklog/ulid/v2"
	"gorm.io/gorm"
	"gorm.io/gorm/clause"
)

// orderRow maps the orders table.
type orderRow struct {
	OrderID        string    `gorm:"column:order_id;primaryKey"`
	SKU            string    `gorm:"column:sku"`
	UserID         string    `gorm:"column:user_id"`
	Quantity       int       `gorm:"column:quantity"`
	Strategy       string    `gorm:"column:strategy"`
	IdempotencyKey *string   `gorm:"column:idempotency_key"` // NULL when absent: NULLs never collide in the unique index
	RequestHash    string    `gorm:"column:request_hash"`
	CreatedAt      time.Time `gorm:"column:created_at"`
}

func (orderRow) TableName() string { return "orders" }

func (r orderRow) order() Order {
	o := Order{OrderID: r.OrderID, SKU: r.SKU, UserID: r.UserID, Quantity: r.Quantity, Strategy: r.Strategy,
		RequestHash: r.RequestHash, CreatedAt: r.CreatedAt.UTC()}
	if r.IdempotencyKey != nil {
		o.IdempotencyKey = *r.IdempotencyKey
	}
	return o
}

// Buyers lists the users holding an order for sku, to rebuild state kept outside the database.
func (s *Store) Buyers(ctx context.Context, sku string) ([]string, error) {
	var users []string
	if err := classify(s.db.WithContext(ctx).Model(&orderRow{}).Where("sku = ?", sku).Pluck("user_id", &users).Error); err != nil {
		return nil, fmt.Errorf("buyers of %s: %w", sku, err)
	}
	return users, nil
}

// newOrderRow is the row of a new order: a fresh ULID, the request's fingerprint, now.
func newOrderRow(req OrderRequest) orderRow {
	row := orderRow{
		OrderID:     ulid.Make().String(),
		SKU:         req.SKU,
		UserID:      req.UserID,
		Quantity:    req.Quantity,
		Strategy:    req.Strategy,
		RequestHash: req.Fingerprint(),
		CreatedAt:   time.Now().UTC().Truncate(time.Microsecond),
	}
	if req.IdempotencyKey != "" {
		row.IdempotencyKey = &req.IdempotencyKey
	}
	return row
}

// Order reads one order by its id.
func (s *Store) Order(ctx context.Context, orderID string) (Order, error) {
	return s.orderWhere(ctx, "order_id = ?", orderID)
}

// OrderByIdempotencyKey reads the order placed with this Idempotency-Key.
func (s *Store) OrderByIdempotencyKey(ctx context.Context, key string) (Order, error) {
	return s.orderWhere(ctx, "idempotency_key = ?", key)
}

func (s *Store) orderWhere(ctx context.Context, cond string, arg string) (Order, error) {
	var row orderRow
	if err := classify(s.db.WithContext(ctx).Where(cond, arg).Take(&row).Error); err != nil {
		return Order{}, fmt.Errorf("order %s: %w", arg, err)
	}
	return row.order(), nil
}

// PlaceOrderNowait is the pessimistic critical section: one transaction that locks the product
// row without waiting (SELECT ... FOR UPDATE NOWAIT), checks, decrements and inserts the order.
// A row locked by another transaction fails at once with ErrBusy instead of queueing a
// connection behind it: under a flash sale, waiting transactions would exhaust the pool.
func (s *Store) PlaceOrderNowait(ctx context.Context, req OrderRequest) (Order, error) {
	var order Order
	err := withTx(ctx, s.nowait, func(tx *gorm.DB) error {
		row, err := s.lockRow(tx, req.SKU, clause.LockingOptionsNoWait)
		if err != nil {
			return err
		}
		order, err = sell(tx, row.product(), req, false)
		return err
	})
	if err != nil {
		return Order{}, fmt.Errorf("place order %s/%s nowait: %w", req.SKU, req.UserID, err)
	}
	return order, nil
}

// lockRow reads sku's row in tx and locks it: SELECT ... FOR UPDATE with options (NOWAIT, or
// none to wait in the row's lock queue). On SQLite the transaction already holds the database's
// write lock (BEGIN IMMEDIATE), taken without waiting on the nowait pool.
func (s *Store) lockRow(tx *gorm.DB, sku, options string) (productRow, error) {
	q := tx.Where("sku = ?", sku)
	if s.dialect == MySQL {
		q = q.Clauses(clause.Locking{Strength: clause.LockingStrengthUpdate, Options: options})
	}
	var row productRow
	return row, q.Take(&row).Error
}

// PlaceOrderAt is the optimistic critical section: it places the order only if the product is
// still at the version read (UPDATE ... WHERE version = ? AND stock >= ?). It takes no lock of
// its own, so it stays correct when a lock in front of it was lost: a stale writer matches no
// row and gets ErrVersionConflict, having written nothing. Callers read the product again and
// retry on that error. The read may come from any earlier moment; only the version matters.
func (s *Store) PlaceOrderAt(ctx context.Context, req OrderRequest, read Product) (Order, error) {
	if err := check(read, req); err != nil {
		return Order{}, err
	}
	var order Order
	err := withTx(ctx, s.db, func(tx *gorm.DB) error {
		var err error
		order, err = sell(tx, read, req, true)
		return err
	})
	if err != nil {
		return Order{}, fmt.Errorf("place order %s/%s at version %d: %w", req.SKU, req.UserID, read.Version, err)
	}
	return order, nil
}

// PlaceOrderFenced is the critical section of the etcd strategy: one transaction that reads the
// product, checks, and decrements only if no later lock holder has written
// (UPDATE ... SET fence = ? WHERE stock >= ? AND fence <= ?), then inserts the order. A holder
// whose lease expired while it was paused carries an older token than its successor and gets
// ErrFencedOut, having written nothing. A sold-out product answers ErrSoldOut, not a fence error:
// a matched-no-row update is told apart by reading the row again.
func (s *Store) PlaceOrderFenced(ctx context.Context, req OrderRequest, fence int64) (Order, error) {
	var order Order
	err := withTx(ctx, s.db, func(tx *gorm.DB) error {
		var row productRow
		if err := tx.Where("sku = ?", req.SKU).Take(&row).Error; err != nil {
			return err
		}
		if err := check(row.product(), req); err != nil {
			return err
		}
		res := tx.Model(&productRow{}).Where("sku = ? AND stock >= ? AND fence <= ?", req.SKU, req.Quantity, fence).
			Updates(sale(int64(req.Quantity), fence))
		if res.Error != nil {
			return res.Error
		}
		if res.RowsAffected != 1 {
			var now productRow
			if err := tx.Where("sku = ?", req.SKU).Take(&now).Error; err != nil {
				return err
			}
			if err := check(now.product(), req); err != nil {
				return err
			}
			return &FenceError{SKU: req.SKU, Token: fence, Fence: now.Fence}
		}
		var err error
		order, err = insertOrder(tx, req)
		return err
	})
	if err != nil {
		return Order{}, fmt.Errorf("place order %s/%s with fence %d: %w", req.SKU, req.UserID, fence, err)
	}
	return order, nil
}

// ResetFence sets sku's fence back to 0 if it is still at observed. The etcd strategy calls it
// when the fence is ahead of the etcd cluster's current revision — which no legitimate token can
// be, so the cluster was replaced and its revisions started again.
func (s *Store) ResetFence(ctx context.Context, sku string, observed int64) error {
	err := s.db.WithContext(ctx).Model(&productRow{}).Where("sku = ? AND fence = ?", sku, observed).Update("fence", 0).Error
	if err := classify(err); err != nil {
		return fmt.Errorf("reset fence of %s: %w", sku, err)
	}
	return nil
}

// PlaceOrderUnguarded is deliberately wrong, for the naive strategy only: it reads the stock,
// checks it, waits (as network and application latency would), then writes the stock it
// computed from its stale read. Concurrent buyers all read the same stock, all pass the check,
// and each write overwrites the others' decrements: the lost update that oversells a flash sale.
// It is the one stock write in the project that is not conditional, and it exists so that the
// tests and the load tool can show that their checks catch it.
func (s *Store) PlaceOrderUnguarded(ctx context.Context, req OrderRequest, pause time.Duration) (Order, error) {
	row, err := s.Product(ctx, req.SKU)
	if err != nil {
		return Order{}, err
	}
	if err := check(row, req); err != nil {
		return Order{}, err
	}
	select {
	case <-time.After(pause):
	case <-ctx.Done():
		return Order{}, ctx.Err()
	}
	var order Order
	err = withTx(ctx, s.db, func(tx *gorm.DB) error {
		err := tx.Model(&productRow{}).Where("sku = ?", req.SKU).Updates(map[string]any{
			"stock":      row.Stock - int64(req.Quantity),
			"version":    gorm.Expr("version + 1"),
			"updated_at": time.Now().UTC(),
		}).Error
		if err != nil {
			return err
		}
		order, err = insertOrder(tx, req)
		return err
	})
	if err != nil {
		return Order{}, fmt.Errorf("place order %s/%s unguarded: %w", req.SKU, req.UserID, err)
	}
	return order, nil
}

// check applies the product's rules to a request against the stock that was read.
func check(row Product, req OrderRequest) error {
	if req.Quantity > row.MaxPerOrder {
		return &InvalidError{Msg: fmt.Sprintf("quantity %d exceeds max_per_order %d of product %s", req.Quantity, row.MaxPerOrder, row.SKU)}
	}
	if row.Stock < int64(req.Quantity) {
		return &SoldOutError{SKU: row.SKU, Left: row.Stock, Asked: req.Quantity}
	}
	return nil
}

// sell decrements the stock read in row and inserts the order, inside tx. The UPDATE is
// conditional on there being enough stock — and, when matchVersion, on the row being unchanged
// since it was read — and its RowsAffected is checked: zero rows means another writer got there
// first, and nothing is written.
func sell(tx *gorm.DB, row Product, req OrderRequest, matchVersion bool) (Order, error) {
	if err := check(row, req); err != nil {
		return Order{}, err
	}
	q := tx.Model(&productRow{}).Where("sku = ? AND stock >= ?", req.SKU, req.Quantity)
	if matchVersion {
		q = q.Where("version = ?", row.Version)
	}
	res := q.Updates(sale(int64(req.Quantity), 0))
	if res.Error != nil {
		return Order{}, res.Error
	}
	if res.RowsAffected != 1 {
		return Order{}, fmt.Errorf("product %s at version %d: %w", req.SKU, row.Version, ErrVersionConflict)
	}
	return insertOrder(tx, req)
}

// sale is what selling units writes to the product row: fewer units, a new version (so that any
// writer holding the old one fails), and, under the etcd lock, the writer's fencing token (0:
// the fence is left as it is).
func sale(units, fence int64) map[string]any {
	update := map[string]any{
		"stock":      gorm.Expr("stock - ?", units),
		"version":    gorm.Expr("version + 1"),
		"updated_at": time.Now().UTC(),
	}
	if fence > 0 {
		update["fence"] = fence
	}
	return update
}

// insertOrder inserts the order row. The unique keys turn a repeat buyer into
// ErrAlreadyPurchased and a reused Idempotency-Key into ErrDuplicateRequest; either way the
// caller's transaction rolls back and gives the stock back.
func insertOrder(tx *gorm.DB, req OrderRequest) (Order, error) {
	row := newOrderRow(req)
	if err := classify(tx.Create(&row).Error); err != nil {
		switch {
		case isDuplicate(err, "idempotency_key"):
			return Order{}, fmt.Errorf("%w: %w", ErrDuplicateRequest, err)
		case isDuplicate(err, "sku_user"), isDuplicate(err, "user_id"):
			return Order{}, fmt.Errorf("user %s, product %s: %w", req.UserID, req.SKU, ErrAlreadyPurchased)
		}
		return Order{}, err
	}
	return row.order(), nil
}
