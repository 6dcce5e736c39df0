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
	Lines          []OrderRequest // one per product (SKU, quantity, and an order id given or empty), distinct SKUs
}

// Checkout is a placed checkout: one order per line, in SKU order, all in one status — or, with
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

// Admitted are the request's lines as admission judges them: in SKU order, each carrying the
// checkout's buyer, strategy and Idempotency-Key (on admission only — the rows carry the key on
// one line), so that a repeat of a checkout in flight hears it is in flight.
func (r CheckoutRequest) Admitted() []OrderRequest {
	lines := SKUOrder(r.Lines)
	for i := range lines {
		lines[i].UserID, lines[i].Strategy, lines[i].IdempotencyKey = r.UserID, r.Strategy, r.IdempotencyKey
	}
	return lines
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

// lines are the request's lines in SKU order, each carrying the checkout's buyer and strategy,
// and its own order id if it was given one.
func (r CheckoutRequest) lines() []OrderRequest {
	lines := SKUOrder(r.Lines)
	for i := range lines {
		lines[i].UserID, lines[i].Strategy, lines[i].IdempotencyKey = r.UserID, r.Strategy, ""
	}
	return lines
}

// CheckoutPlaced is the answer to one checkout of a batch: the checkout, or why it was refused.
type CheckoutPlaced struct {
	Checkout Checkout
	Err      error
}

// PlaceCheckoutsAt is PlaceAt for a batch of checkouts of the same products (hybrid, dblock):
// every product's decrement — the batch's units of it — is conditional on the version read
// (reads, one per product, any order), so a stale read writes nothing and answers
// ErrVersionConflict: read again and retry.
func (s *Store) PlaceCheckoutsAt(ctx context.Context, reqs []CheckoutRequest, reads []Product) ([]CheckoutPlaced, error) {
	b, err := s.decideCheckouts(s.db.WithContext(ctx), reqs, reads)
	if err != nil || len(b.rows) == 0 {
		return b.out, err
	}
	err = s.writeCheckouts(ctx, b, func(tx *gorm.DB, j int, units int64) error {
		res := tx.Model(&productRow{}).Where("sku = ? AND version = ? AND stock >= ?", b.reads[j].SKU, b.reads[j].Version, units).
			Updates(sale(units, Token{}))
		return changedOne(res, "products/"+b.reads[j].SKU)
	})
	return b.settle(err)
}

// PlaceCheckoutsFenced is PlaceFenced for a batch of checkouts of the same products (etcd,
// ZooKeeper): tokens holds the fencing token of each product's lock. A product a later holder
// wrote answers *FenceError.
func (s *Store) PlaceCheckoutsFenced(ctx context.Context, reqs []CheckoutRequest, tokens map[string]Token, beforeWrite func(context.Context) error) ([]CheckoutPlaced, error) {
	b, err := s.readAndDecide(ctx, reqs, beforeWrite)
	if err != nil || len(b.rows) == 0 {
		return b.out, err
	}
	err = s.writeCheckouts(ctx, b, func(tx *gorm.DB, j int, units int64) error {
		sku, token := b.reads[j].SKU, tokens[b.reads[j].SKU]
		res := tx.Model(&productRow{}).Where("sku = ? AND version = ? AND "+string(token.Fence)+" <= ?", sku, b.reads[j].Version, token.Value).
			Updates(sale(units, token))
		if res.Error == nil && res.RowsAffected != 1 {
			return fencedMiss(tx, sku, token)
		}
		return changedOne(res, "products/"+sku)
	})
	return b.settle(err)
}

// PlaceCheckoutsLocked is PlaceLocked for a batch of checkouts of the same products
// (pessimistic): one transaction takes every product's row (FOR UPDATE, NOWAIT unless wait is
// WaitForRow) in SKU order, then decides and writes; beforeWrite runs with every row held and
// read. A row another transaction holds answers ErrBusy, nothing written.
func (s *Store) PlaceCheckoutsLocked(ctx context.Context, reqs []CheckoutRequest, wait RowWait, beforeWrite func(context.Context) error) ([]CheckoutPlaced, error) {
	if len(reqs) == 0 {
		return nil, nil
	}
	var b checkoutBatch
	err := s.withTx(ctx, s.lockPool(wait), func(tx *gorm.DB) error {
		lines := reqs[0].lines()
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
		if b, err = s.decideCheckouts(tx, reqs, reads); err != nil || len(b.rows) == 0 {
			return err
		}
		if err := beforeWrite(ctx); err != nil {
			return err
		}
		for j, units := range b.units {
			res := tx.Model(&productRow{}).Where("sku = ? AND stock >= ?", b.reads[j].SKU, units).Updates(sale(units, Token{}))
			if err := changedOne(res, "products/"+b.reads[j].SKU); err != nil {
				return err
			}
		}
		return tx.Create(&b.rows).Error
	})
	return b.settle(settleCheckout(err))
}

// PlaceCheckoutsUnguarded is PlaceUnguarded for a batch of checkouts, as unsafe: it writes each
// product's stock as computed from its read, so that concurrent checkouts oversell and the
// checks catch it.
func (s *Store) PlaceCheckoutsUnguarded(ctx context.Context, reqs []CheckoutRequest, beforeWrite func(context.Context) error) ([]CheckoutPlaced, error) {
	b, err := s.readAndDecide(ctx, reqs, beforeWrite)
	if err != nil || len(b.rows) == 0 {
		return b.out, err
	}
	err = s.writeCheckouts(ctx, b, func(tx *gorm.DB, j int, units int64) error {
		return tx.Model(&productRow{}).Where("sku = ?", b.reads[j].SKU).Updates(map[string]any{
			"stock":      b.reads[j].Stock - units,
			"version":    gorm.Expr("version + 1"),
			"updated_at": time.Now().UTC(),
		}).Error
	})
	return b.settle(err)
}

// writeCheckouts runs sell for every product of the batch (its decrement by the batch's units),
// then inserts every row, in one transaction.
func (s *Store) writeCheckouts(ctx context.Context, b checkoutBatch, sell func(tx *gorm.DB, j int, units int64) error) error {
	if planted.On(planted.PartialCheckout) {
		for _, row := range b.rows {
			j := slices.IndexFunc(b.reads, func(p Product) bool { return p.SKU == row.SKU })
			err := s.withTx(ctx, s.db, func(tx *gorm.DB) error {
				if err := sell(tx, j, int64(row.Quantity)); err != nil {
					return err
				}
				return tx.Create(&row).Error
			})
			if err != nil {
				return settleCheckout(err)
			}
		}
		return nil
	}
	return settleCheckout(s.withTx(ctx, s.db, func(tx *gorm.DB) error {
		for j, units := range b.units {
			if err := sell(tx, j, units); err != nil {
				return err
			}
		}
		return tx.Create(&b.rows).Error
	}))
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

// readAndDecide reads every product of the batch, decides its checkouts against those reads and
// runs beforeWrite.
func (s *Store) readAndDecide(ctx context.Context, reqs []CheckoutRequest, beforeWrite func(context.Context) error) (checkoutBatch, error) {
	if len(reqs) == 0 {
		return checkoutBatch{}, nil
	}
	lines := reqs[0].lines()
	reads := make([]Product, len(lines))
	for i, l := range lines {
		p, err := s.Product(ctx, l.SKU)
		if err != nil {
			return checkoutBatch{}, lineError(l.SKU, err)
		}
		reads[i] = p
	}
	b, err := s.decideCheckouts(s.db.WithContext(ctx), reqs, reads)
	if err != nil || len(b.rows) == 0 {
		return b, err
	}
	return b, beforeWrite(ctx)
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
