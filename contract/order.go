package contract

import "time"

// Order is an order body: the 201 and 202 of POST /api/v1/products/{sku}/orders and the answer
// of GET /api/v1/orders/{order_id}. Status is pending, confirmed, cancelled or expired — and,
// under the queued strategy, queued until a writer takes it, then placed (pending or confirmed)
// or rejected with Reason, an error code of the contract.
type Order struct {
	OrderID   string     `json:"order_id"`
	SKU       string     `json:"sku"`
	UserID    string     `json:"user_id"`
	Quantity  int        `json:"quantity"`
	Strategy  string     `json:"strategy"`
	Status    string     `json:"status"`
	Reason    string     `json:"reason,omitempty"`
	ExpiresAt *time.Time `json:"expires_at,omitempty"`
	CreatedAt time.Time  `json:"created_at"`
	// CheckoutID names the checkout the order is a line of; absent for a single order.
	CheckoutID string `json:"checkout_id,omitempty"`
}

// Order states of the queued strategy beside the lifecycle's.
const (
	StatusQueued   = "queued"   // accepted (202), not yet written
	StatusRejected = "rejected" // a writer refused it, its unit back on sale
)

// Checkout is a checkout body — several products in one order, all or nothing: the 201 (and,
// under the queued strategy, 202) of POST /api/v1/checkouts and the answer of
// GET /api/v1/checkouts/{checkout_id} and of its pay and cancel. Every line shares its status.
type Checkout struct {
	CheckoutID string         `json:"checkout_id"`
	UserID     string         `json:"user_id"`
	Strategy   string         `json:"strategy"`
	Status     string         `json:"status"`
	Reason     string         `json:"reason,omitempty"`
	ExpiresAt  *time.Time     `json:"expires_at,omitempty"`
	CreatedAt  time.Time      `json:"created_at"`
	Lines      []CheckoutLine `json:"lines"`
}

// CheckoutLine is one line of a checkout: an order of its own, readable at
// GET /api/v1/orders/{order_id}.
type CheckoutLine struct {
	OrderID  string `json:"order_id"`
	SKU      string `json:"sku"`
	Quantity int    `json:"quantity"`
}
