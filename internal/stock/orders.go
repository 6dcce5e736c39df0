package stock

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/oklog/ulid/v2"
	"gorm.io/gorm"
)

// orderRow maps the orders table.
type orderRow struct {
	OrderID        string     `gorm:"column:order_id;primaryKey"`
	SKU            string     `gorm:"column:sku"`
	UserID         string     `gorm:"column:user_id"`
	Quantity       int        `gorm:"column:quantity"`
	Strategy       string     `gorm:"column:strategy"`
	IdempotencyKey *string    `gorm:"column:idempotency_key"` // NULL when absent: NULLs never collide in the unique index
	RequestHash    string     `gorm:"column:request_hash"`
	CreatedAt      time.Time  `gorm:"column:created_at"`
	Status         Status     `gorm:"column:status"`
	ExpiresAt      *time.Time `gorm:"column:expires_at"`      // the payment deadline of a pending order
	ReservationID  *string    `gorm:"column:reservation_id"`  // the admission reservation it was placed under
	RestockPending bool       `gorm:"column:restock_pending"` // its units came back; Redis admission has not heard yet
	CheckoutID     *string    `gorm:"column:checkout_id"`     // the checkout it is a line of; NULL for a single order
}

func (orderRow) TableName() string { return "orders" }

// active is the condition of an order that holds its units.
const active = "status IN ('pending', 'confirmed')"

// order is the row as of now (the database's clock): a pending order past its deadline reads as
// expired, though its units come back only when ExpireDue expires it.
func (r orderRow) order(now time.Time) Order {
	return r.orderLapsed(r.ExpiresAt != nil && !now.Before(r.ExpiresAt.UTC()))
}

// orderLapsed is the row with its deadline passed or not, as the database's clock says.
func (r orderRow) orderLapsed(lapsed bool) Order {
	o := Order{OrderID: r.OrderID, SKU: r.SKU, UserID: r.UserID, Quantity: r.Quantity, Strategy: r.Strategy,
		RequestHash: r.RequestHash, CreatedAt: r.CreatedAt.UTC(), Status: r.Status}
	if r.IdempotencyKey != nil {
		o.IdempotencyKey = *r.IdempotencyKey
	}
	if r.CheckoutID != nil {
		o.CheckoutID = *r.CheckoutID
	}
	if r.Status == Pending && r.ExpiresAt != nil {
		o.ExpiresAt = r.ExpiresAt.UTC()
		if lapsed {
			o.Status, o.ExpiresAt = Expired, time.Time{}
		}
	}
	return o
}

// newOrderRow is the row of a new order at now (the database's clock): its given id or a fresh
// ULID, and with a payment timeout, pending until now + timeout.
func newOrderRow(req OrderRequest, now time.Time, paymentTimeout time.Duration) orderRow {
	row := orderRow{
		OrderID:     ulid.Make().String(),
		SKU:         req.SKU,
		UserID:      req.UserID,
		Quantity:    req.Quantity,
		Strategy:    req.Strategy,
		RequestHash: req.Fingerprint(),
		CreatedAt:   now,
		Status:      Confirmed,
	}
	if paymentTimeout > 0 {
		until := now.Add(paymentTimeout)
		row.Status, row.ExpiresAt = Pending, &until
	}
	if req.OrderID != "" {
		row.OrderID = req.OrderID
	}
	if req.Reservation.ID != "" {
		row.ReservationID = &req.Reservation.ID
	}
	return row
}

// Buyers lists the users holding an active order for sku, to rebuild state kept outside the
// database.
func (s *Store) Buyers(ctx context.Context, sku string) ([]string, error) {
	var users []string
	if err := classify(s.db.WithContext(ctx).Model(&orderRow{}).Where("sku = ? AND "+active, sku).Pluck("user_id", &users).Error); err != nil {
		return nil, fmt.Errorf("buyers of %s: %w", sku, err)
	}
	return users, nil
}

// Placed reports which of the reservations ids became orders (in whatever state they are now):
// the database's answer to whether a reservation taken outside it was written.
func (s *Store) Placed(ctx context.Context, ids []string) (map[string]bool, error) {
	var found []string
	err := classify(s.db.WithContext(ctx).Model(&orderRow{}).Where("reservation_id IN ?", ids).Pluck("reservation_id", &found).Error)
	if err != nil {
		return nil, fmt.Errorf("orders of reservations: %w", err)
	}
	out := make(map[string]bool, len(found))
	for _, id := range found {
		out[id] = true
	}
	return out, nil
}

// KeysUsed maps each of keys that a written order carries to that order, in one query for the
// queued strategy's many admitted orders.
func (s *Store) KeysUsed(ctx context.Context, keys []string) (map[string]string, error) {
	var rows []struct {
		IdempotencyKey string `gorm:"column:idempotency_key"`
		OrderID        string `gorm:"column:order_id"`
	}
	err := classify(s.db.WithContext(ctx).Model(&orderRow{}).Select("idempotency_key", "order_id").
		Where("idempotency_key IN ?", keys).Scan(&rows).Error)
	if err != nil {
		return nil, fmt.Errorf("orders of idempotency keys: %w", err)
	}
	out := make(map[string]string, len(rows))
	for _, r := range rows {
		out[r.IdempotencyKey] = r.OrderID
	}
	return out, nil
}

// Order reads one order by its id, as of now.
func (s *Store) Order(ctx context.Context, orderID string) (Order, error) {
	return s.orderWhere(ctx, "order_id = ?", orderID)
}

// OrderByIdempotencyKey reads the order placed with this Idempotency-Key, as of now.
func (s *Store) OrderByIdempotencyKey(ctx context.Context, key string) (Order, error) {
	return s.orderWhere(ctx, "idempotency_key = ?", key)
}

// Orders reads the orders of ids that exist, as of now, in one query: by id.
func (s *Store) Orders(ctx context.Context, ids []string) (map[string]Order, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	orders, err := s.ordersWhere(ctx, "order_id IN ?", ids)
	if err != nil {
		return nil, fmt.Errorf("orders %s...: %w", ids[0], err)
	}
	out := make(map[string]Order, len(orders))
	for _, o := range orders {
		out[o.OrderID] = o
	}
	return out, nil
}

func (s *Store) orderWhere(ctx context.Context, cond string, arg string) (Order, error) {
	orders, err := s.ordersWhere(ctx, cond, arg)
	if err == nil && len(orders) == 0 {
		err = ErrNotFound
	}
	if err != nil {
		return Order{}, fmt.Errorf("order %s: %w", arg, err)
	}
	return orders[0], nil
}

// ordersWhere reads the orders cond selects, each with its deadline by the database's clock.
func (s *Store) ordersWhere(ctx context.Context, cond string, arg any) ([]Order, error) {
	db := s.db.WithContext(ctx)
	if s.dialect == MySQL {
		// The rows and their deadlines by the database's clock in one query, not two: buyers
		// following their queued orders read them often.
		var reads []struct {
			Row    orderRow `gorm:"embedded"`
			Lapsed bool     `gorm:"column:lapsed"`
		}
		err := db.Model(&orderRow{}).Select("*, (expires_at IS NOT NULL AND expires_at <= UTC_TIMESTAMP(6)) AS lapsed").
			Where(cond, arg).Find(&reads).Error
		if err := classify(err); err != nil {
			return nil, err
		}
		orders := make([]Order, len(reads))
		for i, r := range reads {
			orders[i] = r.Row.orderLapsed(r.Lapsed)
		}
		return orders, nil
	}
	var rows []orderRow
	if err := classify(db.Where(cond, arg).Find(&rows).Error); err != nil {
		return nil, err
	}
	now := time.Time{}
	if slices.ContainsFunc(rows, func(r orderRow) bool { return r.Status == Pending }) {
		var err error
		if now, err = s.clock(db); err != nil {
			return nil, err
		}
	}
	orders := make([]Order, len(rows))
	for i, r := range rows {
		orders[i] = r.order(now)
	}
	return orders, nil
}

// clock reads the database's clock, which decides every deadline, so that the instances'
// clocks never disagree about one.
func (s *Store) clock(db *gorm.DB) (time.Time, error) {
	var now time.Time
	if s.dialect == MySQL {
		if err := classify(db.Raw("SELECT UTC_TIMESTAMP(6)").Scan(&now).Error); err != nil {
			return time.Time{}, fmt.Errorf("database clock: %w", err)
		}
		return now.UTC(), nil
	}
	var text string
	if err := classify(db.Raw("SELECT strftime('%Y-%m-%d %H:%M:%f', 'now')").Scan(&text).Error); err != nil {
		return time.Time{}, fmt.Errorf("database clock: %w", err)
	}
	now, err := time.ParseInLocation("2006-01-02 15:04:05.000", text, time.UTC)
	if err != nil {
		return time.Time{}, fmt.Errorf("database clock %q: %w", text, err)
	}
	return now, nil
}
