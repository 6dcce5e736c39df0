package service

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/flashsale/seckill/internal/stock"
)

// PlaceCheckout places a checkout — several products, every line or none — through the
// strategy named in req.Strategy, as PlaceOrder places an order: its lines answered from
// memory where they can be (the sale window, the sold-out flags), an Idempotency-Key's repeat
// answered with the original checkout, one in flight waited for.
func (s *Service) PlaceCheckout(ctx context.Context, req stock.CheckoutRequest) (co stock.Checkout, replayed bool, err error) {
	st, err := s.lookup(req.Strategy)
	if err != nil {
		return stock.Checkout{}, false, err
	}
	defer func() {
		outcome := stock.Code(err)
		if replayed {
			outcome = "replayed"
		}
		s.checkouts.WithLabelValues(st.Name(), outcome).Inc()
		s.countBusy(ctx, st.Name(), err)
	}()
	if err = req.Validate(); err != nil {
		return stock.Checkout{}, false, err
	}
	refused := make([]error, len(req.Lines))
	now := time.Now()
	for i, line := range req.Lines {
		refused[i] = s.catalog.check(ctx, line.SKU, now)
	}
	if err = stock.Refusal(req.Lines, refused); err != nil {
		if errors.Is(err, stock.ErrSaleEnded) && req.IdempotencyKey != "" {
			if co, rerr := s.replayCheckout(ctx, req); !errors.Is(rerr, stock.ErrNotFound) {
				return co, rerr == nil, rerr
			}
		}
		return stock.Checkout{}, false, err
	}
	flagged := s.soldOut != nil && !s.unsafe[st.Name()]
	if flagged {
		for i, line := range req.Lines {
			line.UserID = req.UserID
			refused[i] = s.soldOut.rejects(line)
		}
		if err = stock.Refusal(req.Lines, refused); err != nil {
			return stock.Checkout{}, false, err
		}
	}
	if err = s.database.refuses(); err != nil {
		return stock.Checkout{}, false, err
	}
	start := time.Now()
	for {
		co, err = st.Place(ctx, req)
		var refusedLines *stock.CheckoutError
		if flagged && errors.Is(err, stock.ErrSoldOut) && errors.As(err, &refusedLines) {
			for _, sku := range refusedLines.SKUs {
				s.soldOut.learn(sku)
			}
		}
		if req.IdempotencyKey != "" && mayRepeat(err) {
			if co, rerr := s.replayCheckout(ctx, req); !errors.Is(rerr, stock.ErrNotFound) {
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

// replayCheckout finds the checkout already placed under req's Idempotency-Key. A key used by
// an order, or by a checkout of other lines, is a conflict.
func (s *Service) replayCheckout(ctx context.Context, req stock.CheckoutRequest) (stock.Checkout, error) {
	prior, err := s.store.OrderByIdempotencyKey(ctx, req.IdempotencyKey)
	if errors.Is(err, stock.ErrNotFound) && s.queued != nil && req.Strategy == s.queued.Name() {
		return s.queued.ReplayCheckout(ctx, req)
	}
	if err != nil {
		return stock.Checkout{}, err
	}
	if prior.CheckoutID == "" || prior.RequestHash != req.Fingerprint() {
		return stock.Checkout{}, fmt.Errorf("key %q: %w", req.IdempotencyKey, stock.ErrIdempotencyConflict)
	}
	return s.store.Checkout(ctx, prior.CheckoutID)
}

// Checkout reads a checkout: with the queued strategy offered, from the order queue's record
// first, as Order an order.
func (s *Service) Checkout(ctx context.Context, checkoutID string) (stock.Checkout, error) {
	if s.queued == nil {
		return s.store.Checkout(ctx, checkoutID)
	}
	co, err := s.queued.Checkout(ctx, checkoutID)
	return orStored(ctx, checkoutID, co, err, s.store.Checkout)
}

// WaitCheckout is Checkout, held while the checkout is queued — until a writer on any instance
// places or rejects it, or wait passes.
func (s *Service) WaitCheckout(ctx context.Context, checkoutID string, wait time.Duration) (stock.Checkout, error) {
	if s.queued == nil {
		return s.store.Checkout(ctx, checkoutID)
	}
	co, err := s.queued.WaitCheckout(ctx, checkoutID, wait)
	return orStored(ctx, checkoutID, co, err, s.store.Checkout)
}

// PayCheckout confirms every line of the buyer's pending checkout, as PayOrder an order.
func (s *Service) PayCheckout(ctx context.Context, checkoutID, userID string) (stock.Checkout, error) {
	co, err := s.store.PayCheckout(ctx, checkoutID, userID)
	s.transitioned(ctx, "pay", err)
	return co, err
}

// CancelCheckout cancels every line of the buyer's checkout, or of any checkout for an empty
// userID (the admin), as CancelOrder an order: every line's units back on sale before it returns.
func (s *Service) CancelCheckout(ctx context.Context, checkoutID, userID string) (stock.Checkout, error) {
	co, err := s.store.CancelCheckout(ctx, checkoutID, userID)
	s.transitioned(ctx, "cancel", err)
	return co, err
}
