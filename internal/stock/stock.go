// Package stock is the domain of a flash sale and its source of truth: products, orders, the
// errors every strategy speaks, and the SQL store (gorm over MySQL/MariaDB or SQLite) whose
// conditional updates keep the invariant, whatever the locks in front of it do:
//
//	stock >= 0  and  stock + SUM(quantity of active orders) == initial_stock
//
// All SQL of the project lives here.
package stock

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/flashsale/seckill/internal/planted"
)

// Domain errors. Strategies and the store wrap them with context (%w); the handler maps each to
// one HTTP status and code.
var (
	// ErrNotFound means the product or order does not exist.
	ErrNotFound = errors.New("not found")
	// ErrSoldOut means there is not enough stock left for the order.
	ErrSoldOut = errors.New("sold out")
	// ErrAlreadyPurchased means the user already holds an order for the product.
	ErrAlreadyPurchased = errors.New("already purchased")
	// ErrBusy means a lock or row could not be had within the wait budget; the client may retry.
	ErrBusy = errors.New("busy")
	// ErrUnavailable means a backend the request needs cannot be reached.
	ErrUnavailable = errors.New("backend unavailable")
	// ErrInvalid means the request itself is wrong; see InvalidError for the message.
	ErrInvalid = errors.New("invalid argument")
	// ErrIdempotencyConflict means an Idempotency-Key was reused with a different request.
	ErrIdempotencyConflict = errors.New("idempotency key reused with a different request")
	// ErrDuplicateRequest means another order already carries this Idempotency-Key: the caller
	// answers that order instead of placing a second one.
	ErrDuplicateRequest = errors.New("idempotency key already used")
	// ErrVersionConflict means a conditional update matched no row because another writer changed
	// the product first. Optimistic strategies retry on it; nothing was written.
	ErrVersionConflict = errors.New("product changed concurrently")
	// ErrOutcomeUnknown marks a failed write whose COMMIT was sent and its answer lost: only the
	// database can tell later whether the orders exist.
	ErrOutcomeUnknown = errors.New("outcome unknown")
	// ErrFencedOut means a write carried a fencing token older than the last one written: its
	// lock had passed to another holder. Nothing was written.
	ErrFencedOut = errors.New("fenced out by a newer lock holder")
	// ErrSaleNotStarted means the product's sale window has not opened; see SaleNotStartedError.
	ErrSaleNotStarted = errors.New("sale not started")
	// ErrSaleEnded means the product's sale window has closed.
	ErrSaleEnded = errors.New("sale ended")
	// ErrOrderExpired means the order's payment deadline passed: its units are back on sale.
	ErrOrderExpired = errors.New("order expired")
	// ErrOrderCancelled means the order was cancelled: it cannot be paid.
	ErrOrderCancelled = errors.New("order cancelled")
)

// codes name the domain errors in the vocabulary of the API, in the order they are tried.
var codes = []struct {
	err  error
	code string
}{
	{ErrInvalid, "invalid_argument"},
	{ErrNotFound, "not_found"},
	{ErrSoldOut, "sold_out"},
	{ErrAlreadyPurchased, "already_purchased"},
	{ErrIdempotencyConflict, "idempotency_conflict"},
	{ErrBusy, "busy"},
	// Another request with the same Idempotency-Key has not settled yet: retry shortly.
	{ErrDuplicateRequest, "busy"},
	{ErrUnavailable, "unavailable"},
	{ErrSaleNotStarted, "sale_not_started"},
	{ErrSaleEnded, "sale_ended"},
	{ErrOrderExpired, "order_expired"},
	{ErrOrderCancelled, "order_cancelled"},
	{context.Canceled, "canceled"},            // the client went away
	{context.DeadlineExceeded, "unavailable"}, // a backend too slow to answer in time
}

// codedError is an error that names its own code.
type codedError interface {
	error
	Code() string
}

// Code names err in the project's one vocabulary (HTTP error code, metric outcome, log code).
// An error with its own Code() keeps it; nil is "ok"; anything unknown is "internal".
func Code(err error) string {
	if err == nil {
		return "ok"
	}
	// AsType, not As: this runs on every answer, and As's target would escape to the heap.
	if coded, ok := errors.AsType[codedError](err); ok {
		return coded.Code()
	}
	for _, c := range codes {
		if errors.Is(err, c.err) {
			return c.code
		}
	}
	return "internal"
}

// InvalidError is an ErrInvalid whose message is safe and useful to show to the client.
type InvalidError struct{ Msg string }

func (e *InvalidError) Error() string { return e.Msg }

// Unwrap makes errors.Is(err, ErrInvalid) true.
func (e *InvalidError) Unwrap() error { return ErrInvalid }

// SoldOutError is ErrSoldOut with what the database held when it said so.
type SoldOutError struct {
	SKU   string
	Left  int64
	Asked int
}

func (e *SoldOutError) Error() string {
	return fmt.Sprintf("product %s has %d left, %d asked: sold out", e.SKU, e.Left, e.Asked)
}

// Unwrap makes errors.Is(err, ErrSoldOut) true.
func (e *SoldOutError) Unwrap() error { return ErrSoldOut }

// SaleNotStartedError is ErrSaleNotStarted with when the sale opens.
type SaleNotStartedError struct {
	SKU    string
	Starts time.Time
}

func (e *SaleNotStartedError) Error() string {
	return fmt.Sprintf("product %s goes on sale at %s: sale not started", e.SKU, e.Starts.Format(time.RFC3339))
}

// Unwrap makes errors.Is(err, ErrSaleNotStarted) true.
func (e *SaleNotStartedError) Unwrap() error { return ErrSaleNotStarted }

// Fence names the fencing tokens of one lock service. Each has its own column: the services'
// tokens are different sequences (an etcd revision, a ZooKeeper zxid), never compared.
type Fence string

// The lock services whose tokens fence the product row.
const (
	EtcdFence      Fence = "fence"    // the revision at which the etcd mutex was granted
	ZooKeeperFence Fence = "zk_fence" // the creation zxid of the ZooKeeper lock node
)

// Token is a fencing token of one kind.
type Token struct {
	Fence Fence
	Value int64
}

// FenceError is ErrFencedOut with the token that was refused and the fence that refused it.
type FenceError struct {
	SKU   string
	Token Token
	Fence int64 // the last token of Token's kind written
}

func (e *FenceError) Error() string {
	return fmt.Sprintf("product %s: %s token %d is older than the fence %d: fenced out", e.SKU, e.Token.Fence, e.Token.Value, e.Fence)
}

// Unwrap makes errors.Is(err, ErrFencedOut) true.
func (e *FenceError) Unwrap() error { return ErrFencedOut }

// Product is one SKU on sale. Version increases with every sale and every reset.
type Product struct {
	SKU            string
	Name           string
	InitialStock   int64
	Stock          int64
	Version        int64
	MaxPerOrder    int
	Fence          int64         // fencing token of the last write under the etcd lock; 0 after a reset
	ZKFence        int64         // the same under the ZooKeeper lock
	Window         Window        // when orders are taken
	PaymentTimeout time.Duration // how long a new order waits for payment; 0: confirmed at once
	WaitingRoom    *WaitingRoom  // nil: none; its buyers need a pass (package frontdoor)
}

// WaitingRoom is a product's waiting room: buyers let in at AdmitPerS for the whole deployment,
// each with a pass good for PassTTL (whole seconds); frontdoor.Config.Validate checks the bounds.
type WaitingRoom struct {
	AdmitPerS int
	PassTTL   time.Duration
}

// Sold is how many units are held by active orders in the current sale round.
func (p Product) Sold() int64 { return p.InitialStock - p.Stock }

// Window is a product's sale window; a zero end is open.
type Window struct {
	Starts, Ends time.Time // zero when unset
}

// Check reports whether an order may be taken at now: nil, a *SaleNotStartedError, or
// ErrSaleEnded (the window is [Starts, Ends): the start is on sale, the end is not).
func (w Window) Check(sku string, now time.Time) error {
	switch {
	case !w.Starts.IsZero() && now.Before(w.Starts):
		return &SaleNotStartedError{SKU: sku, Starts: w.Starts}
	case !w.Ends.IsZero() && !now.Before(w.Ends):
		return fmt.Errorf("product %s: sale ended at %s: %w", sku, w.Ends.Format(time.RFC3339), ErrSaleEnded)
	}
	return nil
}

// OrderRequest is one client's attempt to buy Quantity units of SKU.
type OrderRequest struct {
	SKU            string
	UserID         string
	Quantity       int
	Strategy       string // the strategy that places it, recorded on the order
	IdempotencyKey string // empty when the client sent none
	OrderID        string // given before it is written (queued answers 202 with it), or empty: a new one
	// Reservation is the admission reservation the order holds (hybrid's Redis admission), if
	// any. It is not part of what the request asks for.
	Reservation Reservation
}

// Reservation is units set aside for an order until it reaches the database, while the instance
// that admitted it lives; then they go back on sale unless the database shows the order.
type Reservation struct {
	ID string
}

// Fingerprint identifies what the request asks for, so that a replay with the same
// Idempotency-Key can be told apart from a different request that reuses the key.
func (r OrderRequest) Fingerprint() string {
	user := r.UserID
	if planted.On(planted.KeyAcrossUsers) {
		user = ""
	}
	sum := sha256.Sum256([]byte(r.SKU + "\x00" + user + "\x00" + strconv.Itoa(r.Quantity) + "\x00" + r.Strategy))
	return hex.EncodeToString(sum[:])
}

// Status is where an order is in its life: pending (waiting for payment, holding its units
// until ExpiresAt) -> confirmed; pending or confirmed -> cancelled; pending -> expired.
type Status string

// The statuses of an order. Pending and confirmed orders are active: they hold their units.
// Queued and rejected (accepted, not yet or never written) are the queued strategy's: no row.
const (
	Pending   Status = "pending"
	Confirmed Status = "confirmed"
	Cancelled Status = "cancelled"
	Expired   Status = "expired"
	Queued    Status = "queued"
	Rejected  Status = "rejected"
)

// Active reports whether an order in this status holds its units.
func (s Status) Active() bool { return s == Pending || s == Confirmed }

// Order is an order: one row in the orders table — or, before its row exists, an order of the
// queued strategy, queued or rejected.
type Order struct {
	OrderID        string
	SKU            string
	UserID         string
	Quantity       int
	Strategy       string
	IdempotencyKey string
	RequestHash    string
	CreatedAt      time.Time
	Status         Status
	ExpiresAt      time.Time // set while pending: the payment deadline
	Reason         string    // why a rejected order was (an error code: sold_out, ...)
	CheckoutID     string    // the checkout it is a line of; empty for a single order
}

// Audit is the consistency report of one product, read in one statement. The order counts are
// of active orders; Pending, Cancelled and Expired count orders in those states.
type Audit struct {
	SKU             string
	InitialStock    int64
	Stock           int64
	OrderedQuantity int64
	Orders          int64
	DistinctBuyers  int64
	Pending         int64
	Cancelled       int64
	Expired         int64
}

// Oversold is how many units are held by active orders beyond the initial stock.
func (a Audit) Oversold() int64 { return max(0, a.OrderedQuantity-a.InitialStock) }

// Consistent reports whether the invariant holds: no negative stock, every unit either in stock
// or in exactly one active order, and one active order per buyer.
func (a Audit) Consistent() bool {
	return a.Stock >= 0 && a.Stock+a.OrderedQuantity == a.InitialStock && a.Orders == a.DistinctBuyers
}
