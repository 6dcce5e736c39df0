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
}

// Order states of the queued strategy beside the lifecycle's.
const (
	StatusQueued   = "queued"   // accepted (202), not yet written
	StatusRejected = "rejected" // a writer refused it, its unit back on sale
)
