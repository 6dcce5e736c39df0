package stock

import (
	"context"
	"fmt"
	"time"

	"github.com/oklog/ulid/v2"
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

// Buyers lists the users holding an order for sku, to rebuild state kept outside the database.
func (s *Store) Buyers(ctx context.Context, sku string) ([]string, error) {
	var users []string
	if err := classify(s.db.WithContext(ctx).Model(&orderRow{}).Where("sku = ?", sku).Pluck("user_id", &users).Error); err != nil {
		return nil, fmt.Errorf("buyers of %s: %w", sku, err)
	}
	return users, nil
}

// Holders reports which of users hold an order for sku: the database's answer to whether a
// reservation taken outside it became an order.
func (s *Store) Holders(ctx context.Context, sku string, users []string) (map[string]bool, error) {
	var found []string
	err := classify(s.db.WithContext(ctx).Model(&orderRow{}).Where("sku = ? AND user_id IN ?", sku, users).Pluck("user_id", &found).Error)
	if err != nil {
		return nil, fmt.Errorf("holders of %s: %w", sku, err)
	}
	out := make(map[string]bool, len(found))
	for _, u := range found {
		out[u] = true
	}
	return out, nil
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
