package stock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/oklog/ulid/v2"
	"gorm.io/gorm"

	"github.com/flashsale/seckill/internal/planted"
)

// checkoutBatch is a batch of checkouts of the same products, decided against one read of each:
// the rows to insert, each product's units sold, and every checkout's answer.
type checkoutBatch struct {
	reads  []Product // the batch's products, in SKU order
	units  []int64   // the units the batch sells of each product (by reads' index)
	rows   []orderRow
	placed [][]int // by checkout: the indices of its rows, none when it was refused
	out    []CheckoutPlaced
	now    time.Time
}

// decideCheckouts decides each checkout of reqs — all of the same products — against reads
// (one per product, any order), in arrival order, as allocate decides a batch of orders: a
// refused line refuses its whole checkout (the first refused line, in SKU order, gives the
// answer, naming every line refused for the same reason); the others take their units, every
// line pending until one deadline — the shortest payment timeout of its products — or confirmed
// at once when none has one. A buyer who holds an active order of a product (in the database or
// earlier in the batch), or a key already used, is refused. db is the store's pool or the
// transaction the batch runs in.
func (s *Store) decideCheckouts(db *gorm.DB, reqs []CheckoutRequest, reads []Product) (checkoutBatch, error) {
	b := checkoutBatch{out: make([]CheckoutPlaced, len(reqs)), placed: make([][]int, len(reqs)), now: time.Now().UTC().Truncate(time.Microsecond)}
	if len(reqs) == 0 {
		return b, nil
	}
	first := reqs[0].lines()
	var err error
	if b.reads, err = readsOf(first, reads); err != nil {
		return b, err
	}
	b.units = make([]int64, len(first))
	skus := make([]string, len(first))
	for i, l := range first {
		skus[i] = l.SKU
	}
	var timeout time.Duration
	clock := false
	for _, p := range b.reads {
		clock = clock || p.Window != (Window{}) || p.PaymentTimeout > 0
		if p.PaymentTimeout > 0 && (timeout == 0 || p.PaymentTimeout < timeout) {
			timeout = p.PaymentTimeout
		}
	}
	if clock {
		if b.now, err = s.clock(db); err != nil {
			return b, err
		}
	}
	users, keyList := make([]string, len(reqs)), []string{}
	for i, r := range reqs {
		users[i] = r.UserID
		if r.IdempotencyKey != "" {
			keyList = append(keyList, r.IdempotencyKey)
		}
	}
	var existing []orderRow
	q := db.Model(&orderRow{}).Where("user_id IN ? AND sku IN ? AND "+active, users, skus)
	if len(keyList) > 0 {
		q = q.Or("idempotency_key IN ?", keyList)
	}
	if err := classify(q.Select("sku", "user_id", "idempotency_key", "status").Find(&existing).Error); err != nil {
		return b, fmt.Errorf("checkout buyers: %w", err)
	}
	bought, keys := map[[2]string]bool{}, map[string]bool{}
	for _, o := range existing {
		if o.Status.Active() && slices.Contains(skus, o.SKU) {
			bought[[2]string{o.UserID, o.SKU}] = true
		}
		if o.IdempotencyKey != nil {
			keys[*o.IdempotencyKey] = true
		}
	}
	left := make([]int64, len(b.reads))
	for j, p := range b.reads {
		left[j] = p.Stock
	}
	for i, req := range reqs {
		lines := req.lines()
		if !slices.EqualFunc(lines, first, func(a, b OrderRequest) bool { return a.SKU == b.SKU }) {
			return b, fmt.Errorf("checkout %d of a batch buys other products than the first", i)
		}
		if req.IdempotencyKey != "" && keys[req.IdempotencyKey] {
			b.out[i].Err = fmt.Errorf("key %q already used: %w", req.IdempotencyKey, ErrDuplicateRequest)
			continue
		}
		refused := make([]error, len(lines))
		for j, l := range lines {
			p := b.reads[j]
			switch err := p.Window.Check(p.SKU, b.now); {
			case err != nil:
				refused[j] = err
			case l.Quantity < 1 || l.Quantity > p.MaxPerOrder:
				refused[j] = &InvalidError{Msg: fmt.Sprintf("quantity %d of product %s: want 1 to max_per_order %d", l.Quantity, p.SKU, p.MaxPerOrder)}
			case bought[[2]string{req.UserID, p.SKU}]:
				refused[j] = fmt.Errorf("user %s, product %s: %w", req.UserID, p.SKU, ErrAlreadyPurchased)
			case int64(l.Quantity) > left[j]:
				refused[j] = &SoldOutError{SKU: p.SKU, Left: left[j], Asked: l.Quantity}
			}
		}
		if b.out[i].Err = Refusal(lines, refused); b.out[i].Err != nil {
			continue
		}
		id := req.CheckoutID
		if id == "" {
			id = ulid.Make().String()
		}
		for j, l := range lines {
			left[j] -= int64(l.Quantity)
			b.units[j] += int64(l.Quantity)
			bought[[2]string{req.UserID, l.SKU}] = true
			row := newOrderRow(l, b.now, timeout)
			row.CheckoutID = &id
			if j == 0 && req.IdempotencyKey != "" {
				// The key goes on the first line only: the unique index on idempotency_key takes
				// one row per key, and a replay finds the checkout through that line.
				row.IdempotencyKey, row.RequestHash = &req.IdempotencyKey, req.Fingerprint()
			}
			b.placed[i] = append(b.placed[i], len(b.rows))
			b.rows = append(b.rows, row)
		}
		if req.IdempotencyKey != "" {
			keys[req.IdempotencyKey] = true
		}
	}
	return b, nil
}

// settle is the batch's answers once its write ended with err: every checkout's, or err for
// all of them.
func (b checkoutBatch) settle(err error) ([]CheckoutPlaced, error) {
	if err != nil {
		return nil, err
	}
	for i, at := range b.placed {
		if len(at) == 0 {
			continue
		}
		rows := make([]orderRow, len(at))
		for k, r := range at {
			rows[k] = b.rows[r]
		}
		b.out[i].Checkout = checkoutOf(rows, b.now)
	}
	return b.out, nil
}

// Refusal is the answer of a checkout whose lines were refused as refused says (nil: placed):
// the first refusal for good, or else the first busy one, naming every line refused with the
// same code. A line refused for good refuses the checkout whatever becomes of a busy line's
// units: busy would send its buyer back for an answer already known.
func Refusal(lines []OrderRequest, refused []error) error {
	first := slices.IndexFunc(refused, func(err error) bool { return err != nil && !errors.Is(err, ErrBusy) })
	if first < 0 || planted.On(planted.BusyFirst) {
		first = slices.IndexFunc(refused, func(err error) bool { return err != nil })
	}
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
