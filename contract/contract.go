// Package contract holds the wire types of the HTTP contract (internal/handler/openapi.yaml) that both
// sides read: the handler writes them, the load tool — a black box of the service — decodes
// them. One type per body, so that a field renamed on one side is renamed on the other.
package contract

// Audit is the body of GET and POST /api/v1/products/{sku}/audit and .../reconcile: a product's
// consistency report, the database's counts and, when Redis answered, its admission state.
type Audit struct {
	SKU             string `json:"sku"`
	InitialStock    int64  `json:"initial_stock"`
	Stock           int64  `json:"stock"`
	OrderedQuantity int64  `json:"ordered_quantity"`
	Orders          int64  `json:"orders"`
	DistinctBuyers  int64  `json:"distinct_buyers"`
	Oversold        int64  `json:"oversold"`
	Consistent      bool   `json:"consistent"`
	// Orders by state: the pending ones are active too (in the counts above); cancelled and
	// expired ones hold no units.
	Pending   int64 `json:"pending"`
	Cancelled int64 `json:"cancelled"`
	Expired   int64 `json:"expired"`
	// The Redis admission state, absent when Redis does not answer: its counter, the reservations
	// in flight and their units, and the units the database has that admission holds back.
	RedisStock        *int64 `json:"redis_stock,omitempty"`
	RedisReservations *int64 `json:"redis_reservations,omitempty"`
	RedisReserved     *int64 `json:"redis_reserved,omitempty"`
	HeldBack          *int64 `json:"held_back,omitempty"`
	// Orders the queued strategy accepted and has not yet written, absent without an order
	// queue: active orders plus these never exceed the initial stock.
	Queued *int64 `json:"queued,omitempty"`
}

// Locks is the body of GET /api/v1/products/{sku}/locks: where the instance's strategies lock
// the product, and the product's admission keys in Redis. It names what an operator (or a fault
// injector, such as the load tool's -fault lock-loss) must look at; the names come from the code
// that takes the locks, so they cannot drift from it.
type Locks struct {
	SKU string `json:"sku"`
	// Locks has one entry per strategy the instance offers that takes a named lock; pessimistic
	// (the product's row) and naive (no lock) have none.
	Locks     []Lock        `json:"locks"`
	Admission AdmissionKeys `json:"admission"`
}

// Lock is where one strategy locks a product.
type Lock struct {
	Strategy string `json:"strategy"`
	// Backend is redis, etcd, zookeeper or database.
	Backend string `json:"backend"`
	// Key is, by backend: the redsync key (redis); the mutex prefix, under which each waiter puts
	// <prefix>/<lease id> and the lowest create revision holds (etcd); the lock directory, whose
	// lowest sequential node holds (zookeeper); the lock_name of the row in distributed_locks
	// (database).
	Key string `json:"key"`
}

// AdmissionKeys are a product's Redis admission keys.
type AdmissionKeys struct {
	Stock    string `json:"stock"`    // the counter of units admission still offers
	Buyers   string `json:"buyers"`   // the set of buyers admitted
	Reserved string `json:"reserved"` // the reservations of orders in their sections, not yet settled
	Queued   string `json:"queued"`   // the reservations handed over to the order queue (queued strategy)
}
