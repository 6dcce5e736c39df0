// Package service is what surrounds the strategies of one seckill instance: the strategy of a
// request, idempotent replays, sold-out flags, sale rounds, the audit and readiness. Package app,
// the one composition root, builds it with New for cmd/api, the tests and the lab alike.
package service

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/flashsale/seckill/internal/admission"
	"github.com/flashsale/seckill/internal/lockstrategy"
	"github.com/flashsale/seckill/internal/stock"
)

// Service places orders and runs sale rounds for one instance. It is safe for concurrent use.
type Service struct {
	store         *stock.Store
	admission     *admission.Ledger
	database      *database  // whether this instance's database serves: its heartbeat and orders wait for it
	soldOut       *SoldOut   // nil: no local sold-out flags
	queued        orderQueue // nil: no order queue, the queued strategy is not offered
	strategies    map[string]lockstrategy.Strategy
	unsafe        map[string]bool // registered but refused unless allowed
	defaultName   string
	allowOverride bool
	allowUnsafe   bool
	inFlightWait  time.Duration // how long a repeat waits for its original in flight
	checks        []Check
	closers       []io.Closer
	catalog       *catalog
	passes        Passes
	stop          context.CancelFunc // ends the background loops: the sweeper, the order lifecycle
	background    sync.WaitGroup
	log           *slog.Logger
	transitions   *prometheus.CounterVec
	busy          *prometheus.CounterVec
	restocked     prometheus.Counter

	// Every order counts itself in these, by its labels.
	orderOutcomes    *curried[prometheus.Counter]
	checkoutOutcomes *curried[prometheus.Counter]
	orderLatency     *curried[prometheus.Observer]
}

// orderQueue is the queued strategy (package queued) as the service reads it: the orders it
// accepted and has not yet written, followed by their records.
type orderQueue interface {
	lockstrategy.Strategy
	Read(ctx context.Context, ref stock.Ref) (stock.Checkout, error)
	Wait(ctx context.Context, ref stock.Ref, wait time.Duration, recorded bool) (stock.Checkout, error)
	Replay(ctx context.Context, req stock.CheckoutRequest) (stock.Checkout, error)
	Backlog(ctx context.Context, sku string) (int64, error)
}

// Check is one backend that readiness asks.
type Check struct {
	Name string
	Ping func(ctx context.Context) error
}

// register adds a strategy. An unsafe one (naive, unguarded-*) is refused per request unless allowed.
func (s *Service) register(st lockstrategy.Strategy, unsafe bool) {
	s.strategies[st.Name()] = st
	s.unsafe[st.Name()] = unsafe
	if c, ok := st.(io.Closer); ok {
		s.closers = append(s.closers, c)
	}
}

// Close stops what the instance runs in the background — the etcd session (its lease revoked),
// the Redis subscriptions — but not the backends it was given.
func (s *Service) Close() error {
	s.stop()
	s.background.Wait()
	var errs []error
	if s.soldOut != nil {
		errs = append(errs, s.soldOut.Close())
	}
	for _, c := range s.closers {
		errs = append(errs, c.Close())
	}
	return errors.Join(errs...)
}

// Names lists the strategies this instance offers, sorted.
func (s *Service) Names() []string { return slices.Sorted(maps.Keys(s.strategies)) }

// Checks are the backends readiness asks: the database, each Redis, etcd.
func (s *Service) Checks() []Check { return s.checks }

// Resolve returns the name of the strategy that will place an order that asked for requested
// (empty: the default), or an *stock.InvalidError.
func (s *Service) Resolve(requested string) (string, error) {
	if requested == "" {
		return s.defaultName, nil
	}
	if !s.allowOverride && requested != s.defaultName {
		return "", &stock.InvalidError{Msg: fmt.Sprintf("strategy override is disabled on this server (it uses %s)", s.defaultName)}
	}
	if _, err := s.lookup(requested); err != nil {
		return "", err
	}
	return requested, nil
}

func (s *Service) lookup(name string) (lockstrategy.Strategy, error) {
	st, ok := s.strategies[name]
	if !ok {
		return nil, &stock.InvalidError{Msg: fmt.Sprintf("unknown strategy %q (known: %v)", name, s.Names())}
	}
	if s.unsafe[name] && !s.allowUnsafe {
		return nil, &stock.InvalidError{Msg: fmt.Sprintf("strategy %s is unsafe and disabled (set SECKILL_ALLOW_UNSAFE=true to allow it)", name)}
	}
	return st, nil
}

// PlaceOrder places one order: the request of one line (Place), answered as an order.
func (s *Service) PlaceOrder(ctx context.Context, req stock.OrderRequest) (order stock.Order, replayed bool, err error) {
	co, replayed, err := s.Place(ctx, stock.OrderOf(req))
	if err != nil {
		return stock.Order{}, false, err
	}
	return co.Lines[0], replayed, nil
}

// Place places req (an order or a checkout, every line or none) through the strategy it names,
// answering from memory where it can (sale window, sold-out flags). Under an Idempotency-Key a
// replay gets the original (replayed true), another body stock.ErrIdempotencyConflict, and one
// whose original is in flight waits for it.
func (s *Service) Place(ctx context.Context, req stock.CheckoutRequest) (co stock.Checkout, replayed bool, err error) {
	st, err := s.lookup(req.Strategy)
	if err != nil {
		return stock.Checkout{}, false, err
	}
	start := time.Now()
	defer func() {
		err = req.Answer(err)
		outcome := stock.Code(err)
		if replayed {
			outcome = "replayed"
		}
		if req.Order {
			s.orderLatency.get(st.Name(), "").Observe(time.Since(start).Seconds())
			s.orderOutcomes.get(st.Name(), outcome).Inc()
		} else {
			s.checkoutOutcomes.get(st.Name(), outcome).Inc()
		}
		s.countBusy(ctx, st.Name(), err)
	}()
	if err = req.Validate(); err != nil {
		return stock.Checkout{}, false, err
	}
	// Outside its window a line is answered from memory (catalog), yet a retry still finds a
	// request placed in time. So is a line without its pass: the door is before every strategy.
	refused := make([]error, len(req.Lines))
	for i, line := range req.Lines {
		switch room, err := s.catalog.check(ctx, line.SKU, start); {
		case err != nil || !room:
			refused[i] = err
		case s.passes == nil:
			// No way to judge a pass refuses, never lets through: the pass keeps the room's rate.
			refused[i] = fmt.Errorf("product %s has a waiting room and no pass can be judged here: %w", line.SKU, stock.ErrUnavailable)
		default:
			refused[i] = s.passes.CheckPass(ctx, req.Pass, req.UserID, line.SKU)
		}
	}
	if err = stock.Refusal(req.Lines, refused); err != nil {
		if errors.Is(err, stock.ErrSaleEnded) && req.IdempotencyKey != "" {
			if co, rerr := s.replay(ctx, req); !errors.Is(rerr, stock.ErrNotFound) {
				return co, rerr == nil, rerr
			}
		}
		return stock.Checkout{}, false, err
	}
	// The unsafe strategy shows what no lock does; no shortcut may hide it.
	flagged := s.soldOut != nil && !s.unsafe[st.Name()]
	if flagged {
		// A flag lets through every buyer who holds an order, so a replay still finds it.
		for i, line := range req.Lines {
			line.UserID = req.UserID
			refused[i] = s.soldOut.rejects(line)
		}
		if err = stock.Refusal(req.Lines, refused); err != nil {
			return stock.Checkout{}, false, err
		}
	}
	// No reservation for a request this instance cannot write (database.beat).
	if err = s.database.refuses(); err != nil {
		return stock.Checkout{}, false, err
	}
	for {
		co, err = st.Place(ctx, req)
		var refusedLines *stock.CheckoutError
		if flagged && errors.Is(err, stock.ErrSoldOut) && errors.As(err, &refusedLines) {
			for _, sku := range refusedLines.SKUs {
				s.soldOut.learn(sku)
			}
		}
		// A replay is looked up only after a failure a repeat may cause: not a database read per
		// request. So a key reused with another body for a flagged product hears sold_out, not
		// idempotency_conflict (both 409): telling them apart would cost the read the flag saves.
		if req.IdempotencyKey != "" && mayRepeat(err) {
			if co, rerr := s.replay(ctx, req); !errors.Is(rerr, stock.ErrNotFound) {
				return co, rerr == nil, rerr
			}
		}
		if !errors.Is(err, stock.ErrDuplicateRequest) {
			return co, false, err
		}
		if err = s.awaitInFlight(ctx, start, err); err != nil {
			return stock.Checkout{}, false, err
		}
	}
}

// mayRepeat reports whether a request that failed with err may repeat one placed under its key:
// key or buyer taken, stock gone (perhaps to the original), or a body unfit (a reused key).
func mayRepeat(err error) bool {
	return errors.Is(err, stock.ErrDuplicateRequest) || errors.Is(err, stock.ErrAlreadyPurchased) ||
		errors.Is(err, stock.ErrSoldOut) || errors.Is(err, stock.ErrNotFound) || errors.Is(err, stock.ErrInvalid)
}

// awaitInFlight waits a moment (nil) before a request whose key an original in flight holds
// (err) asks again; past a lock's wait since start, busy: never already_purchased, nor a second order.
func (s *Service) awaitInFlight(ctx context.Context, start time.Time, err error) error {
	if time.Since(start) > s.inFlightWait {
		// The request as a whole waits, not a line of it: the answer names none.
		return stock.Busy(stock.BusyInFlight, fmt.Errorf("waited %s for the request in flight (%v): %w", s.inFlightWait, err, stock.ErrDuplicateRequest))
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(10*time.Millisecond + rand.N(20*time.Millisecond)):
		return nil
	}
}

// countBusy counts and logs (debug) a busy answer by its cause: a busy buyer comes back while
// units may be on sale, so an operator must be able to name each cause.
func (s *Service) countBusy(ctx context.Context, strategy string, err error) {
	if stock.Code(err) != "busy" {
		return
	}
	cause := stock.CauseOfBusy(err)
	s.busy.WithLabelValues(strategy, string(cause)).Inc()
	s.log.LogAttrs(ctx, slog.LevelDebug, "busy", slog.String("strategy", strategy), slog.String("cause", string(cause)), slog.Any("err", err))
}

// replay finds the request placed, or for the queued strategy accepted, under req's
// Idempotency-Key. A key used by the other kind of request or for other lines is a conflict.
func (s *Service) replay(ctx context.Context, req stock.CheckoutRequest) (stock.Checkout, error) {
	prior, err := s.store.OrderByIdempotencyKey(ctx, req.IdempotencyKey)
	if errors.Is(err, stock.ErrNotFound) && s.queued != nil && req.Strategy == s.queued.Name() {
		return s.queued.Replay(ctx, req)
	}
	if err != nil {
		return stock.Checkout{}, err
	}
	if (prior.CheckoutID == "") != req.Order || prior.RequestHash != req.Fingerprint() {
		return stock.Checkout{}, fmt.Errorf("key %q: %w", req.IdempotencyKey, stock.ErrIdempotencyConflict)
	}
	if req.Order {
		return stock.Single(prior), nil
	}
	return s.store.Read(ctx, stock.CheckoutRef(prior.CheckoutID))
}

// Product reads one product from the database.
func (s *Service) Product(ctx context.Context, sku string) (stock.Product, error) {
	return s.store.Product(ctx, sku)
}

// Products lists up to limit products, by SKU.
func (s *Service) Products(ctx context.Context, limit int) ([]stock.Product, error) {
	return s.store.Products(ctx, limit)
}

// Read reads an order or a checkout: from the order queue's record first when the queued
// strategy is offered, from the database when the queue has none or cannot be asked.
func (s *Service) Read(ctx context.Context, ref stock.Ref) (stock.Checkout, error) {
	if s.queued == nil {
		return s.store.Read(ctx, ref)
	}
	co, err := s.queued.Read(ctx, ref)
	return s.orStored(ctx, ref, co, err)
}

// Wait is Read, held while the request is queued, until a writer places or rejects it or wait
// passes. The record comes first: right after a 202 the database has nothing yet.
func (s *Service) Wait(ctx context.Context, ref stock.Ref, wait time.Duration) (stock.Checkout, error) {
	if s.queued == nil {
		return s.store.Read(ctx, ref)
	}
	co, err := s.queued.Wait(ctx, ref, wait, true)
	if !errors.Is(err, stock.ErrNotFound) {
		return s.orStored(ctx, ref, co, err)
	}
	stored, err := s.store.Read(ctx, ref)
	if !errors.Is(err, stock.ErrNotFound) {
		return stored, err
	}
	// Neither has it yet: a queued request whose publisher's record did not land is recorded
	// by the writer that takes its message.
	return s.queued.Wait(ctx, ref, wait, false)
}

// orStored is the queue's answer (co, err), or the database's when the queue has no record or
// could not say; with neither, not found, or unavailable if the queue did not answer.
func (s *Service) orStored(ctx context.Context, ref stock.Ref, co stock.Checkout, err error) (stock.Checkout, error) {
	switch {
	case err == nil:
		return co, nil
	case errors.Is(err, stock.ErrNotFound):
		return s.store.Read(ctx, ref)
	case errors.Is(err, stock.ErrUnavailable):
		stored, serr := s.store.Read(ctx, ref)
		if errors.Is(serr, stock.ErrNotFound) {
			return stock.Checkout{}, err
		}
		return stored, serr
	}
	return stock.Checkout{}, err
}

// PutProduct starts a sale round (stock.Store.PutProduct). Redis admission's state goes first (no
// reset without Redis: no old counter outlives one); every instance drops its flag and window.
func (s *Service) PutProduct(ctx context.Context, spec stock.ProductSpec) (stock.Product, error) {
	if err := s.admission.Invalidate(ctx, spec.SKU); err != nil {
		return stock.Product{}, err
	}
	p, err := s.store.PutProduct(ctx, spec)
	if err != nil {
		return stock.Product{}, err
	}
	s.catalog.drop(p.SKU)
	if s.soldOut != nil {
		s.soldOut.Reset(ctx, p.SKU)
	}
	// A failure here leaves no counter, and the first order warms one from the database.
	if err := s.admission.Reconcile(ctx, p.SKU); err != nil {
		s.log.Warn("admission not warmed after reset; the first order will warm it", "sku", p.SKU, "err", err)
	}
	return p, nil
}

// sweep returns to sale, once, the units of reservations whose order never reached the database,
// for products admitted here lately (admission.Ledger.Sweep): it bounds a dead instance's units' wait.
func (s *Service) sweep(ctx context.Context) {
	skus := s.admission.Recent(admission.RecentWindow)
	if len(skus) == 0 {
		return
	}
	live, err := s.admission.Live(ctx)
	if err != nil {
		s.log.Debug("live instances not read; no sweep this time", "err", err)
		return
	}
	for _, sku := range skus {
		if _, err := s.admission.Sweep(ctx, sku, live); err != nil && ctx.Err() == nil {
			s.log.Debug("reservations not swept; next time", "sku", sku, "err", err)
		}
	}
}

// every runs step every period, each run bounded by the period, until ctx ends (Close waits).
func (s *Service) every(ctx context.Context, period time.Duration, step func(ctx context.Context)) {
	s.background.Go(func() {
		tick := time.NewTicker(period)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			stepCtx, cancel := context.WithTimeout(ctx, period)
			step(stepCtx)
			cancel()
		}
	})
}

// Audit is a product's consistency report: the database's, and Redis admission's if it answered.
type Audit struct {
	stock.Audit
	Redis  *admission.State
	Queued *int64 // accepted by the queued strategy, not yet written; nil: no queue, or no answer
}

// HeldBack is how many units the database still has that admission does not offer: those of
// reservations in flight, and any stranded until the sweeper returns them. 0 without Redis.
func (a Audit) HeldBack() int64 {
	if a.Redis == nil || a.Redis.Stock == nil {
		return 0
	}
	return max(0, a.Stock-*a.Redis.Stock)
}

// Audit reads the product's audit from the database and its admission state from Redis. A
// Redis failure leaves Redis nil: the database alone decides consistency.
func (s *Service) Audit(ctx context.Context, sku string) (Audit, error) {
	a, err := s.store.Audit(ctx, sku)
	if err != nil {
		return Audit{}, err
	}
	out := Audit{Audit: a}
	if live, err := s.admission.Live(ctx); err == nil {
		if st, err := s.admission.State(ctx, sku, live); err == nil {
			out.Redis = &st
		}
	}
	if s.queued != nil {
		if n, err := s.queued.Backlog(ctx, sku); err == nil {
			out.Queued = &n
		}
	}
	return out, nil
}

// Reconcile rebuilds the product's Redis admission state from the database; then Audit.
func (s *Service) Reconcile(ctx context.Context, sku string) (Audit, error) {
	if err := s.admission.Reconcile(ctx, sku); err != nil {
		return Audit{}, err
	}
	return s.Audit(ctx, sku)
}
