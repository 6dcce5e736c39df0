package stock

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/oklog/ulid/v2"
	"gorm.io/gorm"
)

// decideCheckout decides every line of a checkout against its product's read (reads, in the
// lines' order): the rows to insert, all pending until one deadline — the shortest payment
// timeout of its products — or all confirmed when none has one. A refused line refuses the whole
// checkout: the first refused line (in SKU order) gives the answer, which names every line
// refused for the same reason. db is the store's pool or the transaction the checkout runs in.
func (s *Store) decideCheckout(db *gorm.DB, req CheckoutRequest, lines []OrderRequest, reads []Product) ([]orderRow, time.Time, error) {
	now := time.Now().UTC().Truncate(time.Microsecond)
	var timeout time.Duration
	clock := false
	for _, p := range reads {
		clock = clock || p.Window != (Window{}) || p.PaymentTimeout > 0
		if p.PaymentTimeout > 0 && (timeout == 0 || p.PaymentTimeout < timeout) {
			timeout = p.PaymentTimeout
		}
	}
	if clock {
		var err error
		if now, err = s.clock(db); err != nil {
			return nil, now, err
		}
	}
	if req.IdempotencyKey != "" {
		var used int64
		if err := classify(db.Model(&orderRow{}).Where("idempotency_key = ?", req.IdempotencyKey).Count(&used).Error); err != nil {
			return nil, now, fmt.Errorf("checkout key: %w", err)
		}
		if used > 0 {
			return nil, now, fmt.Errorf("key %q already used: %w", req.IdempotencyKey, ErrDuplicateRequest)
		}
	}
	skus := make([]string, len(lines))
	for i, l := range lines {
		skus[i] = l.SKU
	}
	var bought []string
	err := db.Model(&orderRow{}).Where("user_id = ? AND sku IN ? AND "+active, req.UserID, skus).Pluck("sku", &bought).Error
	if err := classify(err); err != nil {
		return nil, now, fmt.Errorf("checkout buyer %s: %w", req.UserID, err)
	}
	refused := make([]error, len(lines))
	for i, l := range lines {
		p := reads[i]
		switch err := p.Window.Check(p.SKU, now); {
		case err != nil:
			refused[i] = err
		case l.Quantity < 1 || l.Quantity > p.MaxPerOrder:
			refused[i] = &InvalidError{Msg: fmt.Sprintf("quantity %d of product %s: want 1 to max_per_order %d", l.Quantity, p.SKU, p.MaxPerOrder)}
		case slices.Contains(bought, p.SKU):
			refused[i] = fmt.Errorf("user %s, product %s: %w", req.UserID, p.SKU, ErrAlreadyPurchased)
		case int64(l.Quantity) > p.Stock:
			refused[i] = &SoldOutError{SKU: p.SKU, Left: p.Stock, Asked: l.Quantity}
		}
	}
	if err := Refusal(lines, refused); err != nil {
		return nil, now, err
	}
	id := req.CheckoutID
	if id == "" {
		id = ulid.Make().String()
	}
	rows := make([]orderRow, len(lines))
	for i, l := range lines {
		rows[i] = newOrderRow(l, now, timeout)
		rows[i].CheckoutID = &id
	}
	if req.IdempotencyKey != "" {
		// The key goes on the first line only: the unique index on idempotency_key takes one
		// row per key, and a replay finds the checkout through that line.
		rows[0].IdempotencyKey, rows[0].RequestHash = &req.IdempotencyKey, req.Fingerprint()
	}
	return rows, now, nil
}

// Refusal is the answer of a checkout whose lines were refused as refused says (nil: placed):
// the first refusal, naming every line refused with the same code.
func Refusal(lines []OrderRequest, refused []error) error {
	first := slices.IndexFunc(refused, func(err error) bool { return err != nil })
	if first < 0 {
		return nil
	}
	e := &CheckoutError{Err: refused[first]}
	for i, err := range refused {
		if err != nil && Code(err) == Code(refused[first]) {
			e.SKUs = append(e.SKUs, lines[i].SKU)
		}
	}
	return e
}

// checkoutOf is the checkout its rows make, as of now.
func checkoutOf(rows []orderRow, now time.Time) Checkout {
	if len(rows) == 0 {
		return Checkout{}
	}
	c := Checkout{CheckoutID: *rows[0].CheckoutID, UserID: rows[0].UserID, Strategy: rows[0].Strategy, CreatedAt: rows[0].CreatedAt.UTC()}
	for _, r := range rows {
		c.Lines = append(c.Lines, r.order(now))
	}
	c.Status, c.ExpiresAt = c.Lines[0].Status, c.Lines[0].ExpiresAt
	return c
}

// Checkout reads a checkout by its id, as of now (the database's clock).
func (s *Store) Checkout(ctx context.Context, checkoutID string) (Checkout, error) {
	db := s.db.WithContext(ctx)
	var rows []orderRow
	if err := classify(db.Where("checkout_id = ?", checkoutID).Order("sku").Find(&rows).Error); err != nil {
		return Checkout{}, fmt.Errorf("checkout %s: %w", checkoutID, err)
	}
	if len(rows) == 0 {
		return Checkout{}, fmt.Errorf("checkout %s: %w", checkoutID, ErrNotFound)
	}
	now, err := s.clock(db)
	if err != nil {
		return Checkout{}, err
	}
	return checkoutOf(rows, now), nil
}

// PayCheckout pays every line of a checkout in one transaction, as Pay does one order: the
// answers of Pay, for the checkout as a whole.
func (s *Store) PayCheckout(ctx context.Context, checkoutID, userID string) (Checkout, error) {
	return s.checkoutTransition(ctx, checkoutID, userID, s.payStep)
}

// CancelCheckout cancels every line of a checkout in one transaction, each line's units back
// once, as Cancel does one order.
func (s *Store) CancelCheckout(ctx context.Context, checkoutID, userID string) (Checkout, error) {
	return s.checkoutTransition(ctx, checkoutID, userID, s.cancelStep)
}

func (s *Store) checkoutTransition(ctx context.Context, checkoutID, userID string,
	step func(tx *gorm.DB, o *orderRow, now time.Time) error) (Checkout, error) {
	rows, now, err := s.transitionRows(ctx, "checkout_id = ?", checkoutID, userID, step)
	if err != nil {
		return Checkout{}, fmt.Errorf("checkout %s: %w", checkoutID, err)
	}
	return checkoutOf(rows, now), nil
}

// expireCheckouts expires up to limit checkouts past their deadline, each as one, and returns
// their lines.
func (s *Store) expireCheckouts(ctx context.Context, now time.Time, limit int) ([]Order, error) {
	var ids []string
	err := s.db.WithContext(ctx).Model(&orderRow{}).Distinct("checkout_id").
		Where("status = ? AND expires_at <= ? AND checkout_id IS NOT NULL", Pending, now).Limit(limit).Pluck("checkout_id", &ids).Error
	if err := classify(err); err != nil {
		return nil, fmt.Errorf("due checkouts: %w", err)
	}
	var expired []Order
	for _, id := range ids {
		rows, at, err := s.transitionRows(ctx, "checkout_id = ?", id, "", func(tx *gorm.DB, o *orderRow, now time.Time) error {
			if o.Status != Pending || !lapsed(o, now) {
				return nil
			}
			return s.end(tx, o, Expired)
		})
		if err != nil {
			return expired, fmt.Errorf("expire checkout %s: %w", id, err)
		}
		for _, r := range rows {
			if r.Status == Expired {
				expired = append(expired, r.order(at))
			}
		}
	}
	return expired, nil
}
