// Package lockstrategy holds the ways an order can be serialised against concurrent orders for
// the same product — database row locks, a lock table, and (on purpose) no lock at all — behind
// one interface, and the Registry that picks one per request. Every strategy ends in a
// conditional write in package stock: the lock keeps the hot row calm, the database keeps the
// invariant.
package lockstrategy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/flashsale/seckill/internal/stock"
)

// A Strategy places one order, serialising it against concurrent orders for the same product.
// It returns stock.ErrSoldOut, stock.ErrAlreadyPurchased, stock.ErrBusy, stock.ErrNotFound,
// stock.ErrInvalid, stock.ErrDuplicateRequest, stock.ErrUnavailable, or a wrapped internal error.
type Strategy interface {
	Name() string
	PlaceOrder(ctx context.Context, req stock.OrderRequest) (stock.Order, error)
}

// Hooks reach into the one critical section of every strategy, for tests that must hold a
// section open as a paused holder would (GC, a frozen VM, SIGSTOP) or act at its most delicate
// moment. The zero value, which production uses, does nothing.
type Hooks struct {
	// InSection runs inside the critical section, with the lock held and the product read (the
	// row locked, for pessimistic), right before the orders are written.
	InSection func(ctx context.Context, orders []stock.OrderRequest)
}

func (h Hooks) inSection(ctx context.Context, orders []stock.OrderRequest) {
	if h.InSection != nil {
		h.InSection(ctx, orders)
	}
}

// Registry holds the strategies of one service instance and places orders through them. It
// owns what every strategy shares: choosing the strategy, idempotent replays, outcome metrics.
type Registry struct {
	store         *stock.Store
	admission     *Admission // nil without Redis
	soldOut       *SoldOut   // nil: no local sold-out flags
	strategies    map[string]Strategy
	defaultName   string
	allowOverride bool
	unsafe        map[string]bool // registered but refused unless allowed
	allowUnsafe   bool
	log           *slog.Logger
	outcomes      *prometheus.CounterVec
	latency       *prometheus.HistogramVec
}

// RegistryConfig says which strategy is the default and what clients may choose.
type RegistryConfig struct {
	Default       string
	AllowOverride bool // the per-request strategy field is honoured
	AllowUnsafe   bool // the naive strategy may be used
	// Admission is the Redis admission state that product resets and audits must keep in step
	// with the database; nil when no strategy uses Redis.
	Admission *Admission
	// SoldOut, when set, answers orders for products known to be at zero stock from memory; the
	// Registry keeps it in step with product resets and closes it.
	SoldOut *SoldOut
}

// NewRegistry returns a Registry over store. Register strategies, then call Validate.
func NewRegistry(store *stock.Store, cfg RegistryConfig, log *slog.Logger, reg prometheus.Registerer) *Registry {
	r := &Registry{
		store:         store,
		admission:     cfg.Admission,
		soldOut:       cfg.SoldOut,
		strategies:    map[string]Strategy{},
		unsafe:        map[string]bool{},
		defaultName:   cfg.Default,
		allowOverride: cfg.AllowOverride,
		allowUnsafe:   cfg.AllowUnsafe,
		log:           log,
		outcomes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "seckill_orders_total",
			Help: "Order attempts by strategy and outcome (ok, replayed, sold_out, already_purchased, busy, invalid, not_found, idempotency_conflict, unavailable, timeout, canceled, error).",
		}, []string{"strategy", "outcome"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "seckill_order_duration_seconds",
			Help:    "Time to place an order (or fail to), by strategy.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14),
		}, []string{"strategy"}),
	}
	reg.MustRegister(r.outcomes, r.latency)
	return r
}

// Register adds a strategy. An unsafe one (naive) is refused per request unless AllowUnsafe.
func (r *Registry) Register(s Strategy, unsafe bool) {
	r.strategies[s.Name()] = s
	r.unsafe[s.Name()] = unsafe
}

// Close closes the strategies that hold resources (the etcd strategy's session and lease) and
// the sold-out flags' subscription.
func (r *Registry) Close() error {
	var errs []error
	if r.soldOut != nil {
		errs = append(errs, r.soldOut.Close())
	}
	for _, s := range r.strategies {
		if c, ok := s.(io.Closer); ok {
			errs = append(errs, c.Close())
		}
	}
	return errors.Join(errs...)
}

// Validate checks that the default strategy exists and may be used.
func (r *Registry) Validate() error {
	_, err := r.lookup(r.defaultName)
	return err
}

// Names lists the registered strategies, sorted.
func (r *Registry) Names() []string {
	names := make([]string, 0, len(r.strategies))
	for n := range r.strategies {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// Resolve returns the name of the strategy that will place an order that asked for requested
// (empty: the default), or an *stock.InvalidError.
func (r *Registry) Resolve(requested string) (string, error) {
	if requested == "" {
		return r.defaultName, nil
	}
	if !r.allowOverride && requested != r.defaultName {
		return "", &stock.InvalidError{Msg: fmt.Sprintf("strategy override is disabled on this server (it uses %s)", r.defaultName)}
	}
	s, err := r.lookup(requested)
	if err != nil {
		return "", err
	}
	return s.Name(), nil
}

func (r *Registry) lookup(name string) (Strategy, error) {
	s, ok := r.strategies[name]
	if !ok {
		return nil, &stock.InvalidError{Msg: fmt.Sprintf("unknown strategy %q (known: %v)", name, r.Names())}
	}
	if r.unsafe[name] && !r.allowUnsafe {
		return nil, &stock.InvalidError{Msg: fmt.Sprintf("strategy %s is unsafe and disabled (set SECKILL_ALLOW_UNSAFE=true to allow it)", name)}
	}
	return s, nil
}

// PlaceOrder places req through the strategy named in req.Strategy (see Resolve). With an
// Idempotency-Key it answers a replay with the original order (replayed is true) and refuses a
// different request under the same key with stock.ErrIdempotencyConflict.
func (r *Registry) PlaceOrder(ctx context.Context, req stock.OrderRequest) (order stock.Order, replayed bool, err error) {
	s, err := r.lookup(req.Strategy)
	if err != nil {
		return stock.Order{}, false, err
	}
	start := time.Now()
	defer func() {
		r.latency.WithLabelValues(s.Name()).Observe(time.Since(start).Seconds())
		outcome := Outcome(err)
		if replayed {
			outcome = "replayed"
		}
		r.outcomes.WithLabelValues(s.Name(), outcome).Inc()
	}()
	// The unsafe strategy shows what no lock does; no shortcut may hide it.
	flagged := r.soldOut != nil && !r.unsafe[s.Name()]
	if flagged {
		// A flag lets through every buyer who holds an order, so a replay still finds it.
		if err = r.soldOut.rejects(req); err != nil {
			return stock.Order{}, false, err
		}
	}
	order, err = s.PlaceOrder(ctx, req)
	if flagged && errors.Is(err, stock.ErrSoldOut) {
		r.soldOut.learn(req.SKU)
	}
	// A replay is looked up only when the order failed: its key or its buyer is taken (one buyer
	// holds one order per product), the stock is gone (the original may have taken the last
	// unit), or the request does not fit the product (a key reused with another body must hear
	// idempotency_conflict) — not before every order, which would be a database read per request
	// on the hottest path. One case is answered without it: a key reused with another body for a
	// product that the sold-out flag answers hears sold_out rather than idempotency_conflict
	// (both 409): telling them apart would cost the read the flag exists to save.
	if req.IdempotencyKey != "" && (errors.Is(err, stock.ErrDuplicateRequest) || errors.Is(err, stock.ErrAlreadyPurchased) ||
		errors.Is(err, stock.ErrSoldOut) || errors.Is(err, stock.ErrNotFound) || errors.Is(err, stock.ErrInvalid)) {
		if order, rerr := r.replay(ctx, req); !errors.Is(rerr, stock.ErrNotFound) {
			return order, rerr == nil, rerr
		}
	}
	return order, false, err
}

// replay finds the order already placed under req's Idempotency-Key.
func (r *Registry) replay(ctx context.Context, req stock.OrderRequest) (stock.Order, error) {
	prior, err := r.store.OrderByIdempotencyKey(ctx, req.IdempotencyKey)
	if err != nil {
		return stock.Order{}, err
	}
	if prior.RequestHash != req.Fingerprint() {
		return stock.Order{}, fmt.Errorf("key %q: %w", req.IdempotencyKey, stock.ErrIdempotencyConflict)
	}
	return prior, nil
}

// PutProduct starts a sale round (stock.Store.PutProduct) and keeps Redis admission in step: its
// state is deleted first — if Redis cannot be reached the reset does not happen, so no old
// counter outlives it — and rebuilt from the new round after.
func (r *Registry) PutProduct(ctx context.Context, spec stock.ProductSpec) (stock.Product, error) {
	if r.admission != nil {
		if err := r.admission.Invalidate(ctx, spec.SKU); err != nil {
			return stock.Product{}, err
		}
	}
	p, err := r.store.PutProduct(ctx, spec)
	if err != nil {
		return stock.Product{}, err
	}
	if r.soldOut != nil {
		r.soldOut.Reset(ctx, p.SKU)
	}
	if r.admission != nil {
		// A failure here leaves no counter, and the first order warms one from the database.
		if err := r.admission.Reconcile(ctx, p.SKU); err != nil {
			r.log.Warn("admission not warmed after reset; the first order will warm it", "sku", p.SKU, "err", err)
		}
	}
	return p, nil
}

// Audit is the consistency report of a product: the database's, plus the Redis admission
// counter when there is one.
type Audit struct {
	stock.Audit
	RedisStock *int64
}

// Audit reads the product's audit from the database and its admission counter from Redis. A
// Redis failure leaves RedisStock nil: the database alone decides consistency.
func (r *Registry) Audit(ctx context.Context, sku string) (Audit, error) {
	a, err := r.store.Audit(ctx, sku)
	if err != nil {
		return Audit{}, err
	}
	out := Audit{Audit: a}
	if r.admission != nil {
		if n, ok, err := r.admission.Stock(ctx, sku); err == nil && ok {
			out.RedisStock = &n
		}
	}
	return out, nil
}

// Reconcile rebuilds the product's Redis admission state from the database and returns the
// audit. Without Redis there is nothing to reconcile.
func (r *Registry) Reconcile(ctx context.Context, sku string) (Audit, error) {
	if r.admission != nil {
		if err := r.admission.Reconcile(ctx, sku); err != nil {
			return Audit{}, err
		}
	}
	return r.Audit(ctx, sku)
}

// Outcome names the result of an order attempt for metrics and reports.
func Outcome(err error) string {
	for _, o := range []struct {
		err  error
		name string
	}{
		{stock.ErrSoldOut, "sold_out"},
		{stock.ErrAlreadyPurchased, "already_purchased"},
		{stock.ErrBusy, "busy"},
		{stock.ErrInvalid, "invalid"},
		{stock.ErrNotFound, "not_found"},
		{stock.ErrIdempotencyConflict, "idempotency_conflict"},
		{stock.ErrUnavailable, "unavailable"},
		{context.DeadlineExceeded, "timeout"}, // the request's deadline passed while a backend was slow
		{context.Canceled, "canceled"},        // the client went away
	} {
		if errors.Is(err, o.err) {
			return o.name
		}
	}
	if err != nil {
		return "error"
	}
	return "ok"
}
