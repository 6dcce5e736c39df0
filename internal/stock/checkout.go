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

// Checkouts: several products in one order, all or nothing. Each section below is the checkout
// twin of a single-product one (sell.go). Every product is taken, checked and written in SKU
// order: the one global order that keeps two crossed checkouts (A+B against B+A) from each
// holding a row the other waits for. Every line's row is inserted in the same transaction as
// every product's decrement, so no one ever sees half a checkout.

// CheckoutRequest is one buyer's attempt to buy several products at once.
type CheckoutRequest struct {
	CheckoutID     string // given before it is written, or empty: a fresh ULID
	UserID         string
	Strategy       string
	IdempotencyKey string
	Lines          []OrderRequest // one per product (SKU and quantity), distinct SKUs
}

// Checkout is a placed checkout: one order per line, in SKU order, all in one status.
type Checkout struct {
	CheckoutID string
	UserID     string
	Strategy   string
	Status     Status
	ExpiresAt  time.Time // set while pending: the payment deadline of every line
	CreatedAt  time.Time
	Lines      []Order
}

// CheckoutError refuses a whole checkout for some of its lines, which it names.
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

// SKUOrder returns the lines sorted by SKU: the order in which every checkout takes its products.
func SKUOrder(lines []OrderRequest) []OrderRequest {
	out := slices.Clone(lines)
	if !planted.On(planted.RequestOrder) {
		slices.SortFunc(out, func(a, b OrderRequest) int { return strings.Compare(a.SKU, b.SKU) })
	}
	return out
}

// Fingerprint identifies what the checkout asks for, as OrderRequest.Fingerprint does an order's:
// its lines' fingerprints in SKU order.
func (r CheckoutRequest) Fingerprint() string {
	prints := make([]string, len(r.Lines))
	for i, l := range r.lines() {
		prints[i] = l.Fingerprint()
	}
	sum := sha256.Sum256([]byte(strings.Join(prints, "\x00")))
	return hex.EncodeToString(sum[:])
}

// lines are the request's lines in SKU order, each carrying the checkout's buyer and strategy.
func (r CheckoutRequest) lines() []OrderRequest {
	lines := SKUOrder(r.Lines)
	for i := range lines {
		lines[i].UserID, lines[i].Strategy = r.UserID, r.Strategy
		lines[i].IdempotencyKey, lines[i].OrderID = "", ""
	}
	return lines
}

// PlaceCheckoutAt is PlaceAt for a checkout (hybrid, dblock): every product's decrement is
// conditional on the version read (reads, one per line, any order), so a stale read writes
// nothing and answers ErrVersionConflict: read again and retry.
func (s *Store) PlaceCheckoutAt(ctx context.Context, req CheckoutRequest, reads []Product) (Checkout, error) {
	lines := req.lines()
	rs, err := readsOf(lines, reads)
	if err != nil {
		return Checkout{}, err
	}
	rows, now, err := s.decideCheckout(s.db.WithContext(ctx), req, lines, rs)
	if err != nil {
		return Checkout{}, err
	}
	err = s.writeCheckout(ctx, s.db, rows, func(tx *gorm.DB, i int) error {
		res := tx.Model(&productRow{}).Where("sku = ? AND version = ? AND stock >= ?", rs[i].SKU, rs[i].Version, lines[i].Quantity).
			Updates(sale(int64(lines[i].Quantity), Token{}))
		return changedOne(res, "products/"+rs[i].SKU)
	})
	return placedCheckout(rows, now, err)
}

// PlaceCheckoutFenced is PlaceFenced for a checkout (etcd, ZooKeeper): tokens holds the fencing
// token of each product's lock. A product a later holder wrote answers *FenceError.
func (s *Store) PlaceCheckoutFenced(ctx context.Context, req CheckoutRequest, tokens map[string]Token, beforeWrite func(context.Context) error) (Checkout, error) {
	lines, rs, rows, now, err := s.readAndDecide(ctx, req, beforeWrite)
	if err != nil {
		return Checkout{}, err
	}
	err = s.writeCheckout(ctx, s.db, rows, func(tx *gorm.DB, i int) error {
		token := tokens[rs[i].SKU]
		res := tx.Model(&productRow{}).Where("sku = ? AND version = ? AND "+string(token.Fence)+" <= ?", rs[i].SKU, rs[i].Version, token.Value).
			Updates(sale(int64(lines[i].Quantity), token))
		if res.Error == nil && res.RowsAffected != 1 {
			return fencedMiss(tx, rs[i].SKU, token)
		}
		return changedOne(res, "products/"+rs[i].SKU)
	})
	return placedCheckout(rows, now, err)
}

// PlaceCheckoutLocked is PlaceLocked for a checkout (pessimistic): one transaction takes every
// product's row (FOR UPDATE, NOWAIT unless wait is WaitForRow) in SKU order, then decides and
// writes; beforeWrite runs with every row held and read. A row another transaction holds answers
// ErrBusy, nothing written.
func (s *Store) PlaceCheckoutLocked(ctx context.Context, req CheckoutRequest, wait RowWait, beforeWrite func(context.Context) error) (Checkout, error) {
	lines := req.lines()
	var (
		rows []orderRow
		now  time.Time
	)
	err := withTx(ctx, s.lockPool(wait), func(tx *gorm.DB) error {
		reads := make([]Product, len(lines))
		for i, l := range lines {
			q := tx.Where("sku = ?", l.SKU)
			if s.dialect == MySQL {
				q = q.Clauses(rowLock(wait))
			}
			var row productRow
			if err := classify(q.Take(&row).Error); err != nil {
				return lineError(l.SKU, err)
			}
			reads[i] = row.product()
		}
		var err error
		if rows, now, err = s.decideCheckout(tx, req, lines, reads); err != nil {
			return err
		}
		if err := beforeWrite(ctx); err != nil {
			return err
		}
		for _, l := range lines {
			res := tx.Model(&productRow{}).Where("sku = ? AND stock >= ?", l.SKU, l.Quantity).Updates(sale(int64(l.Quantity), Token{}))
			if err := changedOne(res, "products/"+l.SKU); err != nil {
				return err
			}
		}
		return tx.Create(&rows).Error
	})
	return placedCheckout(rows, now, settleCheckout(err))
}

// PlaceCheckoutUnguarded is PlaceUnguarded for a checkout, as unsafe: it writes each product's
// stock as computed from its read, so that concurrent checkouts oversell and the checks catch it.
func (s *Store) PlaceCheckoutUnguarded(ctx context.Context, req CheckoutRequest, beforeWrite func(context.Context) error) (Checkout, error) {
	lines, rs, rows, now, err := s.readAndDecide(ctx, req, beforeWrite)
	if err != nil {
		return Checkout{}, err
	}
	err = s.writeCheckout(ctx, s.db, rows, func(tx *gorm.DB, i int) error {
		return tx.Model(&productRow{}).Where("sku = ?", rs[i].SKU).Updates(map[string]any{
			"stock":      rs[i].Stock - int64(lines[i].Quantity),
			"version":    gorm.Expr("version + 1"),
			"updated_at": time.Now().UTC(),
		}).Error
	})
	return placedCheckout(rows, now, err)
}

// writeCheckout runs sell for every line (its product's decrement), then inserts every row, in
// one transaction.
func (s *Store) writeCheckout(ctx context.Context, db *gorm.DB, rows []orderRow, sell func(tx *gorm.DB, i int) error) error {
	if planted.On(planted.PartialCheckout) {
		for i := range rows {
			err := withTx(ctx, db, func(tx *gorm.DB) error {
				if err := sell(tx, i); err != nil {
					return err
				}
				return tx.Create(&rows[i]).Error
			})
			if err != nil {
				return settleCheckout(err)
			}
		}
		return nil
	}
	return settleCheckout(withTx(ctx, db, func(tx *gorm.DB) error {
		for i := range rows {
			if err := sell(tx, i); err != nil {
				return err
			}
		}
		return tx.Create(&rows).Error
	}))
}

// placedCheckout is a section's answer: the checkout its rows make, unless its write failed.
func placedCheckout(rows []orderRow, now time.Time, err error) (Checkout, error) {
	if err != nil {
		return Checkout{}, err
	}
	return checkoutOf(rows, now), nil
}

// settleCheckout turns a failed write into its answer: a buyer or key taken by a writer outside
// the checkout between its decision and its insert wrote nothing; read again and retry.
func settleCheckout(err error) error {
	var dup *errDuplicate
	if errors.As(err, &dup) {
		return fmt.Errorf("checkout: %w", ErrVersionConflict)
	}
	return err
}

// readAndDecide reads every product of the checkout, decides its lines against those reads and
// runs beforeWrite: the checkout's lines and reads, in SKU order, and the rows to write.
func (s *Store) readAndDecide(ctx context.Context, req CheckoutRequest, beforeWrite func(context.Context) error) (
	lines []OrderRequest, reads []Product, rows []orderRow, now time.Time, err error) {
	lines = req.lines()
	if reads, err = s.readLines(ctx, lines); err != nil {
		return
	}
	if rows, now, err = s.decideCheckout(s.db.WithContext(ctx), req, lines, reads); err != nil {
		return
	}
	err = beforeWrite(ctx)
	return
}

// readLines reads every line's product, in the lines' order.
func (s *Store) readLines(ctx context.Context, lines []OrderRequest) ([]Product, error) {
	reads := make([]Product, len(lines))
	for i, l := range lines {
		p, err := s.Product(ctx, l.SKU)
		if err != nil {
			return nil, lineError(l.SKU, err)
		}
		reads[i] = p
	}
	return reads, nil
}

// readsOf puts reads in the lines' order.
func readsOf(lines []OrderRequest, reads []Product) ([]Product, error) {
	out := make([]Product, len(lines))
	for i, l := range lines {
		j := slices.IndexFunc(reads, func(p Product) bool { return p.SKU == l.SKU })
		if j < 0 {
			return nil, &CheckoutError{SKUs: []string{l.SKU}, Err: fmt.Errorf("product %s not read: %w", l.SKU, ErrNotFound)}
		}
		out[i] = reads[j]
	}
	return out, nil
}

// lineError names the line an error is about, when it is the product's own (not found).
func lineError(sku string, err error) error {
	if errors.Is(err, ErrNotFound) {
		return &CheckoutError{SKUs: []string{sku}, Err: err}
	}
	return err
}
