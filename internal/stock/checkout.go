package stock

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"gorm.io/gorm"

	"github.com/flashsale/seckill/internal/planted"
)

// A checkout buys several products at once, all or nothing, in one transaction (sell.go); an
// order is a checkout of one line whose row carries no checkout id.

// CheckoutRequest is one buyer's attempt to buy: one product (an order) or several at once.
type CheckoutRequest struct {
	CheckoutID     string // given before it is written, or empty: a fresh ULID
	UserID         string
	Strategy       string
	IdempotencyKey string
	Lines          []OrderRequest // one per product, distinct SKUs
	// Order marks a single order (OrderOf): one line, no checkout id, the order's key and print.
	Order bool
	// Pass is the Seckill-Pass header (a pass per product with a waiting room, comma-separated):
	// the service checks it once, for every line.
	Pass string
}

// Answer is err as the answer to r: an order's refusal is its line's own error, not a
// checkout's naming the line. Only a refusal itself is unwrapped, not a wrapper around one.
func (r CheckoutRequest) Answer(err error) error {
	if refused, ok := err.(*CheckoutError); ok && r.Order {
		return refused.Err
	}
	return err
}

// OrderOf is req as a request of one line.
func OrderOf(req OrderRequest) CheckoutRequest {
	return CheckoutRequest{UserID: req.UserID, Strategy: req.Strategy, IdempotencyKey: req.IdempotencyKey,
		Lines: []OrderRequest{req}, Order: true}
}

// Checkout is a placed checkout: one order per line, in SKU order, all in one status; or, with
// the queued strategy, one accepted and not yet written (Queued), or rejected with Reason.
type Checkout struct {
	CheckoutID string
	UserID     string
	Strategy   string
	Status     Status
	Reason     string    // why a rejected checkout was (an error code: sold_out, ...)
	ExpiresAt  time.Time // set while pending: the payment deadline of every line
	CreatedAt  time.Time
	Lines      []Order
}

// Single is the checkout of one order: its one line.
func Single(o Order) Checkout {
	return Checkout{UserID: o.UserID, Strategy: o.Strategy, Status: o.Status, Reason: o.Reason, ExpiresAt: o.ExpiresAt,
		CreatedAt: o.CreatedAt, Lines: []Order{o}}
}

// CheckoutError refuses a whole request for some of its lines, which it names.
type CheckoutError struct {
	SKUs []string
	Err  error
}

func (e *CheckoutError) Error() string {
	return fmt.Sprintf("checkout lines %s: %v", strings.Join(e.SKUs, ", "), e.Err)
}

func (e *CheckoutError) Unwrap() error { return e.Err }

// MaxCheckoutLines is the most lines one checkout may have.
const MaxCheckoutLines = 20

// Validate refuses a checkout with no line, more than MaxCheckoutLines, or a product twice.
func (r CheckoutRequest) Validate() error {
	if len(r.Lines) == 0 || len(r.Lines) > MaxCheckoutLines {
		return &InvalidError{Msg: fmt.Sprintf("a checkout has 1 to %d lines, not %d", MaxCheckoutLines, len(r.Lines))}
	}
	seen := make(map[string]bool, len(r.Lines))
	for _, l := range r.Lines {
		if seen[l.SKU] {
			return &InvalidError{Msg: fmt.Sprintf("product %s is on two lines of the checkout", l.SKU)}
		}
		seen[l.SKU] = true
	}
	return nil
}

// SKUOrder returns the lines sorted by SKU: the order in which every request takes its products.
func SKUOrder(lines []OrderRequest) []OrderRequest {
	out := slices.Clone(lines)
	if !planted.On(planted.RequestOrder) {
		slices.SortFunc(out, func(a, b OrderRequest) int { return strings.Compare(a.SKU, b.SKU) })
	}
	return out
}

// SKUs are the request's products in SKU order: the locks and rows its section takes.
func (r CheckoutRequest) SKUs() []string {
	lines := SKUOrder(r.Lines)
	skus := make([]string, len(lines))
	for i, l := range lines {
		skus[i] = l.SKU
	}
	return skus
}

// Admitted are the request's lines as admission judges them: in SKU order, each with the
// request's buyer, strategy and Idempotency-Key, so that a repeat of a request in flight hears
// it is in flight (the rows carry the key on one line only).
func (r CheckoutRequest) Admitted() []OrderRequest {
	lines := SKUOrder(r.Lines)
	for i := range lines {
		lines[i].UserID, lines[i].Strategy, lines[i].IdempotencyKey = r.UserID, r.Strategy, r.IdempotencyKey
	}
	return lines
}

// Fingerprint identifies what the request asks for: an order's is its line's, a checkout's
// hashes its lines' in SKU order.
func (r CheckoutRequest) Fingerprint() string {
	lines := r.lines()
	if r.Order {
		return lines[0].Fingerprint()
	}
	prints := make([]string, len(lines))
	for i, l := range lines {
		prints[i] = l.Fingerprint()
	}
	sum := sha256.Sum256([]byte(strings.Join(prints, "\x00")))
	return hex.EncodeToString(sum[:])
}

// lines are the Admitted lines without the key: the first row carries it.
func (r CheckoutRequest) lines() []OrderRequest {
	lines := r.Admitted()
	for i := range lines {
		lines[i].IdempotencyKey = ""
	}
	return lines
}

// Refusal answers a request whose lines were refused as refused says (nil: placed): the first
// refusal for good (busy would send the buyer back for an answer already known), else the first
// busy one, naming every line refused with its code.
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

// checkoutOf is the checkout its rows (at least one) make, as of now.
func checkoutOf(rows []orderRow, now time.Time) Checkout {
	c := Checkout{UserID: rows[0].UserID, Strategy: rows[0].Strategy, CreatedAt: rows[0].CreatedAt.UTC()}
	if rows[0].CheckoutID != nil {
		c.CheckoutID = *rows[0].CheckoutID
	}
	for _, r := range rows {
		c.Lines = append(c.Lines, r.order(now))
	}
	c.Status, c.ExpiresAt = c.Lines[0].Status, c.Lines[0].ExpiresAt
	return c
}

// A Ref names what a buyer reads, pays or cancels: an order or a checkout, by its id. An
// order's answer is its checkout of one line (Single), even if it is a line of a checkout.
type Ref struct {
	ID       string
	Checkout bool
}

// OrderRef names an order, CheckoutRef a checkout.
func OrderRef(id string) Ref    { return Ref{ID: id} }
func CheckoutRef(id string) Ref { return Ref{ID: id, Checkout: true} }

func (r Ref) String() string {
	if r.Checkout {
		return "checkout " + r.ID
	}
	return "order " + r.ID
}

// Read reads an order or a checkout by ref, as of now (the database's clock).
func (s *Store) Read(ctx context.Context, ref Ref) (Checkout, error) {
	if !ref.Checkout {
		o, err := s.Order(ctx, ref.ID)
		return Single(o), err
	}
	db := s.db.WithContext(ctx)
	var rows []orderRow
	if err := classify(db.Where("checkout_id = ?", ref.ID).Order("sku").Find(&rows).Error); err != nil {
		return Checkout{}, fmt.Errorf("%s: %w", ref, err)
	}
	if len(rows) == 0 {
		return Checkout{}, fmt.Errorf("%s: %w", ref, ErrNotFound)
	}
	now, err := s.clock(db)
	if err != nil {
		return Checkout{}, err
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
